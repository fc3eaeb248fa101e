"""Small composites of the vector primitives: PReLU's kernel, the angle of real numbers,
the 3-vector cross product (slices, products, a concatenation), addbmm (a batched matmul
summed over the batch), histc (bins counted against the bin numbers), a number raised to
a tensor, logaddexp2, dropout's backward and frexp."""

from __future__ import annotations

import math
from typing import Any

import torch

from compiler import graph as g
from compiler.graph import Value
from compiler.graph_builder import GraphBuilder, broadcast_shapes, normalize_dim
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind, UnaryKind
from compiler.lowerings.registry import lowering

aten = torch.ops.aten


@lowering(aten._prelu_kernel.default)
def lower_prelu(b: GraphBuilder, x: Value, weight: Value) -> Value:
    """``x`` where positive, else ``weight * x`` (weight broadcast as given)."""
    return b.select(b.binary(BinaryKind.gt, x, 0.0), x, b.binary(BinaryKind.mul, weight, x))


@lowering(aten.angle.default)
def lower_angle(b: GraphBuilder, x: Value) -> Value:
    """pi for negative numbers, 0 otherwise, NaN kept."""
    if not x.dtype.is_float:
        x = b.cast(x, DType.f32)
    turned = b.select(b.binary(BinaryKind.lt, x, 0.0), math.pi, 0.0)
    return b.select(b.binary(BinaryKind.ne, x, x), x, turned)


@lowering(aten.linalg_cross.default)
def lower_cross(b: GraphBuilder, x: Value, y: Value, dim: int = -1) -> Value:
    shape = broadcast_shapes(x.shape, y.shape, where=b.source)
    d = normalize_dim(dim, len(shape), b.source)
    if shape[d] != 3:
        raise NotImplementedError("cross product needs 3 components")
    x, y = b.broadcast(x, shape), b.broadcast(y, shape)
    xs = [b.slice(x, d, i, i + 1) for i in range(3)]
    ys = [b.slice(y, d, i, i + 1) for i in range(3)]
    parts = [b.binary(BinaryKind.sub, b.binary(BinaryKind.mul, xs[(i + 1) % 3], ys[(i + 2) % 3]),
                      b.binary(BinaryKind.mul, xs[(i + 2) % 3], ys[(i + 1) % 3]))
             for i in range(3)]
    return b.add(g.Cat(d), parts, shape, parts[0].dtype, "cat")


@lowering(aten.addbmm.default)
def lower_addbmm(b: GraphBuilder, x: Value, batch1: Value, batch2: Value, *, beta: Any = 1,
                 alpha: Any = 1) -> Value:
    """``beta * x + alpha * sum_b(batch1[b] @ batch2[b])``: a batched matmul, the batch
    summed by the vector unit (beta = 0 ignores ``x``, NaNs included, as torch)."""
    total = b.reduce(ReduceKind.sum, b.matmul(batch1, batch2), (0,), keepdim=False)
    if alpha != 1:
        total = b.binary(BinaryKind.mul, total, alpha)
    if beta == 0:
        return b.cast(total, x.dtype)
    scaled = x if beta == 1 else b.binary(BinaryKind.mul, x, beta)
    return b.binary(BinaryKind.add, scaled, total)


MAX_HISTOGRAM = 1 << 22
"""Most elements x bins one histc compares."""


@lowering(aten.histc.default)
def lower_histc(b: GraphBuilder, x: Value, bins: int = 100, min: Any = 0,
                max: Any = 0) -> Value:
    """Each element's bin ``(x - lo) * bins / (hi - lo)`` (the top edge in the last bin;
    outside or NaN: none), counted against the bin numbers. ``min == max == 0`` takes
    the data's range (reductions); an empty range widens by 1 each way, as CPU. Integer
    input (CUDA's histc, which transformers' MoE routing takes off CPU, e.g. on meta) is
    binned by its value as f32 and counted in its own dtype."""
    count = 1
    for n in x.shape:
        count *= n
    if count * bins > MAX_HISTOGRAM:
        raise NotImplementedError("histc too wide for masked counts")
    out_dtype = x.dtype
    if not x.dtype.is_float:
        x = b.cast(x, DType.f32)
    flat = b.view(x, (count, 1))
    if min == max == 0:
        finite = b.binary(BinaryKind.eq, flat, flat)
        lo: Value | float = b.reduce(ReduceKind.min, b.select(finite, flat, math.inf), (0,),
                                     keepdim=True)
        hi: Value | float = b.reduce(ReduceKind.max, b.select(finite, flat, -math.inf), (0,),
                                     keepdim=True)
        same = b.binary(BinaryKind.eq, lo, hi)
        lo = b.select(same, b.binary(BinaryKind.sub, lo, 1.0), lo)
        hi = b.select(same, b.binary(BinaryKind.add, hi, 1.0), hi)
    else:
        lo, hi = float(min), float(max)
        if lo == hi:
            lo, hi = lo - 1.0, hi + 1.0
    offset = b.binary(BinaryKind.sub, flat, lo)
    width = b.binary(BinaryKind.sub, hi, lo) if isinstance(hi, Value) else hi - lo
    pos = b.unary(UnaryKind.floor, b.binary(BinaryKind.div, b.binary(BinaryKind.mul, offset,
                                                                      float(bins)), width))
    pos = b.binary(BinaryKind.min, pos, float(bins - 1))
    inside = b.binary(BinaryKind.logical_and, b.binary(BinaryKind.ge, flat, lo),
                      b.binary(BinaryKind.le, flat, hi))
    hit = b.binary(BinaryKind.logical_and, inside,
                   b.binary(BinaryKind.eq, pos, b.cast(b.arange(bins, (1, bins)), DType.f32)))
    counts = b.reduce(ReduceKind.sum, b.select(hit, 1.0, 0.0), (0,), keepdim=False)
    return b.cast(counts, out_dtype)


@lowering(aten.pow.Scalar)
def lower_pow_scalar_base(b: GraphBuilder, base: Any, exponent: Value) -> Value:
    """``base ** exponent`` for a number base (ldexp's ``2 ** e``)."""
    return b.binary(BinaryKind.pow, float(base) if not isinstance(base, bool) else base,
                    exponent)


@lowering(aten.logaddexp2.default)
def lower_logaddexp2(b: GraphBuilder, x: Value, y: Value) -> Value:
    """``log2(2**x + 2**y)`` as the natural logaddexp of the inputs scaled by ln 2."""
    ln2 = math.log(2.0)
    both = b.binary(BinaryKind.logaddexp, b.binary(BinaryKind.mul, x, ln2),
                    b.binary(BinaryKind.mul, y, ln2))
    return b.binary(BinaryKind.div, both, ln2)


@lowering(aten.native_dropout_backward.default)
def lower_dropout_backward(b: GraphBuilder, grad: Value, mask: Value, scale: float) -> Value:
    """The gradient where the mask kept the element, scaled; zero elsewhere."""
    return b.select(mask, b.binary(BinaryKind.mul, grad, float(scale)), 0.0)


@lowering(aten.frexp.Tensor)
def lower_frexp(b: GraphBuilder, x: Value) -> tuple[Value, Value]:
    """Mantissa in [0.5, 1) and exponent: the exponent from log2 of the magnitude, then
    one step of correction either way for log2's rounding; 0, infinities and NaN keep
    the value with exponent 0."""
    magnitude = b.unary(UnaryKind.abs, x)
    plain = b.binary(BinaryKind.logical_and, b.binary(BinaryKind.gt, magnitude, 0.0),
                     b.binary(BinaryKind.lt, magnitude, math.inf))
    safe = b.select(plain, magnitude, 1.0)
    exponent = b.binary(BinaryKind.add, b.unary(UnaryKind.floor, b.unary(UnaryKind.log2, safe)),
                        1.0)
    mantissa = b.binary(BinaryKind.div, b.select(plain, x, 1.0),
                        b.binary(BinaryKind.pow, 2.0, exponent))
    for big in (True, False):
        size = b.unary(UnaryKind.abs, mantissa)
        off = b.binary(BinaryKind.ge, size, 1.0) if big else b.binary(BinaryKind.lt, size, 0.5)
        mantissa = b.select(off, b.binary(BinaryKind.mul, mantissa, 0.5 if big else 2.0),
                            mantissa)
        exponent = b.select(off, b.binary(BinaryKind.add, exponent, 1.0 if big else -1.0),
                            exponent)
    return (b.select(plain, mantissa, x),
            b.cast(b.select(plain, exponent, 0.0), DType.i32))


@lowering(aten.bitwise_not.default)
def lower_bitwise_not(b: GraphBuilder, x: Value) -> Value:
    """``~x``: the logical not of booleans (GLM-4-MoE's group mask), ``-x - 1`` of
    integers (two's complement)."""
    if x.dtype is DType.bool:
        return b.unary(UnaryKind.logical_not, x)
    if x.dtype.is_float:
        raise NotImplementedError("bitwise_not of a float tensor")
    return b.binary(BinaryKind.sub, b.unary(UnaryKind.neg, x), 1)
