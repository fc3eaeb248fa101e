"""Reductions along any axes (sum, mean, amax, amin, any, var, var_mean, argmax,
argmin), softmax, log_softmax."""

from __future__ import annotations

from typing import Any

import torch

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder, normalize_dim
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind, UnaryKind
from compiler.lowerings.registry import lowering
from compiler.torch_types import ir_dtype

aten = torch.ops.aten


def _axes(dims: Any, rank: int) -> tuple[int, ...]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return tuple(dims)


@lowering(aten.sum.dim_IntList, aten.sum.default)
def lower_sum(b: GraphBuilder, x: Value, dim: Any = None, keepdim: bool = False, *,
              dtype: torch.dtype | None = None) -> Value:
    ir = ir_dtype(dtype, b.source) if dtype is not None else None
    return b.reduce(ReduceKind.sum, x, _axes(dim, len(x.shape)), keepdim, ir)


@lowering(aten.mean.dim, aten.mean.default)
def lower_mean(b: GraphBuilder, x: Value, dim: Any = None, keepdim: bool = False, *,
               dtype: torch.dtype | None = None) -> Value:
    ir = ir_dtype(dtype, b.source) if dtype is not None else None
    return b.reduce(ReduceKind.mean, x, _axes(dim, len(x.shape)), keepdim, ir)


@lowering(aten.amax.default)
def lower_amax(b: GraphBuilder, x: Value, dim: Any = (), keepdim: bool = False) -> Value:
    return b.reduce(ReduceKind.max, x, _axes(dim, len(x.shape)), keepdim)


@lowering(aten.amin.default)
def lower_amin(b: GraphBuilder, x: Value, dim: Any = (), keepdim: bool = False) -> Value:
    return b.reduce(ReduceKind.min, x, _axes(dim, len(x.shape)), keepdim)


@lowering(aten.any.dim, aten.any.dims, aten.any.default)
def lower_any(b: GraphBuilder, x: Value, dim: Any = None, keepdim: bool = False) -> Value:
    return b.reduce(ReduceKind.max, b.cast(x, DType.bool), _axes(dim, len(x.shape)), keepdim)


@lowering(aten.var.correction, aten.var.dim)
def lower_var(b: GraphBuilder, x: Value, dim: Any = None, *args: Any, correction: float = 1,
              keepdim: bool = False, unbiased: bool | None = None) -> Value:
    if args:  # var.dim(x, dim, unbiased, keepdim)
        unbiased = args[0]
        keepdim = args[1] if len(args) > 1 else keepdim
    if unbiased is not None:
        correction = 1 if unbiased else 0
    axes = _axes(dim, len(x.shape))
    count = 1
    for a in axes:
        count *= x.shape[normalize_dim(a, len(x.shape), b.source)]
    xf = b.cast(x, DType.f32) if x.dtype is not DType.f32 else x
    mean = b.reduce(ReduceKind.mean, xf, axes, True)
    centered = b.binary(BinaryKind.sub, xf, mean)
    var = b.reduce(ReduceKind.mean, b.unary(UnaryKind.square, centered), axes, keepdim)
    scale = count / max(count - correction, 1e-30) if count > correction else float("nan")
    if scale != 1:
        var = b.binary(BinaryKind.mul, var, scale)
    return b.cast(var, x.dtype)


@lowering(aten.var_mean.correction)
def lower_var_mean(b: GraphBuilder, x: Value, dim: Any = None, *, correction: float = 1,
                   keepdim: bool = False) -> tuple[Value, Value]:
    mean = b.reduce(ReduceKind.mean, x, _axes(dim, len(x.shape)), keepdim)
    var = lower_var(b, x, dim, correction=correction, keepdim=keepdim)
    return var, b.cast(mean, var.dtype)


def _arg_extreme(b: GraphBuilder, x: Value, dim: int | None, keepdim: bool,
                 kind: ReduceKind) -> Value:
    """Index of the first maximum (minimum) along ``dim`` (of the flattened tensor when
    None): the extreme, then the smallest position holding it. NaN counts as the
    extreme, as in torch."""
    if not x.shape:  # a 0-d tensor: its one element
        return b.splat(0, (), DType.i64)
    if dim is None:
        flat = b.view(x, (-1,))
        out = _arg_extreme(b, flat, 0, False, kind)
        return b.view(out, (1,) * len(x.shape)) if keepdim else out
    dim = normalize_dim(dim, len(x.shape), b.source)
    if x.shape[dim] == 0:
        raise NotImplementedError("argmax over an empty dim")
    xf = b.cast(x, DType.f32) if x.dtype is DType.bool else x
    nan = b.binary(BinaryKind.ne, xf, xf) if xf.dtype.is_float else None
    extreme = b.reduce(kind, xf, (dim,), True)
    hit = b.binary(BinaryKind.eq, xf, extreme)
    if nan is not None:  # a NaN row: its first NaN
        any_nan = b.reduce(ReduceKind.max, b.cast(nan, DType.f32), (dim,), True)
        hit = b.select(b.binary(BinaryKind.gt, any_nan, 0.0), nan, hit)
    shape = [1] * len(x.shape)
    shape[dim] = x.shape[dim]
    position = b.arange(x.shape[dim], tuple(shape))
    candidates = b.select(hit, position, x.shape[dim])
    return b.reduce(ReduceKind.min, candidates, (dim,), keepdim)


@lowering(aten.argmax.default)
def lower_argmax(b: GraphBuilder, x: Value, dim: int | None = None,
                 keepdim: bool = False) -> Value:
    return _arg_extreme(b, x, dim, keepdim, ReduceKind.max)


@lowering(aten.argmin.default)
def lower_argmin(b: GraphBuilder, x: Value, dim: int | None = None,
                 keepdim: bool = False) -> Value:
    return _arg_extreme(b, x, dim, keepdim, ReduceKind.min)


def softmax(b: GraphBuilder, x: Value, dim: int, log: bool, out_dtype: DType) -> Value:
    xf = b.cast(x, DType.f32)
    peak = b.reduce(ReduceKind.max, xf, (dim,), True)
    shifted = b.binary(BinaryKind.sub, xf, peak)
    exps = b.unary(UnaryKind.exp, shifted)
    total = b.reduce(ReduceKind.sum, exps, (dim,), True)
    if log:
        out = b.binary(BinaryKind.sub, shifted, b.unary(UnaryKind.log, total))
    else:
        out = b.binary(BinaryKind.div, exps, total)
    return b.cast(out, out_dtype)


@lowering(aten._softmax.default)
def lower_softmax(b: GraphBuilder, x: Value, dim: int, half_to_float: bool = False) -> Value:
    return softmax(b, x, dim, False, DType.f32 if half_to_float else x.dtype)


@lowering(aten._log_softmax.default)
def lower_log_softmax(b: GraphBuilder, x: Value, dim: int,
                      half_to_float: bool = False) -> Value:
    return softmax(b, x, dim, True, DType.f32 if half_to_float else x.dtype)


@lowering(aten.softmax.int)
def lower_softmax_int(b: GraphBuilder, x: Value, dim: int,
                      dtype: torch.dtype | None = None) -> Value:
    return softmax(b, x, dim, False, ir_dtype(dtype, b.source) if dtype else x.dtype)


@lowering(aten.std_mean.correction)
def lower_std_mean(b: GraphBuilder, x: Value, dim: Any = None, *, correction: float = 1,
                   keepdim: bool = False) -> tuple[Value, Value]:
    var, mean = lower_var_mean(b, x, dim, correction=correction, keepdim=keepdim)
    return b.unary(UnaryKind.sqrt, var), mean


@lowering(aten.nansum.default)
def lower_nansum(b: GraphBuilder, x: Value, dim: Any = None, keepdim: bool = False, *,
                 dtype: torch.dtype | None = None) -> Value:
    if x.dtype.is_float:
        x = b.select(b.binary(BinaryKind.ne, x, x), 0.0, x)
    return lower_sum(b, x, dim, keepdim, dtype=dtype)
