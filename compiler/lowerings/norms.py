"""Vector norms (linalg_vector_norm, norm, dist) and renorm: elementwise abs/power on the
vector engine and one reduce (sum, max or min) over the norm's dims."""

from __future__ import annotations

import math
from typing import Any

import torch

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder, normalize_dim
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind, UnaryKind
from compiler.lowerings.registry import lowering
from compiler.torch_types import ir_dtype

aten = torch.ops.aten


def vector_norm(b: GraphBuilder, x: Value, ord: float, dims: Any, keepdim: bool,
                dtype: torch.dtype | None = None) -> Value:
    """``(sum |x|^ord)^(1/ord)`` over ``dims`` (all when None or empty); ord inf/-inf
    is the max/min of ``|x|``, ord 0 the count of nonzeros, 1 and 2 without powers."""
    if dtype is not None:
        x = b.cast(x, ir_dtype(dtype, b.source))
    elif not x.dtype.is_float:
        raise NotImplementedError("vector norm of an integer tensor")  # torch raises
    ord = float(ord)
    if isinstance(dims, int):
        dims = (dims,)
    axes = tuple(dims) if dims else ()
    magnitude = b.unary(UnaryKind.abs, x)
    if ord == math.inf or ord == -math.inf:
        kind = ReduceKind.max if ord > 0 else ReduceKind.min
        return b.reduce(kind, magnitude, axes, keepdim)
    if ord == 0:
        nonzero = b.cast(b.binary(BinaryKind.ne, x, 0.0), x.dtype)
        return b.reduce(ReduceKind.sum, nonzero, axes, keepdim)
    if ord == 1:
        return b.reduce(ReduceKind.sum, magnitude, axes, keepdim)
    if ord == 2:
        total = b.reduce(ReduceKind.sum, b.unary(UnaryKind.square, x), axes, keepdim)
        return b.unary(UnaryKind.sqrt, total)
    total = b.reduce(ReduceKind.sum, b.binary(BinaryKind.pow, magnitude, ord), axes, keepdim)
    return b.binary(BinaryKind.pow, total, 1.0 / ord)


@lowering(aten.linalg_vector_norm.default)
def lower_linalg_vector_norm(b: GraphBuilder, x: Value, ord: float = 2, dim: Any = None,
                             keepdim: bool = False, *,
                             dtype: torch.dtype | None = None) -> Value:
    return vector_norm(b, x, ord, dim, keepdim, dtype)


@lowering(aten.norm.Scalar)
def lower_norm(b: GraphBuilder, x: Value, p: float = 2) -> Value:
    return vector_norm(b, x, p, None, False)


@lowering(aten.norm.ScalarOpt_dim, aten.norm.ScalarOpt_dim_dtype)
def lower_norm_dim(b: GraphBuilder, x: Value, p: float | None, dim: Any,
                   keepdim: bool = False, *, dtype: torch.dtype | None = None) -> Value:
    return vector_norm(b, x, 2 if p is None else p, dim, keepdim, dtype)


@lowering(aten.norm.ScalarOpt_dtype)
def lower_norm_dtype(b: GraphBuilder, x: Value, p: float | None, *,
                     dtype: torch.dtype) -> Value:
    return vector_norm(b, x, 2 if p is None else p, None, False, dtype)


@lowering(aten.dist.default)
def lower_dist(b: GraphBuilder, x: Value, other: Value, p: float = 2) -> Value:
    """The norm of the (broadcast) difference."""
    return vector_norm(b, b.binary(BinaryKind.sub, x, other), p, None, False)


@lowering(aten.renorm.default)
def lower_renorm(b: GraphBuilder, x: Value, p: float, dim: int, maxnorm: float) -> Value:
    """Each slice along ``dim`` whose p-norm exceeds ``maxnorm`` scaled down to it (by
    ``maxnorm / (norm + 1e-7)``, as torch)."""
    rank = len(x.shape)
    if rank == 0:
        raise NotImplementedError("renorm of a 0-d tensor")  # torch raises
    d = normalize_dim(dim, rank, b.source)
    xf = x if x.dtype.is_float else b.cast(x, DType.f32)
    norm = vector_norm(b, xf, p, tuple(a for a in range(rank) if a != d), True)
    scale = b.binary(BinaryKind.div, float(maxnorm), b.binary(BinaryKind.add, norm, 1e-7))
    factor = b.select(b.binary(BinaryKind.gt, norm, float(maxnorm)), scale, 1.0)
    return b.binary(BinaryKind.mul, xf, factor)
