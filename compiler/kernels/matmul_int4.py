"""Packed int4 weights in the matmul kernel (:class:`compiler.graph.Int4Packing`).

Each array's B tile is the bytes of its blocks of columns as they lie in DRAM, ``[nt /
block, kt, block / 2]`` (each block's k rows contiguous), so a weight moves at half a
byte, each block's run in at most three boxes of the stored ``[N, K / 2]`` tensor (a
partial row, whole rows, a partial row), the blocks' runs as one when a tile spans all of
``k``. With them come the
scales and zeros of the groups the k rows meet (``[groups, nt, 2]``). The array's input
path turns the bytes into weights (``compiler.ir.ops.Int4Unpack``): no vector work, no
dequantized copy in SRAM or DRAM.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import graph as g
from compiler.emit import Arena
from compiler.graph import Node, Value
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, Slice, SramRef, numel
from compiler.ir.ops import Int4Unpack, Load, MatMul
from compiler.kernels.common import Context, box_shape
from compiler.kernels.vector import load_box, sub
from compiler.views import flat_boxes


@dataclass(frozen=True)
class Int4Weights:
    """The packed operand of an int4 matmul node: bytes ``[N / block, K, block / 2]``
    and ``scales_and_zeros [K / group, N, 2]``."""

    packed: Value
    scales: Value
    packing: g.Int4Packing

    @classmethod
    def of(cls, node: Node) -> "Int4Weights | None":
        packing = node.spec.int4
        if packing is None:
            return None
        return cls(node.inputs[1], node.inputs[2], packing)

    @property
    def item_bytes(self) -> float:
        """DRAM and SRAM bytes per weight: half a byte, and its share of its group's
        scale and zero."""
        return 0.5 + 2 * self.scales.dtype.itemsize / self.packing.group

    def max_groups(self, kt: int) -> int:
        """Groups a ``kt``-row k step can meet (it may start inside one)."""
        group = self.packing.group
        return min((kt + group - 2) // group + 1, self.scales.shape[0])

    def allocate(self, arena: Arena, kt: int, nt: int) -> tuple[SramRef, SramRef]:
        """One array's B tile (bytes) and its scales tile."""
        block = self.packing.block
        return (arena.alloc((nt // block, kt, block // 2), DType.u8, "matmul int4 B tile"),
                arena.alloc((self.max_groups(kt), nt, 2), self.scales.dtype,
                            "matmul int4 scales"))

    def load(self, ctx: Context, b_tile: SramRef, scales: SramRef, ks: tuple[int, int],
             cols: tuple[int, int], core: int, source: str) -> None:
        """The bytes and the scales of columns ``cols`` over k rows ``ks``."""
        (k0, k1), (c0, c1) = ks, cols
        block, group = self.packing.block, self.packing.group
        view = ctx.view(self.packed)
        k, half = view.shape[1:]
        runs: list[list[int]] = []  # storage runs (the view reshapes the bytes as stored)
        for blk in range(c0 // block, c1 // block):
            lo, hi = (blk * k + k0) * half, (blk * k + k1) * half
            if runs and runs[-1][1] == lo:  # the tile spans all of k: blocks adjoin
                runs[-1][1] = hi
            else:
                runs.append([lo, hi])
        offset = 0
        for lo, hi in runs:
            for box in flat_boxes(view.base_shape, lo, hi):
                ref = DramRef(view.tensor, tuple(Slice(a, b) for a, b in box))
                ctx.em.emit(ctx.em.dma(core, "load"),
                            Load(ref, sub(b_tile, box_shape(box), offset)), source)
                offset += numel(box_shape(box))
        g0, g1 = k0 // group, (k1 - 1) // group + 1
        load_box(ctx, self.scales, ((g0, g1), (c0, c1), (0, 2)),
                 sub(scales, (g1 - g0, c1 - c0, 2)), core, source, "load")

    def matmul(self, a: SramRef, b_tile: SramRef, scales: SramRef, acc: SramRef,
               ks: tuple[int, int], accumulate: bool) -> MatMul:
        """The array's multiply of one k step, unpacking ``b_tile`` on the way in."""
        (k0, k1), n = ks, acc.shape[-1]
        block, group = self.packing.block, self.packing.group
        groups = (k1 - 1) // group - k0 // group + 1
        unpack = Int4Unpack(group, k0 % group, self.packing.halves)
        return MatMul(a, sub(b_tile, (n // block, k1 - k0, block // 2)), acc, accumulate,
                      sub(scales, (groups, n, 2)), unpack)
