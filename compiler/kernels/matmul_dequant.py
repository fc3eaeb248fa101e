"""Weights the arrays dequantize on the way in, in the matmul kernel
(:class:`compiler.graph.Dequantization`).

Packed int4 weights: each array's B tile is the bytes of its blocks of columns as they
lie in DRAM, ``[nt / block, kt, block / 2]`` (each block's k rows contiguous), so a
weight moves at half a byte, each block's run in at most three boxes of the stored
``[N, K / 2]`` tensor (a partial row, whole rows, a partial row), the blocks' runs as
one when a tile spans all of ``k``. One-byte weights (int8, fp8) load as any B tile
does. With either come the scales (and zeros) of the groups the k step meets,
``[groups, nt, 1 or 2]``. The array's input path turns the weights into its input
dtype (``compiler.ir.ops.Dequant``): no vector work, no dequantized copy in SRAM or DRAM.
Where the preset dequantizes on the vector unit instead (``core.matrix.dequant:
vector``), the vector unit turns each k step's tile into the arrays' input dtype in the
scratchpad (:class:`compiler.ir.ops.Dequantize`) and the arrays multiply that copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import graph as g
from compiler.emit import Arena
from compiler.graph import Node, Value
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, Slice, SramRef, numel
from compiler.ir.ops import Dequant, Dequantize, Load, MatMul
from compiler.kernels.common import Context, box_shape
from compiler.kernels.vector import load_box, sub
from compiler.views import flat_boxes


def block_runs(blocks: tuple[int, int], ks: tuple[int, int], k: int, half: int
               ) -> list[tuple[int, int]]:
    """The storage runs (byte ranges of the stored tensor, in order) of k rows ``ks`` of
    packed blocks ``blocks`` (``[blocks, k, half]`` bytes): a run per block, one for all
    when the rows span all of ``k`` (consecutive blocks then adjoin)."""
    runs: list[tuple[int, int]] = []
    for blk in range(*blocks):
        lo, hi = (blk * k + ks[0]) * half, (blk * k + ks[1]) * half
        if runs and runs[-1][1] == lo:
            runs[-1] = (runs[-1][0], hi)
        else:
            runs.append((lo, hi))
    return runs


@dataclass(frozen=True)
class DequantWeights:
    """The weights and scales of a dequantizing matmul node (inputs ``a, b, scales``)."""

    b: Value
    scales: Value
    spec: g.Dequantization

    @classmethod
    def of(cls, node: Node) -> "DequantWeights | None":
        spec = node.spec.dequant
        if spec is None:
            return None
        return cls(node.inputs[1], node.inputs[2], spec)

    @property
    def packed(self) -> bool:
        """int4 codes two a byte (else one-byte values, loaded as any B tile)."""
        return bool(self.spec.nibbles)

    @property
    def n_unit(self) -> int:
        """Columns an array's tile holds a multiple of: packed weights' whole blocks."""
        return self.spec.block if self.packed else 1

    @property
    def item_bytes(self) -> float:
        """DRAM and SRAM bytes per weight: its stored size and its share of its group's
        scale (and zero)."""
        planes = self.scales.shape[-1]
        stored = 0.5 if self.packed else self.b.dtype.itemsize
        return stored + planes * self.scales.dtype.itemsize / self.spec.group

    @property
    def vector_passes(self) -> int:
        """Vector element operations per weight when the vector unit dequantizes."""
        return Dequant(self.spec.group, 0, self.spec.nibbles).vector_passes

    def max_groups(self, kt: int) -> int:
        """Groups a ``kt``-row k step can meet (it may start inside one)."""
        group = self.spec.group
        return min((kt + group - 2) // group + 1, self.scales.shape[0])

    def allocate_packed(self, arena: Arena, kt: int, nt: int) -> SramRef:
        """One array's B tile of packed bytes."""
        block = self.spec.block
        return arena.alloc((nt // block, kt, block // 2), DType.u8, "matmul int4 B tile")

    def allocate_scales(self, arena: Arena, kt: int, nt: int) -> SramRef:
        """One array's scales tile."""
        return arena.alloc((self.max_groups(kt), nt, self.scales.shape[-1]),
                           self.scales.dtype, "matmul weight scales")

    def load_packed(self, ctx: Context, b_tile: SramRef, ks: tuple[int, int],
                    cols: tuple[int, int], core: int, source: str) -> None:
        """The bytes of columns ``cols`` over k rows ``ks``."""
        block = self.spec.block
        view = ctx.view(self.b)
        offset = 0
        for lo, hi in block_runs((cols[0] // block, cols[1] // block), ks, *view.shape[1:]):
            for box in flat_boxes(view.base_shape, lo, hi):
                ref = DramRef(view.tensor, tuple(Slice(a, b) for a, b in box))
                ctx.em.emit(ctx.em.dma(core, "load"),
                            Load(ref, sub(b_tile, box_shape(box), offset)), source)
                offset += numel(box_shape(box))

    def load_scales(self, ctx: Context, scales: SramRef, ks: tuple[int, int],
                    cols: tuple[int, int], core: int, source: str) -> None:
        """The scales (and zeros) of the groups k rows ``ks`` meet, columns ``cols``."""
        (k0, k1), group = ks, self.spec.group
        groups = (k0 // group, (k1 - 1) // group + 1)
        load_box(ctx, self.scales, (groups, cols, (0, self.scales.shape[-1])), scales, core,
                 source, "load")

    def _operands(self, b_tile: SramRef, scales: SramRef, ks: tuple[int, int], n: int
                  ) -> tuple[SramRef, SramRef, Dequant]:
        """One k step's weights, scales and how to dequantize them, ``n`` columns."""
        (k0, k1), group = ks, self.spec.group
        groups = (k1 - 1) // group - k0 // group + 1
        if self.packed:
            block = self.spec.block
            b = sub(b_tile, (n // block, k1 - k0, block // 2))
        else:
            b = sub(b_tile, (k1 - k0, n))
        return (b, sub(scales, (groups, n, self.scales.shape[-1])),
                Dequant(group, k0 % group, self.spec.nibbles))

    def matmul(self, a: SramRef, b_tile: SramRef, scales: SramRef, acc: SramRef,
               ks: tuple[int, int], accumulate: bool) -> MatMul:
        """The array's multiply of one k step, dequantizing ``b_tile`` on the way in."""
        b, tile_scales, dequant = self._operands(b_tile, scales, ks, acc.shape[-1])
        return MatMul(a, b, acc, accumulate, tile_scales, dequant)

    def dequantize(self, b_tile: SramRef, scales: SramRef, wide: SramRef,
                   ks: tuple[int, int]) -> Dequantize:
        """The vector unit's dequantization of one k step's weights into ``wide``
        ``[k, n]`` (``core.matrix.dequant: vector``), for a plain matmul to read."""
        b, tile_scales, dequant = self._operands(b_tile, scales, ks, wide.shape[-1])
        return Dequantize(b, tile_scales, wide, dequant)
