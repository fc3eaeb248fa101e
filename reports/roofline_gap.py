"""An op's time over its roofline, on a yardstick the compiler's schedule cannot move.

An op's roofline is the least time any schedule of it could take on the chip: the
largest of its matrix FLOPs at the matrix peak plus the vector units' multiply-adds
(a matmul may share its columns with them), its other FLOPs at the vector peak, the
bytes that must cross DRAM at DRAM bandwidth and the bytes that must cross the shared
SRAM at its port's bandwidth. The bytes are the op's *compulsory* bytes
(:mod:`reports.compulsory`: each element of each tensor it reads read once, each it
writes written once, at its stored size), split by where the cheapest schedule can keep
each tensor (:func:`compulsory_traffic`):

- the program's inputs (weights among them) and outputs are in DRAM when it starts and
  must be there when it ends: DRAM bytes;
- an intermediate (``temp``) tensor that fits in the shared SRAM by itself could be
  handed from its producer to its consumers on chip (what :mod:`compiler.residency`
  does when there is room): its bytes count at the shared SRAM's bandwidth, not DRAM's;
- an intermediate larger than the shared SRAM must go through DRAM: DRAM bytes.

Why not count every tensor's bytes at DRAM bandwidth, as a kernel's classic roofline
does? Because a bound must hold for every schedule: keeping a hand-off on chip is one,
and an op that does so would beat a DRAM-only "bound" (a gap below 1 that says nothing).
Why not the op's own DRAM bytes (what its schedule moved)? Because then the yardstick
moves with the schedule: an op whose input the compiler newly keeps in shared SRAM gets
a lower roofline for a shorter time, and its gap grows as it gets faster. This split
depends only on the graph's tensors and the chip's shared SRAM size, so the gap drops
exactly when the op gets faster, and an intermediate the compiler could have kept on
chip but did not (no room left beside the others, a strided box) shows as a gap.

Each tensor is judged by itself (fits in the whole shared SRAM), the loosest reading:
the bound stays a lower bound even where an op's tensors could not all be on chip at
once. Ops fused into another kernel touch no memory of their own and are bound by
their FLOPs alone.

The compulsory bytes must be taken from the program *before* intermediates were placed
in shared SRAM (compiled with ``CompileOptions(on_chip_temps=False)``): in the placed
program they are no DRAM tensors and count nowhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from archsim.result import SimResult
from compiler.ir.ops import Program
from reports.compulsory import compulsory_tensor_bytes
from reports.data import UNATTRIBUTED, ReportData, report_data
from reports.ops import OpRow, op_rows


@dataclass(frozen=True)
class Traffic:
    """An op's compulsory bytes by where the cheapest schedule keeps each tensor."""

    dram_bytes: int = 0
    """Of the program's inputs and outputs, and of intermediates larger than the
    shared SRAM."""
    on_chip_bytes: int = 0
    """Of intermediates the shared SRAM could hold."""


def compulsory_traffic(program: Program, shared_sram_bytes: int) -> Mapping[str, Traffic]:
    """Per attributed source (``<unattributed>`` for untagged commands), its compulsory
    bytes split as the module doc says. ``program``: as built before intermediates
    were placed in shared SRAM."""
    tensors = program.tensor_map
    result = {}
    for source, per_tensor in compulsory_tensor_bytes(program).items():
        on_chip = sum(n for name, n in per_tensor.items()
                      if tensors[name].role == "temp"
                      and tensors[name].nbytes <= shared_sram_bytes)
        result[source or UNATTRIBUTED] = Traffic(sum(per_tensor.values()) - on_chip, on_chip)
    return MappingProxyType(result)


def op_cycles(row: OpRow) -> int:
    """An op's time: the cycles its busiest engine kind ran its commands (its
    coverage; not its span, which for an epilogue fused into a matmul's tiles covers
    the whole matmul)."""
    return max(row.coverage_cycles.values(), default=0)


def roofline_cycles(row: OpRow, traffic: Traffic, data: ReportData,
                    shared_bytes_per_cycle: float) -> float:
    """The op's roofline in cycles (module doc): its FLOPs at the peaks, its compulsory
    ``traffic`` at DRAM bandwidth and at the shared SRAM port's
    ``shared_bytes_per_cycle`` (``NpuConfig.shared_sram.bandwidth_bytes_per_cycle``)."""
    # a matmul's FLOPs may run on the arrays and, two a lane a cycle (a multiply-add),
    # on the vector units (compiler.kernels.matmul_vector)
    seconds = max(row.matmul_flops / (data.peak_flops + 2 * data.vector_peak_flops),
                  (row.flops - row.matmul_flops) / data.vector_peak_flops,
                  traffic.dram_bytes / data.dram_bandwidth_bytes_per_s)
    on_chip = traffic.on_chip_bytes / shared_bytes_per_cycle if traffic.on_chip_bytes else 0.0
    return max(seconds * data.clock_hz, on_chip)


def own_bytes_roofline_cycles(row: OpRow, data: ReportData) -> float:
    """The roofline on the op's own DRAM bytes (what its schedule moved): the
    yardstick that moves with the schedule (module doc), for comparison only."""
    return roofline_cycles(row, Traffic(dram_bytes=row.dram_bytes), data, 0.0)


@dataclass(frozen=True)
class OpGap:
    """One op's time against its rooflines, in cycles."""

    source: str
    cycles: int
    """:func:`op_cycles`."""
    roofline_cycles: float
    """On its compulsory bytes (:func:`roofline_cycles`)."""
    own_bytes_roofline_cycles: float
    """On the DRAM bytes its schedule moved (:func:`own_bytes_roofline_cycles`)."""

    @property
    def gap(self) -> float:
        return self.cycles / self.roofline_cycles

    @property
    def own_bytes_gap(self) -> float | None:
        """None for an op that moved no DRAM bytes and ran no FLOPs."""
        own = self.own_bytes_roofline_cycles
        return self.cycles / own if own else None


def op_gaps(result: SimResult, unplaced: Program, min_share: float = 0.0
            ) -> tuple[OpGap, ...]:
    """Each op of ``result`` that took at least ``min_share`` of the run and has a
    roofline, against its rooflines; ``unplaced``: the same program as built before
    intermediates were placed in shared SRAM (module doc), whose tensors give the
    compulsory bytes."""
    data = report_data(result)
    shared = result.config.shared_sram
    traffic = compulsory_traffic(unplaced, shared.size_bytes)
    gaps = []
    for row in op_rows(data):
        cycles = op_cycles(row)
        roof = roofline_cycles(row, traffic.get(row.source, Traffic()), data,
                               shared.bandwidth_bytes_per_cycle)
        if cycles < min_share * data.total_cycles or roof <= 0:
            continue
        gaps.append(OpGap(row.source, cycles, roof, own_bytes_roofline_cycles(row, data)))
    return tuple(gaps)


__all__ = ["OpGap", "Traffic", "compulsory_traffic", "op_cycles", "op_gaps",
           "own_bytes_roofline_cycles", "roofline_cycles"]
