"""More reductions built from the vector engine's reduce, compare and select: max/min
with and without a dim (values and indices), aminmax, prod (a log-step tree of
multiplies), count_nonzero, logsumexp, trace."""

from __future__ import annotations

from typing import Any

import torch

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder, normalize_dim
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind, UnaryKind
from compiler.lowerings.movement import lower_cat
from compiler.lowerings.reduction import _arg_extreme, _axes
from compiler.lowerings.registry import LoweringFn, lowering
from compiler.torch_types import ir_dtype

aten = torch.ops.aten


def _extreme_all(kind: ReduceKind) -> LoweringFn:
    """max(x) / min(x): one reduce over every axis (NaN wins, as in torch)."""
    def lower(b: GraphBuilder, x: Value) -> Value:
        return b.reduce(kind, x, (), False)
    return lower


lowering(aten.max.default)(_extreme_all(ReduceKind.max))
lowering(aten.min.default)(_extreme_all(ReduceKind.min))


def _extreme_dim(kind: ReduceKind) -> LoweringFn:
    """max(x, dim) / min(x, dim): the reduced values and the first position holding
    each (NaN counts as the extreme)."""
    def lower(b: GraphBuilder, x: Value, dim: int, keepdim: bool = False
              ) -> tuple[Value, Value]:
        if not x.shape:
            return x, b.splat(0, (), DType.i64)
        values = b.reduce(kind, x, (dim,), keepdim)
        return values, _arg_extreme(b, x, dim, keepdim, kind)
    return lower


lowering(aten.max.dim)(_extreme_dim(ReduceKind.max))
lowering(aten.min.dim)(_extreme_dim(ReduceKind.min))


@lowering(aten.aminmax.default)
def lower_aminmax(b: GraphBuilder, x: Value, *, dim: int | None = None,
                  keepdim: bool = False) -> tuple[Value, Value]:
    """Two reduces of the same input (min and max) over ``dim`` or every axis."""
    axes = () if dim is None else (dim,)
    return b.reduce(ReduceKind.min, x, axes, keepdim), b.reduce(ReduceKind.max, x, axes,
                                                                 keepdim)


def product_last(b: GraphBuilder, x: Value) -> Value:
    """Product along the last axis as a tree: each step multiplies the first half of
    the row by the second half (one vector multiply of two slices), an odd element
    carried to the next step; log2(length) steps. Keeps the axis with length 1."""
    while x.shape[-1] > 1:
        n = x.shape[-1]
        half = n // 2
        step = b.binary(BinaryKind.mul, b.slice(x, -1, 0, half), b.slice(x, -1, half, 2 * half))
        x = step if n % 2 == 0 else lower_cat(b, [step, b.slice(x, -1, 2 * half, n)],
                                              len(x.shape) - 1)
    return x


def product(b: GraphBuilder, x: Value, axes: tuple[int, ...], keepdim: bool) -> Value:
    """Product over ``axes``: the reduced axes moved last (a transpose) and merged, then
    :func:`product_last`."""
    rank = len(x.shape)
    if rank == 0:
        return x
    axes = tuple(sorted({normalize_dim(a, rank, b.source) for a in axes})) if axes \
        else tuple(range(rank))
    kept = [d for d in range(rank) if d not in axes]
    moved = b.permute(x, (*kept, *axes))
    count = 1
    for a in axes:
        count *= x.shape[a]
    flat = b.view(moved, tuple(x.shape[d] for d in kept) + (count,))
    out = product_last(b, flat)
    if keepdim:
        return b.view(out, tuple(1 if d in axes else n for d, n in enumerate(x.shape)))
    return b.view(out, tuple(x.shape[d] for d in kept))


def _product_dtype(b: GraphBuilder, x: Value, dtype: torch.dtype | None) -> Value:
    if dtype is not None:
        return b.cast(x, ir_dtype(dtype, b.source))
    return x if x.dtype.is_float else b.cast(x, DType.i64)  # torch multiplies ints as i64


@lowering(aten.prod.default)
def lower_prod(b: GraphBuilder, x: Value, *, dtype: torch.dtype | None = None) -> Value:
    return product(b, _product_dtype(b, x, dtype), (), False)


@lowering(aten.prod.dim_int)
def lower_prod_dim(b: GraphBuilder, x: Value, dim: int, keepdim: bool = False, *,
                   dtype: torch.dtype | None = None) -> Value:
    return product(b, _product_dtype(b, x, dtype), (dim,), keepdim)


@lowering(aten.count_nonzero.dim_IntList, aten.count_nonzero.default)
def lower_count_nonzero(b: GraphBuilder, x: Value, dim: Any = None) -> Value:
    """A compare with zero, summed as i64."""
    nonzero = b.cast(b.binary(BinaryKind.ne, x, 0), DType.i64)
    return b.reduce(ReduceKind.sum, nonzero, _axes(dim, len(x.shape)), False)


@lowering(aten.logsumexp.default)
def lower_logsumexp(b: GraphBuilder, x: Value, dim: Any = (), keepdim: bool = False) -> Value:
    """``log(sum(exp(x - m))) + m`` with ``m`` the max (0 where the max is infinite, so
    all -inf rows give -inf and +inf rows +inf, as in torch)."""
    xf = x if x.dtype.is_float else b.cast(x, DType.f32)
    axes = _axes(dim, len(x.shape))
    peak = b.reduce(ReduceKind.max, xf, axes, True)
    infinite = b.binary(BinaryKind.eq, b.unary(UnaryKind.abs, peak), float("inf"))
    peak = b.select(infinite, 0.0, peak)
    total = b.reduce(ReduceKind.sum, b.unary(UnaryKind.exp, b.binary(BinaryKind.sub, xf, peak)),
                     axes, True)
    out = b.binary(BinaryKind.add, b.unary(UnaryKind.log, total), peak)
    if keepdim or not xf.shape:
        return out
    rank = len(xf.shape)
    dropped = {normalize_dim(a, rank, b.source) for a in axes}
    return b.view(out, tuple(n for d, n in enumerate(xf.shape) if d not in dropped))


@lowering(aten.trace.default)
def lower_trace(b: GraphBuilder, x: Value) -> Value:
    """The diagonal kept by a row == column mask (off-diagonal elements zeroed), then
    one sum."""
    rows, cols = x.shape
    if not x.dtype.is_float:
        x = b.cast(x, DType.i64)
    diagonal = b.binary(BinaryKind.eq, b.arange(rows, (rows, 1)), b.arange(cols, (1, cols)))
    return b.reduce(ReduceKind.sum, b.select(diagonal, x, 0), (), False)
