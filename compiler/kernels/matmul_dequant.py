"""Weights the arrays dequantize on the way in, in the matmul kernel
(:class:`compiler.graph.Dequantization`).

Packed int4 weights: each array's B tile is the bytes of its blocks of columns as they
lie in DRAM, ``[nt / block, kt, block / 2]`` (each block's k rows contiguous), so a
weight moves at half a byte. A block is ``block`` rows of the stored ``[N, K / 2]``
tensor, so a k step's bytes are the same rows (or parts of rows) of every block of
the tile: one strided DMA command per such stored row reads it from all the blocks at
once, a row every ``block`` rows (:func:`packed_commands`), instead of a command per
block; a step spanning all of ``k`` is one run for all its blocks. One-byte weights (int8, fp8) load as any B tile
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
from compiler.kernels.packed_runs import (  # noqa: F401 (block_runs re-exported)
    block_runs, packed_commands)
from compiler.kernels.transfers import placed
from compiler.kernels.vector import load_box, sub
from compiler.views import flat_boxes


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

    @property
    def unpack_ops(self) -> int:
        """Vector element operations per weight before a vector-unit matmul multiplies."""
        return Dequant(self.spec.group, 0, self.spec.nibbles).unpack_ops

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

    def load_packed(self, ctx: Context, b_tile: SramRef, scales: SramRef,
                    ks: tuple[int, int], cols: tuple[int, int], core: int, source: str
                    ) -> None:
        """The bytes of columns ``cols`` over k rows ``ks`` (:func:`packed_commands` of
        the stored ``[N, K / 2]`` tensor) and their groups' scales, each command on the
        next load engine. Commands strided over the blocks interleave in the tile; the
        emitter tracks their runs exactly (:data:`~compiler.ir.operands.EXACT_RUNS`),
        so they need not wait for each other and spread over the engines like dense
        runs (on one engine an array, a 4-array core's step put two arrays' tiles on
        one of its 3 load engines, and that array's multiply started late every step:
        Llama-2-7B int4 TPOT on tpu-v4 4.55 -> 4.45 ms). Only commands over more blocks
        than that share one engine, whose queue orders them, with their scales."""
        block = self.spec.block
        view = ctx.view(self.b)
        k, half = view.shape[1:]
        blocks = (cols[0] // block, cols[1] // block)
        if len(view.base_shape) != 2:  # not torch's layout: a box per run's piece
            self.load_scales(ctx, scales, ks, cols, core, source)
            offset = 0
            for lo, hi in block_runs(blocks, ks, k, half):
                for box in flat_boxes(view.base_shape, lo, hi):
                    ref = DramRef(view.tensor, tuple(Slice(a, b) for a, b in box))
                    ctx.em.emit(ctx.em.dma(core, "load"),
                                Load(ref, sub(b_tile, box_shape(box), offset)), source)
                    offset += numel(box_shape(box))
            return
        commands = packed_commands(blocks, ks, k, half, view.base_shape[1])
        loads = []
        for command in commands:
            ref = DramRef(view.tensor, (Slice(*command.rows), Slice(*command.cols)))
            loads.append(Load(ref, SramRef(
                b_tile.space, b_tile.offset + command.offset * b_tile.dtype.itemsize,
                ref.shape, b_tile.dtype, command.strides)))
        shared = None if all(load.dst.exact for load in loads) \
            else ctx.em.dma(core, "load")
        self.load_scales(ctx, scales, ks, cols, core, source, shared)
        for load in loads:
            ctx.em.emit(shared or ctx.em.dma(core, "load"), load, source)

    def load_scales(self, ctx: Context, scales: SramRef, ks: tuple[int, int],
                    cols: tuple[int, int], core: int, source: str,
                    engine: str | None = None) -> None:
        """The scales (and zeros) of the groups k rows ``ks`` meet, columns ``cols``
        (on ``engine``, else on the DMA engines in turn)."""
        (k0, k1), group = ks, self.spec.group
        box = ((k0 // group, (k1 - 1) // group + 1), cols, (0, self.scales.shape[-1]))
        if engine is None:
            load_box(ctx, self.scales, box, scales, core, source, "load")
            return
        for ref, offset, strides in ctx.em.dram_places(ctx.view(self.scales), box):
            ctx.em.emit(engine, Load(ref, placed(scales, ref, offset, strides)), source)

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
