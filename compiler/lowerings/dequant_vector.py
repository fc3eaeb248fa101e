"""Packed int4 weights dequantized on the vector unit, as graph primitives, for the
partial last block of torch's CPU int4 layout, which a matmul cannot read as stored
(:mod:`compiler.lowerings.int4`): its codes become ``(code - 8) * scale + zero`` in f32
per group of k rows and column, rounded to the activations' dtype, written out and read
by a plain matmul. Whole blocks are dequantized in the matmul kernel, in the arrays'
input path or tile by tile on the vector unit (``core.matrix.dequant``,
:mod:`compiler.kernels.matmul_dequant`), with the same numbers.
"""

from __future__ import annotations

import numpy as np

from compiler import graph as g
from compiler.graph import Value
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
