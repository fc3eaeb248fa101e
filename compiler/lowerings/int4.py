"""Weight-only int4 (torch's CPU ops, which torchao's int4 CPU layout and CPU stacks call):

- ``_convert_weight_to_int4pack_for_cpu(q [N, K] int32 in 0..15, inner_k_tiles)``:
  two weights a byte, ``uint8 [N, K/2]``, in the CPU kernel's blocked layout;
- ``_weight_int4pack_mm_for_cpu(x [M, K], packed, group_size, scales_and_zeros
  [K/G, N, 2])``: ``x @ w.T`` with ``w[n, k] = (q[n, k] - 8) * scale[g, n] + zero[g, n]``
  for ``g = k // group_size`` (torchao's int4 scheme: a float zero point per group).

The packed bytes are what the model keeps in DRAM (half a byte a weight). The CPU
kernel (``aten/src/ATen/native/cpu/int4mm_kernel.cpp``) packs rows in blocks of
``BLOCK_N`` (64 with AVX-512, 32 otherwise): a full block is ``[K, BLOCK_N / 2]`` bytes,
the low nibble of byte ``c`` holding row ``c`` and the high nibble row ``BLOCK_N / 2 +
c`` ("halves"); a partial last block (and every block without AVX-512/AVX2) holds rows
``2c`` and ``2c + 1`` ("pairs"). Which layout a tensor has depends on the CPU build that
packed it, so the lowering reads torch's CPU capability.

The matmul reads the bytes as stored, half a byte a weight, and dequantizes them where
the preset says (``core.matrix.dequant``): in the arrays' input path or tile by tile on
the vector unit (:meth:`GraphBuilder.matmul_dequant`, :mod:`compiler.kernels.matmul_dequant`).
A partial last block (a vocabulary of 32,000 split over 8 chips is 62 blocks and 32
rows; a head of fewer rows than a block is only that) holds its rows in pairs: it runs
as one block of its rows, its columns joined after the whole blocks'. It used to be
unpacked on the vector unit into weights a float matmul read back: the 8-chip head took
1.12 M cycles a decode step on tpu-v4 against int8's 38 k.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from archsim.errors import LoweringError
from compiler import graph as g
from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind
from compiler.lowerings.movement import lower_cat
from compiler.lowerings.registry import lowering

aten = torch.ops.aten

GROUP_SIZES = (32, 64, 128, 256)
"""Group sizes the CPU op accepts."""

ZERO_CODE = 8
"""The code a weight of value ``zero`` has: ``w = (q - 8) * scale + zero``."""


@dataclass(frozen=True)
class CpuLayout:
    """Where the CPU kernel puts each row's nibbles (see the module docstring)."""

    block_rows: int
    """``BLOCK_N``: rows of a block, whose bytes are ``[K, block_rows / 2]``."""
    halves: bool
    """Full blocks put row ``c`` low and ``block_rows / 2 + c`` high; else pairs."""


CPU_LAYOUTS: dict[str, CpuLayout] = {
    "AVX512": CpuLayout(64, True), "AVX2": CpuLayout(32, True),
    "DEFAULT": CpuLayout(32, False)}
"""The packing of each CPU capability torch dispatches to (``BLOCK_N`` =
``Vectorized<float>::size() * 4``)."""


def cpu_layout() -> CpuLayout:
    """The layout this torch build's CPU kernel packs with."""
    capability = torch.backends.cpu.get_cpu_capability()
    layout = CPU_LAYOUTS.get(capability)
    if layout is None:
        raise LoweringError(f"int4 packed weights: the CPU packing of capability "
                            f"{capability!r} is not known (known: {', '.join(CPU_LAYOUTS)})")
    return layout


def _blocks(n: int, layout: CpuLayout) -> tuple[int, int]:
    """Full blocks and the rows of the partial last one (0: none)."""
    if n % 2:
        raise LoweringError(f"int4 packed weights need an even row count, got {n}")
    return divmod(n, layout.block_rows)


@lowering(aten._weight_int4pack_mm_for_cpu.default)
def lower_weight_int4pack_mm(b: GraphBuilder, x: Value, packed: Value, group_size: int,
                             scales_and_zeros: Value) -> Value:
    """``x [M, K] @ w.T`` with ``w`` dequantized from CPU-packed int4 codes per group,
    in f32 as torch's kernel does, then rounded to ``x``'s dtype for the arrays (f32
    sums, one rounding of the result)."""
    m, k = x.shape
    n = packed.shape[0]
    if packed.dtype is not DType.u8 or packed.shape != (n, k // 2) or k % group_size \
            or scales_and_zeros.shape != (k // group_size, n, 2):
        raise LoweringError(f"{b.source}: _weight_int4pack_mm_for_cpu takes x [M, K], "
                            f"uint8 [N, K/2] and scales_and_zeros [K/group, N, 2]; got "
                            f"{list(x.shape)}, {packed.dtype} {list(packed.shape)}, group "
                            f"{group_size}, {list(scales_and_zeros.shape)}")
    layout = cpu_layout()
    full, rest = _blocks(n, layout)
    rows = layout.block_rows
    parts = []
    if full:  # whole blocks: the arrays read the bytes as stored
        spec = g.Dequantization(group_size, "halves" if layout.halves else "pairs", rows)
        blocks = b.view(b.slice(packed, 0, 0, full * rows), (full, k, rows // 2))
        parts.append(b.matmul_dequant(x, blocks,
                                      b.slice(scales_and_zeros, 1, 0, full * rows), spec))
    if rest:  # a partial last block (all of a head under one block) holds its rows in
        # pairs: one block of ``rest`` rows, its columns joined after the whole blocks'
        last = g.Dequantization(group_size, "pairs", rest)
        parts.append(b.matmul_dequant(
            x, b.view(b.slice(packed, 0, full * rows, n), (1, k, rest // 2)),
            b.slice(scales_and_zeros, 1, full * rows, n), last))
    return b.cast(parts[0] if len(parts) == 1 else lower_cat(b, parts, 1), x.dtype)


@lowering(aten._convert_weight_to_int4pack_for_cpu.default)
def lower_convert_weight_to_int4pack(b: GraphBuilder, codes: Value, inner_k_tiles: int
                                     ) -> Value:
    """int32 codes ``[N, K]`` (0..15) -> ``uint8 [N, K/2]`` in the CPU kernel's layout,
    so a weight packed on the npu is read by the npu's mm as the CPU's is by the CPU's."""
    n, k = codes.shape
    layout = cpu_layout()
    full, rest = _blocks(n, layout)
    rows = layout.block_rows
    parts = []
    if full:
        body = b.permute(b.view(b.slice(codes, 0, 0, full * rows), (full, rows, k)),
                         (0, 2, 1))  # [full, K, rows]
        packed = _pack(b, body, layout.halves)  # [full, K, half]
        parts.append(b.view(packed, (full * rows, k // 2)))
    if rest:
        tail = b.permute(b.slice(codes, 0, full * rows, n), (1, 0))  # [K, rest]
        parts.append(b.view(_pack(b, tail, False), (rest, k // 2)))
    if len(parts) == 1:
        return parts[0]
    return lower_cat(b, parts, 0)


def _pack(b: GraphBuilder, codes: Value, halves: bool) -> Value:
    """``[..., 2C]`` codes -> ``[..., C]`` bytes, low nibble ``c`` (halves) or ``2c``
    (pairs), high the other."""
    lead, c = codes.shape[:-1], codes.shape[-1] // 2
    axis = len(lead) if halves else len(lead) + 1
    split = b.view(codes, (*lead, 2, c) if halves else (*lead, c, 2))
    low = b.view(b.slice(split, axis, 0, 1), (*lead, c))
    high = b.view(b.slice(split, axis, 1, 2), (*lead, c))
    byte = b.binary(BinaryKind.add, b.cast(low, DType.i32),
                    b.binary(BinaryKind.mul, b.cast(high, DType.i32), 16))
    return b.cast(byte, DType.u8)
