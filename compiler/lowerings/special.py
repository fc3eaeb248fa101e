"""Special functions as compositions of vector primitives: lgamma and digamma (recurrence
shift to x >= 8, then the Stirling / asymptotic series; reflection for x < 0),
polygamma (Hurwitz zeta: shifted sum plus Euler-Maclaurin tail, reflection for
x < 0), erfinv (Giles' polynomials), ldexp's power of two, frexp, nextafter
(Bessel functions are in :mod:`compiler.lowerings.bessel`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, UnaryKind
from compiler.lowerings.registry import lowering

aten = torch.ops.aten
_SHIFT = 8
"""Recurrence steps that move the argument to where the asymptotic series is exact to
f32 (x + 8 >= 8)."""


def _add(b: GraphBuilder, x: Value | float, y: Value | float) -> Value:
    return b.binary(BinaryKind.add, x, y)


def _mul(b: GraphBuilder, x: Value | float, y: Value | float) -> Value:
    return b.binary(BinaryKind.mul, x, y)


def _sub(b: GraphBuilder, x: Value | float, y: Value | float) -> Value:
    return b.binary(BinaryKind.sub, x, y)


def _div(b: GraphBuilder, x: Value | float, y: Value | float) -> Value:
    return b.binary(BinaryKind.div, x, y)


def _poly(b: GraphBuilder, x: Value, coefficients: Sequence[float]) -> Value:
    """Horner: ``c[0] + x (c[1] + x (c[2] + ...))``."""
    out: Value | float = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        out = _add(b, _mul(b, x, out), c) if isinstance(out, Value) else \
            _add(b, _mul(b, x, float(out)), c)
    return out  # type: ignore[return-value]


def _float(b: GraphBuilder, x: Value) -> Value:
    return x if x.dtype.is_float else b.cast(x, DType.f32)


def _sin_pi(b: GraphBuilder, x: Value) -> Value:
    """``sin(pi x)`` with the argument reduced to [-0.5, 0.5] first (exact in f32), so
    it stays accurate for large |x|; its sign follows the integer part's parity."""
    whole = b.unary(UnaryKind.round, x)
    odd = b.binary(BinaryKind.ne, b.binary(BinaryKind.remainder, whole, 2.0), 0.0)
    s = b.unary(UnaryKind.sin, _mul(b, _sub(b, x, whole), math.pi))
    return b.select(odd, b.unary(UnaryKind.neg, s), s)


def _shifted(b: GraphBuilder, x: Value) -> tuple[Value, Value]:
    """``(x + 8 where x < 8 else x, whether it was shifted)``."""
    small = b.binary(BinaryKind.lt, x, float(_SHIFT))
    return b.select(small, _add(b, x, float(_SHIFT)), x), small


def _lgamma_positive(b: GraphBuilder, x: Value) -> Value:
    """lgamma for x > 0: Stirling's series at w >= 8 minus log(x (x+1) ... (x+7))."""
    w, small = _shifted(b, x)
    inv = b.unary(UnaryKind.reciprocal, w)
    inv2 = b.unary(UnaryKind.square, inv)
    series = _mul(b, inv, _poly(b, inv2, [1 / 12, -1 / 360, 1 / 1260, -1 / 1680]))
    main = _sub(b, _mul(b, _sub(b, w, 0.5), b.unary(UnaryKind.log, w)), w)
    stirling = _add(b, _add(b, main, 0.5 * math.log(2 * math.pi)), series)
    product = x
    for k in range(1, _SHIFT):
        product = _mul(b, product, _add(b, x, float(k)))
    return b.select(small, _sub(b, stirling, b.unary(UnaryKind.log, product)), stirling)


@lowering(aten.lgamma.default)
def lower_lgamma(b: GraphBuilder, x: Value) -> Value:
    """``log|Gamma(x)|``; for x < 0.5 by reflection, ``log(pi / |sin(pi x)|) -
    lgamma(1 - x)`` (inf at the poles 0, -1, -2...); inf at +-inf."""
    x = _float(b, x)
    reflected = _sub(b, 1.0, x)
    positive = b.select(b.binary(BinaryKind.lt, x, 0.5), reflected, x)
    value = _lgamma_positive(b, positive)
    sine = b.unary(UnaryKind.abs, _sin_pi(b, x))
    mirror = _sub(b, _sub(b, math.log(math.pi), b.unary(UnaryKind.log, sine)), value)
    out = b.select(b.binary(BinaryKind.lt, x, 0.5), mirror, value)
    return b.select(b.binary(BinaryKind.eq, b.unary(UnaryKind.abs, x), math.inf), math.inf, out)


def _digamma_positive(b: GraphBuilder, x: Value) -> Value:
    """digamma for x > 0: the asymptotic series at w >= 8 minus sum 1/(x+k), k < 8."""
    w, small = _shifted(b, x)
    inv = b.unary(UnaryKind.reciprocal, w)
    inv2 = b.unary(UnaryKind.square, inv)
    tail = _mul(b, inv2, _poly(b, inv2, [-1 / 12, 1 / 120, -1 / 252, 1 / 240, -1 / 132]))
    series = _add(b, _sub(b, b.unary(UnaryKind.log, w), _mul(b, inv, 0.5)), tail)
    total = b.unary(UnaryKind.reciprocal, x)
    for k in range(1, _SHIFT):
        total = _add(b, total, b.unary(UnaryKind.reciprocal, _add(b, x, float(k))))
    return b.select(small, _sub(b, series, total), series)


def _cot_pi(b: GraphBuilder, x: Value) -> Value:
    """``cot(pi x)`` from r = x - round(x) in [-0.5, 0.5] (period 1); near |r| = 0.5 as
    ``sign(r) tan(pi (0.5 - |r|))`` (0.5 - |r| is exact there), so it is 0 where it
    should be."""
    r = _sub(b, x, b.unary(UnaryKind.round, x))
    magnitude = b.unary(UnaryKind.abs, r)
    near_zero = b.unary(UnaryKind.reciprocal, b.unary(UnaryKind.tan, _mul(b, r, math.pi)))
    near_half = _mul(b, b.unary(UnaryKind.sign, r), b.unary(
        UnaryKind.tan, _mul(b, _sub(b, 0.5, magnitude), math.pi)))
    return b.select(b.binary(BinaryKind.gt, magnitude, 0.25), near_half, near_zero)


@lowering(aten.digamma.default)
def lower_digamma(b: GraphBuilder, x: Value) -> Value:
    """digamma; for x < 0 by reflection ``digamma(1 - x) - pi cot(pi x)``; -inf at 0
    and NaN at the negative integers (as torch)."""
    return _polygamma(b, 0, _float(b, x))


def _zeta_positive(b: GraphBuilder, s: int, q: Value) -> Value:
    """Hurwitz zeta ``sum_k (q + k)^-s`` for q > 0 and integer s >= 2: the first 8
    terms, then the Euler-Maclaurin tail at a = q + 8."""
    a = _add(b, q, float(_SHIFT))
    inv = b.unary(UnaryKind.reciprocal, a)
    power = inv
    for _ in range(s - 1):
        power = _mul(b, power, inv)  # a^-s
    tail = _add(b, _div(b, _mul(b, power, a), float(s - 1)), _mul(b, power, 0.5))
    bernoulli = [1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730]
    term = _mul(b, power, inv)  # a^(-s-1)
    rising = float(s)
    inv2 = b.unary(UnaryKind.square, inv)
    for j, b2j in enumerate(bernoulli, start=1):
        coefficient = b2j / math.factorial(2 * j) * rising
        tail = _add(b, tail, _mul(b, term, coefficient))
        term = _mul(b, term, inv2)
        rising *= (s + 2 * j - 1) * (s + 2 * j)
    for k in range(_SHIFT):
        inv_k = b.unary(UnaryKind.reciprocal, _add(b, q, float(k)))
        power_k = inv_k
        for _ in range(s - 1):
            power_k = _mul(b, power_k, inv_k)
        tail = _add(b, tail, power_k)
    return tail


def _cot_derivative(b: GraphBuilder, n: int, x: Value) -> Value:
    """``d^n/dx^n cot(pi x)`` for n <= 4, as a polynomial in c = cot(pi x)."""
    c = _cot_pi(b, x)
    c2 = b.unary(UnaryKind.square, c)
    one_c2 = _add(b, c2, 1.0)
    pi = math.pi
    if n == 0:
        return c
    if n == 1:
        return _mul(b, one_c2, -pi)
    if n == 2:
        return _mul(b, _mul(b, c, one_c2), 2 * pi ** 2)
    if n == 3:
        return _mul(b, _mul(b, one_c2, _add(b, _mul(b, c2, 3.0), 1.0)), -2 * pi ** 3)
    return _mul(b, _mul(b, _mul(b, c, one_c2), _add(b, _mul(b, c2, 3.0), 2.0)), 8 * pi ** 4)


def _polygamma(b: GraphBuilder, n: int, x: Value) -> Value:
    """The n-th derivative of digamma: for x > 0, digamma's series (n = 0) or
    ``(-1)^(n+1) n! zeta(n+1, x)``; for x <= 0 the reflection
    ``psi_n(x) = (-1)^(n+1) ((-1)^n pi d^n cot(pi x) - psi_n(1 - x))``."""
    negative = b.binary(BinaryKind.le, x, 0.0)
    positive = b.select(negative, _sub(b, 1.0, x), x)
    if n == 0:
        value = _digamma_positive(b, positive)
    else:
        value = _mul(b, _zeta_positive(b, n + 1, positive),
                     (-1) ** (n + 1) * math.factorial(n))
    cot = _mul(b, _cot_derivative(b, n, x), (-1) ** n * math.pi)
    mirror = _mul(b, _sub(b, cot, value), float((-1) ** (n + 1)))
    out = b.select(negative, mirror, value)
    pole = b.binary(BinaryKind.logical_and, negative,
                    b.binary(BinaryKind.eq, x, b.unary(UnaryKind.floor, x)))
    if n == 0:  # digamma: -inf at 0, NaN at the negative integers (torch)
        at_pole = b.select(b.binary(BinaryKind.eq, x, 0.0), -math.inf, math.nan)
    else:  # as torch: +inf for odd n, -inf for even n
        at_pole = b.splat(math.inf if n % 2 else -math.inf, x.shape, x.dtype)
    out = b.select(pole, at_pole, out)
    if n == 1:  # torch's trigamma tends to 0 at +inf (higher orders give NaN there)
        out = b.select(b.binary(BinaryKind.eq, x, math.inf), 0.0, out)
    return out


@lowering(aten.polygamma.default)
def lower_polygamma(b: GraphBuilder, n: int, x: Value) -> Value:
    if not 0 <= n <= 4:
        raise NotImplementedError(f"polygamma of order {n} (lowered up to 4)")
    return _polygamma(b, n, _float(b, x))


_ERFINV_CENTRAL = [1.50140941, 0.246640727, -0.00417768164, -0.00125372503, 0.00021858087,
                   -4.39150654e-06, -3.5233877e-06, 3.43273939e-07, 2.81022636e-08]
_ERFINV_TAIL = [2.83297682, 1.00167406, 0.00943887047, -0.0076224613, 0.00573950773,
                -0.00367342844, 0.00134934322, 0.000100950558, -0.000200214257]
"""Giles' single-precision erfinv polynomials (in w - 2.5 and in sqrt(w) - 3, with
w = -log(1 - x^2))."""


def _giles(b: GraphBuilder, x: Value, w: Value) -> Value:
    """erfinv(x) from Giles' polynomials in ``w = -log((1 - x)(1 + x))``."""
    central = _poly(b, _sub(b, w, 2.5), _ERFINV_CENTRAL)
    tail = _poly(b, _sub(b, b.unary(UnaryKind.sqrt, w), 3.0), _ERFINV_TAIL)
    return _mul(b, b.select(b.binary(BinaryKind.lt, w, 5.0), central, tail), x)


@lowering(aten.erfinv.default)
def lower_erfinv(b: GraphBuilder, x: Value) -> Value:
    """Giles' polynomial in ``w = -log((1 - x)(1 + x))`` times x (a few f32 ulps; a
    Newton step on the vector engine's erf would not improve it); +-inf at +-1, NaN
    beyond."""
    x = _float(b, x)
    w = b.unary(UnaryKind.neg, b.unary(UnaryKind.log, _mul(b, _sub(b, 1.0, x), _add(b, x, 1.0))))
    y = _giles(b, x, w)
    edge = b.binary(BinaryKind.copysign, math.inf, x)
    return b.select(b.binary(BinaryKind.eq, b.unary(UnaryKind.abs, x), 1.0), edge, y)


@lowering(aten.special_ndtri.default)
def lower_ndtri(b: GraphBuilder, p: Value) -> Value:
    """The normal quantile ``sqrt(2) erfinv(2p - 1)``, with Giles' ``w`` taken as
    ``-log(4 p (1 - p))`` so small p keep their precision; -inf at 0, inf at 1. Within
    f32 precision where Giles' polynomials hold (1e-7 < p < 1 - 6e-8); further out in
    the tails it drifts (4e-4 relative at p = 1e-10)."""
    p = _float(b, p)
    w = b.unary(UnaryKind.neg, b.unary(UnaryKind.log, _mul(b, _mul(b, p, _sub(b, 1.0, p)), 4.0)))
    y = _mul(b, _giles(b, _sub(b, _mul(b, p, 2.0), 1.0), w), math.sqrt(2))
    y = b.select(b.binary(BinaryKind.eq, p, 0.0), -math.inf, y)
    return b.select(b.binary(BinaryKind.eq, p, 1.0), math.inf, y)


@lowering(aten.pow.Scalar)
def lower_pow_scalar(b: GraphBuilder, base: float, exponent: Value) -> Value:
    """A number to tensor powers (ldexp's ``2 ** other``)."""
    return b.binary(BinaryKind.pow, base, exponent)


@lowering(aten.frexp.Tensor)
def lower_frexp(b: GraphBuilder, x: Value) -> tuple[Value, Value]:
    """``x = mantissa * 2^exponent`` with |mantissa| in [0.5, 1): the exponent from
    floor(log2 |x|) + 1, corrected by one where rounding put the mantissa outside
    [0.5, 1); powers of two scale exactly. 0, inf and NaN keep x with exponent 0."""
    x = _float(b, x)
    a = b.unary(UnaryKind.abs, x)
    finite = b.binary(BinaryKind.logical_and, b.binary(BinaryKind.gt, a, 0.0),
                      b.binary(BinaryKind.lt, a, math.inf))
    safe = b.select(finite, a, 1.0)
    e = _add(b, b.unary(UnaryKind.floor, b.unary(UnaryKind.log2, safe)), 1.0)
    m = _mul(b, safe, b.unary(UnaryKind.exp2, b.unary(UnaryKind.neg, e)))
    e = _add(b, e, b.cast(b.binary(BinaryKind.ge, m, 1.0), DType.f32))
    e = _sub(b, e, b.cast(b.binary(BinaryKind.lt, m, 0.5), DType.f32))
    mantissa = _mul(b, x, b.unary(UnaryKind.exp2, b.unary(UnaryKind.neg, e)))
    mantissa = b.select(finite, mantissa, x)
    return mantissa, b.cast(b.select(finite, e, 0.0), DType.i32)


@lowering(aten.nextafter.default)
def lower_nextafter(b: GraphBuilder, x: Value, other: Value) -> Value:
    """The float next to ``x`` towards ``other``: ``|x| = m 2^E`` with m in [1, 2) (E
    from log2, corrected as in frexp), one unit in the last place ``2^(max(E, -126) -
    23)`` added or taken away (half of it below an exact power of two), exact in f32;
    from 0 the smallest subnormal; ``other`` where they are equal, NaN with a NaN."""
    if x.dtype is not DType.f32 or (isinstance(other, Value) and other.dtype is not x.dtype):
        raise NotImplementedError("nextafter is lowered for float32")
    a = b.unary(UnaryKind.abs, x)
    nonzero = b.binary(BinaryKind.logical_and, b.binary(BinaryKind.gt, a, 0.0),
                       b.binary(BinaryKind.lt, a, math.inf))
    safe = b.select(nonzero, a, 1.0)
    e = b.unary(UnaryKind.floor, b.unary(UnaryKind.log2, safe))
    m = _mul(b, safe, b.unary(UnaryKind.exp2, b.unary(UnaryKind.neg, e)))
    e = _add(b, e, b.cast(b.binary(BinaryKind.ge, m, 2.0), DType.f32))
    e = _sub(b, e, b.cast(b.binary(BinaryKind.lt, m, 1.0), DType.f32))
    ulp = b.unary(UnaryKind.exp2, _sub(b, b.binary(BinaryKind.max, e, -126.0), 23.0))
    power_of_two = b.binary(BinaryKind.logical_and, b.binary(
        BinaryKind.eq, safe, b.unary(UnaryKind.exp2, e)), b.binary(BinaryKind.gt, e, -126.0))
    down = _sub(b, a, b.select(power_of_two, _mul(b, ulp, 0.5), ulp))
    outward = b.binary(BinaryKind.eq, b.binary(BinaryKind.gt, other, x),
                       b.binary(BinaryKind.gt, x, 0.0))
    step = b.binary(BinaryKind.copysign, b.select(outward, _add(b, a, ulp), down), x)
    tiny = b.binary(BinaryKind.copysign, 2.0 ** -149, b.binary(BinaryKind.sub, other, x))
    out = b.select(b.binary(BinaryKind.eq, a, 0.0), tiny, step)
    largest = b.binary(BinaryKind.copysign, float(torch.finfo(torch.float32).max), x)
    out = b.select(b.binary(BinaryKind.eq, a, math.inf), largest, out)  # inf: inwards
    out = b.select(b.binary(BinaryKind.eq, x, other), other, out)
    either_nan = b.binary(BinaryKind.logical_or, b.binary(BinaryKind.ne, x, x),
                          b.binary(BinaryKind.ne, other, other))
    return b.select(either_nan, math.nan, out)


_ERFCX_DEPTH = 40
"""Continued-fraction levels of erfcx for x >= 1 (1.5e-7 relative at x = 1)."""


@lowering(aten.special_erfcx.default)
def lower_erfcx(b: GraphBuilder, x: Value) -> Value:
    """``exp(x^2) erfc(x)``: below 1 directly (erfc there is at least 0.157, so 1 - erf
    keeps f32 precision); from 1 on the continued fraction ``1 / (sqrt(pi) (x + (1/2) /
    (x + 1 / (x + (3/2) / ...))))`` evaluated from a fixed depth, which never forms the
    vanishing erfc."""
    x = _float(b, x)
    direct = _mul(b, b.unary(UnaryKind.exp, b.unary(UnaryKind.square, x)),
                  _sub(b, 1.0, b.unary(UnaryKind.erf, x)))
    large = b.binary(BinaryKind.ge, x, 1.0)
    z = b.select(large, x, 1.0)
    t = z
    for k in range(_ERFCX_DEPTH, 0, -1):
        t = _add(b, z, _div(b, k / 2, t))
    fraction = b.unary(UnaryKind.reciprocal, _mul(b, t, math.sqrt(math.pi)))
    return b.select(large, fraction, direct)


@lowering(aten.special_log_ndtr.default)
def lower_log_ndtr(b: GraphBuilder, x: Value) -> Value:
    """``log Phi(x)`` with ``t = x / sqrt(2)``: ``log(erfcx(-t) / 2) - t^2`` below
    x = -1 (no underflow), else ``log1p(-erfc(t) / 2)`` with ``erfc(t) = erfcx(t)
    e^(-t^2)`` (tiny, not 1 - erf, for large x)."""
    x = _float(b, x)
    t = _mul(b, x, 1 / math.sqrt(2))
    t2 = b.unary(UnaryKind.square, t)
    low = _sub(b, b.unary(UnaryKind.log, _mul(b, lower_erfcx(b, b.unary(UnaryKind.neg, t)), 0.5)),
               t2)
    erfc = _mul(b, lower_erfcx(b, t), b.unary(UnaryKind.exp, b.unary(UnaryKind.neg, t2)))
    high = b.unary(UnaryKind.log1p, _mul(b, erfc, -0.5))
    high = b.select(b.binary(BinaryKind.eq, x, math.inf), 0.0, high)
    return b.select(b.binary(BinaryKind.lt, x, -1.0), low, high)


_ZETA_SHIFT = 16
"""Terms summed before the Euler-Maclaurin tail of the Hurwitz zeta (q + 16 >= 8 for
the q > -8 OpInfo draws)."""


@lowering(aten.special_zeta.default)
def lower_zeta(b: GraphBuilder, s: Value, q: Value) -> Value:
    """Hurwitz zeta ``sum_k (q + k)^-s``: 16 terms, then the Euler-Maclaurin tail at
    ``a = q + 16`` (six Bernoulli terms). As torch (Cephes): inf at s = 1 and at
    non-positive integer q, NaN for s < 1 (and, through pow, for q < 0 with non-integer
    s)."""
    s, q = _float(b, s), _float(b, q)
    a = _add(b, q, float(_ZETA_SHIFT))
    power = b.binary(BinaryKind.pow, a, b.unary(UnaryKind.neg, s))  # a^-s
    total = _add(b, _div(b, _mul(b, power, a), _sub(b, s, 1.0)), _mul(b, power, 0.5))
    inv = b.unary(UnaryKind.reciprocal, a)
    inv2 = b.unary(UnaryKind.square, inv)
    term = _mul(b, power, inv)  # a^(-s-1)
    rising = s  # s (s+1) ... (s + 2j - 2)
    bernoulli = [1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730]
    for j, b2j in enumerate(bernoulli, start=1):
        total = _add(b, total, _mul(b, _mul(b, term, rising), b2j / math.factorial(2 * j)))
        term = _mul(b, term, inv2)
        rising = _mul(b, _mul(b, rising, _add(b, s, 2 * j - 1.0)), _add(b, s, 2.0 * j))
    for k in range(_ZETA_SHIFT):
        total = _add(b, total, b.binary(BinaryKind.pow, _add(b, q, float(k)),
                                        b.unary(UnaryKind.neg, s)))
    pole = b.binary(BinaryKind.logical_or, b.binary(BinaryKind.eq, s, 1.0), b.binary(
        BinaryKind.logical_and, b.binary(BinaryKind.le, q, 0.0),
        b.binary(BinaryKind.eq, q, b.unary(UnaryKind.floor, q))))
    total = b.select(b.binary(BinaryKind.lt, s, 1.0), math.nan, total)
    return b.select(pole, math.inf, total)
