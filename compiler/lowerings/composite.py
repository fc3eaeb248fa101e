"""Pointwise ops that are compositions of the vector primitives (no kind of their own):
addcmul/addcdiv, NaN-ignoring min/max, shrinkage and threshold activations, logit,
sinc, heaviside, sign bit, NaN/infinity replacement, erfc, floor division, MSE loss."""

from __future__ import annotations

import math
from typing import Any

import torch

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind, UnaryKind
from compiler.lowerings.elementwise import lower_div_mode
from compiler.lowerings.registry import lowering

aten = torch.ops.aten


def _plus_scaled(kind: BinaryKind):
    """addcmul / addcdiv: ``x + value * (t1 op t2)``."""
    def lower(b: GraphBuilder, x: Value, t1: Value, t2: Value, *, value: Any = 1) -> Value:
        term = b.binary(kind, t1, t2)
        if value != 1:
            term = b.binary(BinaryKind.mul, term, value)
        return b.binary(BinaryKind.add, x, term)
    return lower


lowering(aten.addcmul.default)(_plus_scaled(BinaryKind.mul))
lowering(aten.addcdiv.default)(_plus_scaled(BinaryKind.div))


def _nan(b: GraphBuilder, x: Value) -> Value:
    return b.binary(BinaryKind.ne, x, x)


def _ignoring_nan(kind: BinaryKind):
    """fmax/fmin: max/min that take the other operand where one is NaN."""
    def lower(b: GraphBuilder, x: Value, y: Value) -> Value:
        both = b.binary(kind, x, y)
        if not both.dtype.is_float:
            return both
        return b.select(_nan(b, x), y, b.select(_nan(b, y), x, both))
    return lower


lowering(aten.fmax.default)(_ignoring_nan(BinaryKind.max))
lowering(aten.fmin.default)(_ignoring_nan(BinaryKind.min))


@lowering(aten.logical_xor.default)
def lower_logical_xor(b: GraphBuilder, x: Value, y: Value) -> Value:
    return b.binary(BinaryKind.ne, b.cast(x, DType.bool), b.cast(y, DType.bool))


@lowering(aten.heaviside.default)
def lower_heaviside(b: GraphBuilder, x: Value, values: Value) -> Value:
    step = b.cast(b.binary(BinaryKind.gt, x, 0), x.dtype)
    return b.select(b.binary(BinaryKind.eq, x, 0), values, step)


@lowering(aten.signbit.default)
def lower_signbit(b: GraphBuilder, x: Value) -> Value:
    """Set for negative numbers, -0.0 and NaNs with the sign bit (copysign reads it)."""
    if not x.dtype.is_float:
        return b.binary(BinaryKind.lt, x, 0)
    return b.binary(BinaryKind.lt, b.binary(BinaryKind.copysign, 1.0, x), 0.0)


@lowering(aten.logit.default)
def lower_logit(b: GraphBuilder, x: Value, eps: float | None = None) -> Value:
    if eps is not None:
        x = b.binary(BinaryKind.min, b.binary(BinaryKind.max, x, eps), 1.0 - eps)
    rest = b.binary(BinaryKind.add, b.unary(UnaryKind.neg, x), 1.0)  # 1 - x
    return b.unary(UnaryKind.log, b.binary(BinaryKind.div, x, rest))


@lowering(aten.sinc.default)
def lower_sinc(b: GraphBuilder, x: Value) -> Value:
    scaled = b.binary(BinaryKind.mul, x, math.pi)
    ratio = b.binary(BinaryKind.div, b.unary(UnaryKind.sin, scaled), scaled)
    return b.select(b.binary(BinaryKind.eq, x, 0.0), 1.0, ratio)


@lowering(aten.hardshrink.default)
def lower_hardshrink(b: GraphBuilder, x: Value, lambd: float = 0.5) -> Value:
    inside = b.binary(BinaryKind.le, b.unary(UnaryKind.abs, x), lambd)
    return b.select(inside, 0.0, x)


@lowering(aten.softshrink.default)
def lower_softshrink(b: GraphBuilder, x: Value, lambd: float = 0.5) -> Value:
    shrunk = b.binary(BinaryKind.sub, x, b.binary(BinaryKind.mul, b.unary(UnaryKind.sign, x),
                                                  lambd))
    inside = b.binary(BinaryKind.le, b.unary(UnaryKind.abs, x), lambd)
    return b.select(inside, 0.0, shrunk)


@lowering(aten.threshold.default)
def lower_threshold(b: GraphBuilder, x: Value, threshold: float, value: float) -> Value:
    return b.select(b.binary(BinaryKind.le, x, threshold), value, x)


@lowering(aten.nan_to_num.default)
def lower_nan_to_num(b: GraphBuilder, x: Value, nan: float | None = None,
                     posinf: float | None = None, neginf: float | None = None) -> Value:
    if not x.dtype.is_float:
        return x
    big = float(torch.finfo(getattr(torch, {DType.f16: "float16", DType.bf16: "bfloat16"}
                                    .get(x.dtype, "float32"))).max)
    out = b.select(_nan(b, x), 0.0 if nan is None else nan, x)
    out = b.select(b.binary(BinaryKind.eq, x, math.inf), big if posinf is None else posinf,
                   out)
    return b.select(b.binary(BinaryKind.eq, x, -math.inf),
                    -big if neginf is None else neginf, out)


@lowering(aten.isposinf.default)
def lower_isposinf(b: GraphBuilder, x: Value) -> Value:
    return b.binary(BinaryKind.eq, x, math.inf)


@lowering(aten.erfc.default)
def lower_erfc(b: GraphBuilder, x: Value) -> Value:
    return b.binary(BinaryKind.add, b.unary(UnaryKind.neg, b.unary(UnaryKind.erf, x)), 1.0)


@lowering(aten.floor_divide.default, aten.floor_divide.Scalar)
def lower_floor_divide(b: GraphBuilder, x: Any, y: Any) -> Value:
    return lower_div_mode(b, x, y, rounding_mode="floor")


@lowering(aten.mse_loss.default)
def lower_mse_loss(b: GraphBuilder, x: Value, target: Value, reduction: int = 1) -> Value:
    error = b.unary(UnaryKind.square, b.binary(BinaryKind.sub, x, target))
    if reduction == 0:
        return error
    kind = ReduceKind.mean if reduction == 1 else ReduceKind.sum
    return b.reduce(kind, error, tuple(range(len(error.shape))), False)
