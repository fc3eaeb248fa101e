"""Bessel functions as vector compositions: modified I0 and I1 (and their exponentially
scaled forms i0e, i1e) from the power series for |x| <= 15 and the asymptotic series
above; the spherical j0 as sin(x)/x."""

from __future__ import annotations

import math

import torch

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, UnaryKind
from compiler.lowerings.registry import LoweringFn, lowering

aten = torch.ops.aten

_SERIES_LIMIT = 15.0
"""|x| up to which the power series is summed (30 terms reach f32 precision there)."""
_TERMS = 30
_ASYMPTOTIC_TERMS = 6


def _asymptotic_coefficients(order: int) -> list[float]:
    """``a_k`` of ``I_v(x) ~ e^x / sqrt(2 pi x) sum_k a_k / x^k``:
    ``(-1)^k prod_{j<=k} (4 v^2 - (2j - 1)^2) / (k! 8^k)``."""
    out, c = [1.0], 1.0
    for k in range(1, _ASYMPTOTIC_TERMS):
        c *= -(4 * order * order - (2 * k - 1) ** 2) / (k * 8)
        out.append(c)
    return out


def bessel_i(b: GraphBuilder, x: Value, order: int, scaled: bool) -> Value:
    """``I_order(x)`` (order 0 or 1), times ``e^-|x|`` when ``scaled``. Power series
    ``sum_k (x/2)^(2k + order) / (k! (k + order)!)`` for |x| <= 15 (its terms by
    recurrence); above, the asymptotic series (inf once e^|x| overflows, as torch)."""
    x = x if x.dtype.is_float else b.cast(x, DType.f32)
    a = b.unary(UnaryKind.abs, x)
    small = b.binary(BinaryKind.le, a, _SERIES_LIMIT)
    near = b.select(small, a, 0.0)
    q = b.binary(BinaryKind.mul, b.unary(UnaryKind.square, near), 0.25)
    term = b.binary(BinaryKind.mul, near, 0.5) if order else b.splat(1.0, x.shape, x.dtype)
    total = term
    for k in range(1, _TERMS + 1):
        term = b.binary(BinaryKind.mul, b.binary(BinaryKind.mul, term, q), 1.0 / (k * (k + order)))
        total = b.binary(BinaryKind.add, total, term)
    if scaled:
        total = b.binary(BinaryKind.mul, total, b.unary(UnaryKind.exp, b.unary(UnaryKind.neg,
                                                                              near)))
    far = b.select(small, 2 * _SERIES_LIMIT, a)
    inv = b.unary(UnaryKind.reciprocal, far)
    coefficients = _asymptotic_coefficients(order)
    series = b.binary(BinaryKind.mul, inv, coefficients[-1])
    for c in reversed(coefficients[1:-1]):
        series = b.binary(BinaryKind.mul, inv, b.binary(BinaryKind.add, series, c))
    series = b.binary(BinaryKind.add, series, coefficients[0])
    scale = b.unary(UnaryKind.rsqrt, b.binary(BinaryKind.mul, far, 2 * math.pi))
    if not scaled:
        scale = b.binary(BinaryKind.mul, scale, b.unary(UnaryKind.exp, far))
    asymptotic = b.binary(BinaryKind.mul, scale, series)
    out = b.select(small, total, asymptotic)
    if order % 2:  # odd order: odd function
        out = b.binary(BinaryKind.copysign, out, x)
    return out


def _bessel(order: int, scaled: bool) -> LoweringFn:
    def lower(b: GraphBuilder, x: Value) -> Value:
        return bessel_i(b, x, order, scaled)
    return lower


lowering(aten.i0.default, aten.special_modified_bessel_i0.default)(_bessel(0, False))
lowering(aten.special_i0e.default)(_bessel(0, True))
lowering(aten.special_i1.default, aten.special_modified_bessel_i1.default)(_bessel(1, False))
lowering(aten.special_i1e.default)(_bessel(1, True))


@lowering(aten.special_spherical_bessel_j0.default)
def lower_spherical_bessel_j0(b: GraphBuilder, x: Value) -> Value:
    """``sin(x) / x``, 1 at 0 (and 1 - x^2/6 + x^4/120 below 1e-3, where the ratio
    rounds badly)."""
    x = x if x.dtype.is_float else b.cast(x, DType.f32)
    ratio = b.binary(BinaryKind.div, b.unary(UnaryKind.sin, x), x)
    x2 = b.unary(UnaryKind.square, x)
    series = b.binary(BinaryKind.add, b.binary(BinaryKind.mul, x2, b.binary(
        BinaryKind.add, b.binary(BinaryKind.mul, x2, 1 / 120), -1 / 6)), 1.0)
    out = b.select(b.binary(BinaryKind.lt, b.unary(UnaryKind.abs, x), 1e-3), series, ratio)
    return b.select(b.binary(BinaryKind.eq, b.unary(UnaryKind.abs, x), math.inf), 0.0, out)
