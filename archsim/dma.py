"""DMA engines: a core's neural DMAs (``coreN.dmaM``) and the shared task DMA (``tdma``).

A transfer costs the engine's setup latency, plus the DRAM latency if it touches DRAM
and the NoC latency if it enters or leaves a core, and then a flow over every link on
its path, capped by the engine's bandwidth (and, from DRAM, by the channels its bytes
interleave over). An engine keeping several transfers in flight (``outstanding``)
overlaps their latencies; their data still streams one transfer after the other. A gather reads each picked row as its own contiguous DRAM run, so it
is charged row by row, each rounded up to the access granularity like a strided load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from archsim.timing import CommandTiming
from compiler.ir.operands import DramRef, Slice, SramRef
from compiler.ir.ops import Copy, Gather, Load, Op, Store

if TYPE_CHECKING:
    from archsim.chip import Chip


class DmaEngine:
    def __init__(self, name: str, chip: "Chip", bandwidth_bytes_per_cycle: float,
                 setup_latency_cycles: int, outstanding: int = 1) -> None:
        self.name = name
        self.chip = chip
        self.bandwidth = float(bandwidth_bytes_per_cycle)
        self.setup_latency_cycles = setup_latency_cycles
        self.outstanding = outstanding

    def timing(self, op: Op) -> CommandTiming:
        if isinstance(op, Load):
            return self._dram_transfer(op.src, op.dst, reading=True)
        if isinstance(op, Store):
            return self._dram_transfer(op.dst, op.src, reading=False)
        if isinstance(op, Copy):
            return self._sram_copy(op.src, op.dst)
        if isinstance(op, Gather):
            return self._gather(op)
        raise TypeError(f"{self.name} cannot run {type(op).__name__}")

    def _dram_transfer(self, dram_ref: DramRef, sram_ref: SramRef, reading: bool) -> CommandTiming:
        chip = self.chip
        charged = chip.dram.charged_bytes(dram_ref, chip.tensors[dram_ref.tensor])
        links, latency = chip.sram_path(sram_ref.space)
        return CommandTiming(
            fixed_cycles=self.setup_latency_cycles + chip.dram.latency_cycles + latency,
            links=(chip.dram.link, *links),
            nbytes=charged,
            cap=min(self.bandwidth, chip.dram.cap(charged)),
            dram_read=charged if reading else 0,
            dram_written=0 if reading else charged,
        )

    def _gather(self, op: Gather) -> CommandTiming:
        """Like a Load of ``n`` rows, but every row is a separate DRAM run wherever the
        indices point. The index vector is read from SRAM during setup (not charged)."""
        chip = self.chip
        rows = op.indices.shape[0] if op.indices.shape else 1
        charged = rows * chip.dram.charged_bytes(_one_row(op.table), chip.tensors[op.table.tensor])
        links, latency = chip.sram_path(op.dst.space)
        return CommandTiming(
            fixed_cycles=self.setup_latency_cycles + chip.dram.latency_cycles + latency,
            links=(chip.dram.link, *links),
            nbytes=charged,
            cap=min(self.bandwidth, chip.dram.cap(charged)),
            dram_read=charged,
        )

    def _sram_copy(self, src: SramRef, dst: SramRef) -> CommandTiming:
        chip = self.chip
        if src.space == dst.space:
            links, latency = (chip.space_port(src.space),), 0
        else:
            src_links, src_latency = chip.sram_path(src.space)
            dst_links, dst_latency = chip.sram_path(dst.space)
            links = (*src_links, *dst_links)
            latency = max(src_latency, dst_latency)
        return CommandTiming(
            fixed_cycles=self.setup_latency_cycles + latency,
            links=links,
            nbytes=src.nbytes,
            cap=self.bandwidth,
        )


def _one_row(table: DramRef) -> DramRef:
    """The first row of a 2-D table box: every gathered row has its layout."""
    first = table.slices[0]
    return DramRef(table.tensor, (Slice(first.start, first.start + 1), *table.slices[1:]))
