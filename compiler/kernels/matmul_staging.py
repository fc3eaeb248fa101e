"""Matmul operands shared through shared SRAM: A tiles (``MatmulTiling.a_staged``) and
weights kept across row blocks (``MatmulTiling.b_staged``, :class:`StagedB`).

The matmul kernel deals output tiles to the cores in rounds: tile ``t`` goes to core
``t % cores`` in round ``t // cores``, and tiles run along a row of output tiles first, so
the cores of a round mostly multiply the same A row block against different columns.
Loaded by each core, that block crosses DRAM once per core. Staged, the task DMA
(``tdma``) loads each k-step's A tile of a block once from DRAM into shared SRAM, and
every core of the round copies it into its own scratchpad over the NoC: DRAM carries it
once per round, what a multi-core NPU's shared SRAM (or L2) is for.

Shared buffers rotate in ``op_sets`` sets, one slot per distinct row block of a round:
the task DMA's load of a later round waits for the cores' copies out of the set it
reuses (the emitter's SRAM dependencies), as the cores' own operand sets do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from archsim.config.names import SHARED, TDMA
from compiler.emit import Arena
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.ir.ops import Copy, Load
from compiler.kernels.common import Box, Context
from compiler.kernels.transfers import placed, sub

Tile = tuple[int, int, int]
"""(batch index, first row, first column) of an output tile."""


@dataclass
class StagedA:
    """Where each tile's A comes from: ``slot[t]`` is tile ``t``'s buffer slot in its
    round (tiles with no slot load A themselves)."""

    slots: dict[int, int]
    buffers: list[list[SramRef]]
    """[set][slot]: an A tile of ``mt x kt`` each."""
    cores: int
    k_steps: int
    loaded: set[tuple[int, int, int]] = field(default_factory=set)
    """(round, slot, k-step) whose DRAM load is emitted."""

    @classmethod
    def plan(cls, ctx: Context, tiles: list[Tile], cores: int, shape: tuple[int, int],
             dtype: DType, op_sets: int, k_steps: int) -> StagedA | None:
        """The slots of the row blocks two or more cores of a round share (None: none
        is shared), and their shared buffers (``shape``: one A tile)."""
        rounds: dict[tuple[int, int, int], list[int]] = {}
        for t, (bi, m0, _) in enumerate(tiles):
            rounds.setdefault((t // cores, bi, m0), []).append(t)
        slots: dict[int, int] = {}
        used: dict[int, int] = {}
        for (round_, _, _), members in rounds.items():
            if len(members) > 1:
                slot = used[round_] = used.get(round_, -1) + 1
                slots.update(dict.fromkeys(members, slot))
        if not slots:
            return None
        arena = Arena(SHARED, ctx.config.shared_sram.size_bytes)
        width = max(used.values()) + 1
        buffers = [[arena.alloc(shape, dtype, "staged A tile") for _ in range(width)]
                   for _ in range(op_sets)]
        return cls(slots, buffers, cores, k_steps)

    def source(self, ctx: Context, t: int, step: int, a_value, box: Box,
               rows: int, cols: int, kernel: str) -> Callable[[], SramRef] | None:
        """For tile ``t``'s k-step ``step``: a function returning the shared copy of its
        A tile (``rows x cols``), emitting the task DMA's load the first time any core of
        the round asks; None when the tile loads its own A."""
        slot = self.slots.get(t)
        if slot is None:
            return None
        round_ = t // self.cores

        def staged() -> SramRef:
            buffer = self.buffers[(round_ * self.k_steps + step) % len(self.buffers)][slot]
            view = sub(buffer, (rows, cols))
            if (round_, slot, step) not in self.loaded:
                self.loaded.add((round_, slot, step))
                # one command per DRAM piece: the task DMA is one engine, splitting a
                # piece over it would only add setups
                for ref, offset, strides in ctx.em.dram_places(ctx.view(a_value), box):
                    ctx.em.emit(TDMA, Load(ref, placed(view, ref, offset, strides)), kernel)
            return view
        return staged


@dataclass
class StagedB:
    """Weights kept in shared SRAM across row blocks (``MatmulTiling.b_staged``): the
    first core to multiply a column tile's k-step loads its B tiles from DRAM as usual
    and copies each into a shared buffer of its own (on its store DMA engine: on a load
    engine the copies delayed the next k steps' loads, Llama-2-7B's prefill on tpu-v4
    took 140.54 ms against 139.00); every later row block copies them from there over
    the NoC, so B
    crosses DRAM once, what the L2 or shared SRAM of a real NPU does for a weight that
    several row blocks of a prefill read."""

    buffers: dict[tuple[int, int, int], SramRef]
    """(column tile, k-step, array) -> its shared B tile (``kt x nt``)."""
    stored: set[tuple[int, int, int]] = field(default_factory=set)
    """The tiles whose copy into shared SRAM is emitted."""

    @classmethod
    def plan(cls, ctx: Context, column_tiles: int, k_steps: int, arrays: int,
             shape: tuple[int, int], dtype: DType) -> StagedB:
        arena = Arena(SHARED, ctx.config.shared_sram.size_bytes)
        return cls({(c, s, j): arena.alloc(shape, dtype, "shared weight tile")
                    for c in range(column_tiles) for s in range(k_steps)
                    for j in range(arrays)})

    def load(self, ctx: Context, key: tuple[int, int, int], b_buf: SramRef,
             load_from_dram: Callable[[], None], core: int, kernel: str) -> None:
        """Fill ``b_buf`` with B tile ``key``: from DRAM the first time (then kept in
        shared SRAM), from shared SRAM after."""
        shared = sub(self.buffers[key], b_buf.shape)
        if key in self.stored:
            ctx.em.emit(ctx.em.dma(core, "load"), Copy(shared, b_buf), kernel)
            return
        self.stored.add(key)
        load_from_dram()
        ctx.em.emit(ctx.em.dma(core, "store"), Copy(b_buf, shared), kernel)


__all__ = ["StagedA", "StagedB"]
