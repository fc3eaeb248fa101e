"""Weight-only quantized weights dequantized on the vector unit, as graph primitives:
the other placement of what the arrays' input path does (:class:`compiler.ir.ops.Dequant`),
with the same numbers.

A dequantizing matmul's weights (packed int4 codes, or one-byte int8/fp8 values) become
``value * scale + zero`` in f32 per group of k rows and column, rounded to the
activations' dtype; int8 weights a weight-only matmul widens become the activations'
dtype. The vector unit writes those weights out and a plain matmul reads them.
:mod:`compiler.dequant_placement` decides which placement a preset gets; the partial
last block of torch's CPU int4 layout, which the input path cannot read, always comes
here (:mod:`compiler.lowerings.int4`).
"""

from __future__ import annotations

import numpy as np

from archsim.errors import LoweringError
from compiler import graph as g
from compiler.graph import Node, Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind
from compiler.lowerings.movement import lower_cat

ZERO_CODE = 8
"""The code a packed int4 weight of value ``zero`` has: ``w = (q - 8) * scale + zero``."""


def nibbles(b: GraphBuilder, packed: Value) -> tuple[Value, Value]:
    """Low and high nibbles of bytes, as f32 values 0..15 (a nibble is ``byte mod 16``
    and ``(byte - low) / 16``, exact in f32)."""
    wide = b.cast(packed, DType.f32)
    low = b.binary(BinaryKind.remainder, wide, 16.0)
    high = b.binary(BinaryKind.mul, b.binary(BinaryKind.sub, wide, low), 1 / 16)
    return low, high


def interleave(b: GraphBuilder, low: Value, high: Value, halves: bool) -> Value:
    """``[..., C]`` low and high nibbles as ``[..., 2C]`` columns: ``h * C + c`` for
    halves, ``2c + h`` for pairs."""
    lead, c = low.shape[:-1], low.shape[-1]
    axis = len(lead) if halves else len(lead) + 1
    shape = (*lead, 1, c) if halves else (*lead, c, 1)
    both = lower_cat(b, [b.view(low, shape), b.view(high, shape)], axis)
    return b.view(both, (*lead, 2 * c))


def _constant(b: GraphBuilder, array: np.ndarray) -> Value:
    """A compile-time f32 tensor."""
    value = b.add(g.Constant(), (), array.shape, DType.f32, "constant")
    b.graph.constants[value.id] = array.astype(np.float32)
    return value


def _planes(b: GraphBuilder, scales: Value, shape: tuple[int, ...],
            perm: tuple[int, ...] | None) -> list[Value]:
    """Each plane of ``scales [G, N, P]`` (the scale, then the zero) in f32, viewed as
    ``shape`` (``G * N`` elements), then permuted by ``perm`` so that it broadcasts
    against the values it scales."""
    groups, n, planes = scales.shape
    wide = b.cast(scales, DType.f32)
    out = []
    for i in range(planes):
        plane = b.view(b.slice(wide, 2, i, i + 1), shape)
        out.append(b.permute(plane, perm) if perm else plane)
    return out


def _dequantize(b: GraphBuilder, values: Value, planes: list[Value], dtype: DType) -> Value:
    """``values * scale (+ zero)`` in f32, rounded to ``dtype``: the input path's
    arithmetic (:class:`compiler.ir.ops.Dequant`), one fused pass of the vector unit."""
    out = b.binary(BinaryKind.mul, values, planes[0])
    if len(planes) == 2:
        out = b.binary(BinaryKind.add, out, planes[1])
    return b.cast(out, dtype)


def scaled(b: GraphBuilder, values: Value, scales: Value, group: int) -> Value:
    """``values * scale (+ zero)`` in f32, each value's group of ``group`` k rows and
    column taking its own: ``values`` f32 ``[K, N]``, ``scales [K / group, N, 1 or 2]``
    (the general path, for codes another kernel unpacked)."""
    groups, n, _ = scales.shape
    planes = _planes(b, scales, (groups, 1, n), None)
    shaped = b.view(values, (groups, group, n))
    return b.view(_dequantize(b, shaped, planes, DType.f32), values.shape)


def _one_byte(b: GraphBuilder, node: Node) -> Value:
    """A one-byte dequantizing matmul's weights (``[K, N]``, ``[N, K]`` with ``trans_b``)
    in its activations' dtype: widen, scale, round, one pass over them. The lowerings
    give one-byte weights one group (a scale a column); several groups are taken on
    ``[K, N]`` weights only."""
    a, stored, scales = node.inputs
    groups, n, _ = scales.shape
    group = node.spec.dequant.group
    if groups == 1:  # no reshape of the weights: a scale (and a zero) a column
        planes = _planes(b, scales, (n, 1) if node.spec.trans_b else (1, n), None)
        return _dequantize(b, b.cast(stored, DType.f32), planes, a.dtype)
    if node.spec.trans_b:
        raise LoweringError(f"{node.source}: one-byte weights read transposed with "
                            f"{groups} groups of scales are not dequantized on the vector "
                            f"unit (one group, or weights [K, N], are)")
    planes = _planes(b, scales, (groups, 1, n), None)
    values = b.cast(b.view(stored, (groups, group, n)), DType.f32)
    return b.view(_dequantize(b, values, planes, a.dtype), stored.shape)


def _int4(b: GraphBuilder, node: Node) -> Value:
    """A packed int4 matmul's weights as ``[K, N]`` in its activations' dtype. The bytes
    ``[blocks, K, block / 2]`` are first put k-major (``[K, blocks, block / 2]``, a copy
    at half a byte a weight: torch's CPU layout keeps each block's k rows together),
    then one pass makes the weights: each byte's low nibble ``byte mod 16`` and high one
    ``(byte - low) / 16`` (exact in f32), placed by a 0/1 column selector so the pass
    needs no gather, minus 8, scaled and offset by their group's scale and zero,
    rounded."""
    a, stored, scales = node.inputs
    spec: g.Dequantization = node.spec.dequant
    blocks, k, half = stored.shape
    groups, group = k // spec.group, spec.group
    halves = spec.nibbles == "halves"
    columns = (blocks, 2, half) if halves else (blocks, half, 2)
    planes = _planes(b, scales, (groups, 1, *columns), None)
    which = _constant(b, np.arange(2).reshape((1, 1, 1, 2, 1) if halves else (1, 1, 1, 1, 2)))
    # the scales first: the pass over the bytes then runs as one kernel through them
    k_major = b.permute(stored, (1, 0, 2))
    pair = (blocks, 1, half) if halves else (blocks, half, 1)  # a byte's two nibbles
    byte = b.cast(b.view(k_major, (groups, group, *pair)), DType.f32)
    low = b.binary(BinaryKind.remainder, byte, 16.0)
    high = b.binary(BinaryKind.mul, b.binary(BinaryKind.sub, byte, low), 1 / 16)
    codes = b.binary(BinaryKind.add, low, b.binary(
        BinaryKind.mul, which, b.binary(BinaryKind.sub, high, low)))
    values = b.binary(BinaryKind.sub, codes, float(ZERO_CODE))
    weights = _dequantize(b, values, planes, a.dtype)
    return b.view(weights, (k, blocks * 2 * half))


def vector_matmul(b: GraphBuilder, node: Node) -> Value:
    """The result of a narrow-weight matmul ``node`` (:func:`narrow_weights`) with its
    weights made on the vector unit in its activations' dtype and a plain matmul: int8
    weights a weight-only matmul widens, cast (exact); one-byte values scaled per group
    and column; packed int4 blocks unpacked and scaled (:func:`_int4`)."""
    a, stored = node.inputs[:2]
    spec: g.MatMul = node.spec
    out = node.out
    if spec.dequant is None:
        weights = b.cast(stored, a.dtype)
    elif spec.dequant.nibbles:
        weights = _int4(b, node)
    else:
        weights = _one_byte(b, node)
    return b.matmul(a, weights, trans_b=spec.trans_b, out_dtype=out.dtype)


def narrow_weights(node: Node) -> bool:
    """``node`` is a matmul whose weights are dequantized or widened as they are read:
    one with a :class:`compiler.graph.Dequantization`, or float activations times int8
    weights (:meth:`GraphBuilder.matmul`'s ``weight_only``)."""
    spec = node.spec
    if not isinstance(spec, g.MatMul):
        return False
    if spec.dequant is not None:
        return True
    a, stored = node.inputs[:2]
    return a.dtype.is_float and stored.dtype is DType.i8
