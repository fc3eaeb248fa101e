"""Elementwise unary/binary ops, where, clamp, casts, fills: vector primitives with
broadcasting and torch type promotion (in :class:`GraphBuilder`)."""

from __future__ import annotations

from typing import Any

import torch

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder, promote
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, UnaryKind
from compiler.lowerings.registry import lowering
from compiler.torch_types import ir_dtype

aten = torch.ops.aten

_UNARY: dict[Any, UnaryKind] = {
    aten.neg.default: UnaryKind.neg, aten.abs.default: UnaryKind.abs,
    aten.relu.default: UnaryKind.relu, aten.exp.default: UnaryKind.exp,
    aten.log.default: UnaryKind.log, aten.sqrt.default: UnaryKind.sqrt,
    aten.rsqrt.default: UnaryKind.rsqrt, aten.reciprocal.default: UnaryKind.reciprocal,
    aten.tanh.default: UnaryKind.tanh, aten.sigmoid.default: UnaryKind.sigmoid,
    aten.silu.default: UnaryKind.silu, aten.sin.default: UnaryKind.sin,
    aten.cos.default: UnaryKind.cos, aten.erf.default: UnaryKind.erf,
    aten.logical_not.default: UnaryKind.logical_not,
    aten.tan.default: UnaryKind.tan, aten.acos.default: UnaryKind.acos,
    aten.asin.default: UnaryKind.asin, aten.atan.default: UnaryKind.atan,
    aten.sinh.default: UnaryKind.sinh, aten.cosh.default: UnaryKind.cosh,
    aten.asinh.default: UnaryKind.asinh, aten.acosh.default: UnaryKind.acosh,
    aten.atanh.default: UnaryKind.atanh, aten.expm1.default: UnaryKind.expm1,
    aten.log1p.default: UnaryKind.log1p, aten.log2.default: UnaryKind.log2,
    aten.log10.default: UnaryKind.log10, aten.exp2.default: UnaryKind.exp2,
    aten.sign.default: UnaryKind.sign, aten.sgn.default: UnaryKind.sign,
    aten.trunc.default: UnaryKind.trunc, aten.fix.default: UnaryKind.trunc,
    aten.floor.default: UnaryKind.floor, aten.ceil.default: UnaryKind.ceil,
    aten.round.default: UnaryKind.round, aten.frac.default: UnaryKind.frac,
}

_BINARY: dict[Any, BinaryKind] = {
    aten.mul.Tensor: BinaryKind.mul, aten.mul.Scalar: BinaryKind.mul,
    aten.div.Tensor: BinaryKind.div, aten.div.Scalar: BinaryKind.div,
    aten.maximum.default: BinaryKind.max, aten.minimum.default: BinaryKind.min,
    aten.pow.Tensor_Tensor: BinaryKind.pow,
    aten.eq.Tensor: BinaryKind.eq, aten.eq.Scalar: BinaryKind.eq,
    aten.ne.Tensor: BinaryKind.ne, aten.ne.Scalar: BinaryKind.ne,
    aten.lt.Tensor: BinaryKind.lt, aten.lt.Scalar: BinaryKind.lt,
    aten.le.Tensor: BinaryKind.le, aten.le.Scalar: BinaryKind.le,
    aten.gt.Tensor: BinaryKind.gt, aten.gt.Scalar: BinaryKind.gt,
    aten.ge.Tensor: BinaryKind.ge, aten.ge.Scalar: BinaryKind.ge,
    aten.logical_and.default: BinaryKind.logical_and,
    aten.logical_or.default: BinaryKind.logical_or,
    aten.atan2.default: BinaryKind.atan2, aten.copysign.Tensor: BinaryKind.copysign,
    aten.remainder.Tensor: BinaryKind.remainder, aten.remainder.Scalar: BinaryKind.remainder,
    aten.fmod.Tensor: BinaryKind.fmod, aten.fmod.Scalar: BinaryKind.fmod,
    aten.hypot.default: BinaryKind.hypot, aten.logaddexp.default: BinaryKind.logaddexp,
}

_BOOLEAN: dict[Any, BinaryKind] = {
    aten.bitwise_and.Tensor: BinaryKind.logical_and,
    aten.bitwise_or.Tensor: BinaryKind.logical_or,
}
"""Bitwise ops, lowered for bool tensors only (masks): on integers they are not logical."""


def _unary_lowering(kind: UnaryKind):
    def lower(b: GraphBuilder, x: Value) -> Value:
        return b.unary(kind, x)
    return lower


def _binary_lowering(kind: BinaryKind):
    def lower(b: GraphBuilder, x: Any, y: Any) -> Value:
        return b.binary(kind, x, y)
    return lower


for _op, _kind in _UNARY.items():
    lowering(_op)(_unary_lowering(_kind))
for _op, _kind in _BINARY.items():
    lowering(_op)(_binary_lowering(_kind))


def _boolean_lowering(kind: BinaryKind):
    def lower(b: GraphBuilder, x: Any, y: Any) -> Value:
        if any(isinstance(v, Value) and v.dtype is not DType.bool for v in (x, y)):
            raise NotImplementedError("bitwise ops on integers")
        return b.binary(kind, x, y)
    return lower


for _op, _kind in _BOOLEAN.items():
    lowering(_op)(_boolean_lowering(_kind))


@lowering(aten.add.Tensor, aten.add.Scalar)
def lower_add(b: GraphBuilder, x: Any, y: Any, *, alpha: float = 1) -> Value:
    if alpha != 1:
        y = b.binary(BinaryKind.mul, y, alpha) if isinstance(y, Value) else y * alpha
    if not isinstance(x, Value):
        x, y = y, x
    return b.binary(BinaryKind.add, x, y)


@lowering(aten.sub.Tensor, aten.sub.Scalar)
def lower_sub(b: GraphBuilder, x: Any, y: Any, *, alpha: float = 1) -> Value:
    if alpha != 1:
        y = b.binary(BinaryKind.mul, y, alpha) if isinstance(y, Value) else y * alpha
    return b.binary(BinaryKind.sub, x, y)


@lowering(aten.rsub.Scalar, aten.rsub.Tensor)
def lower_rsub(b: GraphBuilder, x: Any, y: Any, *, alpha: float = 1) -> Value:
    return lower_sub(b, y, x, alpha=alpha)


@lowering(aten.pow.Tensor_Scalar)
def lower_pow(b: GraphBuilder, x: Value, exponent: float) -> Value:
    if exponent == 2:
        return b.unary(UnaryKind.square, x)
    if exponent == 1:
        return x
    if exponent == 0.5:
        return b.unary(UnaryKind.sqrt, x)
    if exponent == -0.5:
        return b.unary(UnaryKind.rsqrt, x)
    if exponent == -1:
        return b.unary(UnaryKind.reciprocal, x)
    return b.binary(BinaryKind.pow, x, float(exponent))


@lowering(aten.gelu.default)
def lower_gelu(b: GraphBuilder, x: Value, *, approximate: str = "none") -> Value:
    return b.unary(UnaryKind.gelu_tanh if approximate == "tanh" else UnaryKind.gelu, x)


@lowering(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar)
def lower_where(b: GraphBuilder, cond: Value, x: Any, y: Any) -> Value:
    return b.select(cond, x, y)


@lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def lower_masked_fill(b: GraphBuilder, x: Value, mask: Value, value: Any) -> Value:
    """``where(mask, value, x)``: attention masks stay on the vector engine."""
    return b.select(mask, value, x)


@lowering(aten.clamp.default, aten.clamp.Tensor, aten.hardtanh.default)
def lower_clamp(b: GraphBuilder, x: Value, min: Any = None, max: Any = None) -> Value:
    out = x
    if min is not None:
        out = b.binary(BinaryKind.max, out, min)
    if max is not None:
        out = b.binary(BinaryKind.min, out, max)
    return out


@lowering(aten.relu6.default)
def lower_relu6(b: GraphBuilder, x: Value) -> Value:
    """``F.relu6`` as torch.export keeps it without decompositions: a clamp, so it fuses
    into the convolution before it (it became a vector kernel of its own)."""
    return lower_clamp(b, x, 0.0, 6.0)


@lowering(aten.clamp_min.default, aten.clamp_min.Tensor)
def lower_clamp_min(b: GraphBuilder, x: Value, min: Any) -> Value:
    return b.binary(BinaryKind.max, x, min)


@lowering(aten.clamp_max.default, aten.clamp_max.Tensor)
def lower_clamp_max(b: GraphBuilder, x: Value, max: Any) -> Value:
    return b.binary(BinaryKind.min, x, max)


@lowering(aten._to_copy.default, aten.to.dtype)
def lower_to_copy(b: GraphBuilder, x: Value, dtype: torch.dtype | None = None,
                  **kwargs: Any) -> Value:
    if dtype is None:
        return x
    return b.cast(x, ir_dtype(dtype, b.source))


@lowering(aten.hardswish.default)
def lower_hardswish(b: GraphBuilder, x: Value) -> Value:
    gate = b.binary(BinaryKind.min, b.binary(BinaryKind.max, b.binary(BinaryKind.add, x, 3.0),
                                             0.0), 6.0)
    return b.binary(BinaryKind.div, b.binary(BinaryKind.mul, x, gate), 6.0)


@lowering(aten.leaky_relu.default)
def lower_leaky_relu(b: GraphBuilder, x: Value, negative_slope: float = 0.01) -> Value:
    return b.select(b.binary(BinaryKind.gt, x, 0.0), x,
                    b.binary(BinaryKind.mul, x, float(negative_slope)))


@lowering(aten.full.default)
def lower_full(b: GraphBuilder, size: list[int], fill_value: float, *,
               dtype: torch.dtype | None = None, **kwargs: Any) -> Value:
    ir = ir_dtype(dtype, b.source) if dtype is not None else \
        ir_dtype(torch.tensor(fill_value).dtype if not isinstance(fill_value, float)
                 else torch.get_default_dtype(), b.source)
    return b.splat(fill_value, tuple(size), ir)


@lowering(aten.scalar_tensor.default)
def lower_scalar_tensor(b: GraphBuilder, value: float, *, dtype: torch.dtype | None = None,
                        **kwargs: Any) -> Value:
    ir = ir_dtype(dtype or torch.get_default_dtype(), b.source)
    return b.splat(value, (), ir)


@lowering(aten.full_like.default)
def lower_full_like(b: GraphBuilder, x: Value, fill_value: float, *,
                    dtype: torch.dtype | None = None, **kwargs: Any) -> Value:
    return b.splat(fill_value, x.shape, ir_dtype(dtype, b.source) if dtype else x.dtype)


def _fill_like(value: float):
    def lower(b: GraphBuilder, x: Value, *, dtype: torch.dtype | None = None,
              **kwargs: Any) -> Value:
        return b.splat(value, x.shape, ir_dtype(dtype, b.source) if dtype else x.dtype)
    return lower


lowering(aten.zeros_like.default)(_fill_like(0.0))
# Uninitialized memory: whatever the device holds; zeros, made on the device.
lowering(aten.empty_like.default)(_fill_like(0.0))


@lowering(aten.empty_permuted.default)
def lower_empty_permuted(b: GraphBuilder, size: list[int], physical_layout: list[int], *,
                         dtype: torch.dtype | None = None, **kwargs: Any) -> Value:
    return b.splat(0.0, tuple(size), ir_dtype(dtype or torch.get_default_dtype(), b.source))


@lowering(aten.empty.memory_format)
def lower_empty(b: GraphBuilder, size: list[int], *, dtype: torch.dtype | None = None,
                **kwargs: Any) -> Value:
    return b.splat(0.0, tuple(size), ir_dtype(dtype or torch.get_default_dtype(), b.source))
lowering(aten.ones_like.default)(_fill_like(1.0))



@lowering(aten.isnan.default)
def lower_isnan(b: GraphBuilder, x: Value) -> Value:
    return b.binary(BinaryKind.ne, x, x)


@lowering(aten.isinf.default)
def lower_isinf(b: GraphBuilder, x: Value) -> Value:
    return b.binary(BinaryKind.eq, b.unary(UnaryKind.abs, x), float("inf"))


@lowering(aten.isfinite.default)
def lower_isfinite(b: GraphBuilder, x: Value) -> Value:
    """``x - x`` is 0 for finite values and NaN for infinities and NaN."""
    if not x.dtype.is_float:
        return b.binary(BinaryKind.eq, x, x)
    return b.binary(BinaryKind.eq, b.binary(BinaryKind.sub, x, x), 0.0)


@lowering(aten.elu.default)
def lower_elu(b: GraphBuilder, x: Value, alpha: float = 1.0, scale: float = 1.0,
              input_scale: float = 1.0) -> Value:
    negative = b.binary(BinaryKind.mul, b.unary(
        UnaryKind.expm1, b.binary(BinaryKind.mul, x, float(input_scale))), float(alpha))
    out = b.select(b.binary(BinaryKind.gt, x, 0.0), x, negative)
    return out if scale == 1 else b.binary(BinaryKind.mul, out, float(scale))


@lowering(aten.lerp.Scalar, aten.lerp.Tensor)
def lower_lerp(b: GraphBuilder, start: Value, end: Value, weight: Any) -> Value:
    step = b.binary(BinaryKind.sub, end, start)
    return b.binary(BinaryKind.add, start, b.binary(BinaryKind.mul, step, weight))


@lowering(aten.xlogy.Tensor)
def lower_xlogy(b: GraphBuilder, x: Value, y: Value) -> Value:
    """``x * log(y)``, 0 where x is 0 unless y is NaN (torch's definition)."""
    product = b.binary(BinaryKind.mul, x, b.unary(UnaryKind.log, y))
    zero = b.binary(BinaryKind.logical_and, b.binary(BinaryKind.eq, x, 0.0),
                    b.binary(BinaryKind.eq, y, y))
    return b.select(zero, 0.0, product)


@lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def lower_div_mode(b: GraphBuilder, x: Any, y: Any, *, rounding_mode: str | None = None
                   ) -> Value:
    quotient = b.binary(BinaryKind.div, x, y)
    if rounding_mode is None:
        return quotient
    kind = {"trunc": UnaryKind.trunc, "floor": UnaryKind.floor}[rounding_mode]
    rounded = b.unary(kind, quotient)
    operands = [v for v in (x, y) if isinstance(v, Value)]
    integral = all(not v.dtype.is_float for v in operands) and not any(
        isinstance(v, float) for v in (x, y))
    return b.cast(rounded, promote(operands)) if integral else rounded


@lowering(aten.round.decimals)
def lower_round_decimals(b: GraphBuilder, x: Value, *, decimals: int = 0) -> Value:
    scale = 10.0 ** decimals
    return b.binary(BinaryKind.div, b.unary(
        UnaryKind.round, b.binary(BinaryKind.mul, x, scale)), scale)
