"""The per-op table: every cycle attributed back to the user's model (``source`` tag).

For each source op (aten op / graph node) the table gives its span (first start to last
end), its share of the critical path, FLOPs, bytes, the resource that bounds it and its
efficiency against that resource's peak. Sorting by ``time`` orders ops by their share
of the critical path — the latency they are responsible for — then by span.

**Bound.** For each engine kind the op used, *coverage* is the number of cycles during
which at least one engine of that kind ran one of the op's commands. The kind with the
largest coverage dominates. If it covers less than half of the op's span, the op is
``latency`` bound (its engines mostly waited on dependencies, setup latencies and
hand-offs); otherwise ``compute`` (matrix or vector engine), ``memory`` (neural or task
DMA, host DMA) or ``host`` (host CPU).

**Efficiency** is achieved vs the dominant kind's chip-wide peak over the op's span:
matrix FLOPs vs the matrix peak, vector FLOPs vs the vector peak (one FLOP per lane per
cycle), DRAM bytes vs DRAM bandwidth, host-link bytes vs host-link bandwidth. It is
``None`` where no peak applies (host CPU work, SRAM-to-SRAM copies only).

**DRAM/min** is the DRAM bytes the op's commands charged over its compulsory bytes
(:mod:`reports.compulsory`: each distinct element of the DRAM boxes it reads read once,
each it writes written once): 1.00x moves nothing twice; a tiling that re-reads
operands, or DRAM bursts wider than the data, shows above 1.

**Energy** is the dynamic energy of the op's commands (:mod:`archsim.energy`: MACs,
vector element-ops and bytes at each level); static power belongs to the run, not to
an op.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from compiler.ir.ops import MATMUL_OPS
from reports.compulsory import ratio
from reports.critical_path import critical_path
from reports.energy import format_joules
from reports.data import CommandRecord, ReportData, ResultLike, report_data
from reports.text import (
    distinct_labels,
    format_bytes,
    format_count,
    format_cycles,
    format_table,
    percent,
)

SOURCE_WIDTH = 40
"""Op names longer than this are shortened from the middle in the table (never so that
two rows read the same)."""

LATENCY_COVERAGE = 0.5
"""Below this fraction of its span covered by its dominant engine kind, an op is
latency/dependency bound."""

_BOUND_OF_KIND = {"mxu": "compute", "vpu": "compute", "dma": "memory", "tdma": "memory",
                  "hdma": "memory", "host": "host"}
_PEAK_NAME = {"mxu": "MXU peak", "vpu": "vector peak", "dma": "DRAM bw", "tdma": "DRAM bw",
              "hdma": "host link bw", "host": "-"}


MATMUL_MNEMONICS = frozenset(op.mnemonic for op in MATMUL_OPS)
"""The ops (by :attr:`CommandRecord.op`) whose FLOPs are an op's matmul FLOPs."""


@dataclass(frozen=True)
class OpRow:
    """One source op of the user's model."""

    source: str
    commands: int
    first_start: int
    last_end: int
    busy_cycles: Mapping[str, int]
    """Busy cycles summed per engine kind."""
    coverage_cycles: Mapping[str, int]
    """Cycles with at least one engine of the kind busy on this op."""
    critical_cycles: int
    """Cycles of the critical path spent in this op's commands."""
    flops: int
    matmul_flops: int
    """FLOPs of its matmul commands, on the arrays or on the vector units."""
    bytes: int
    dram_bytes: int
    dominant_kind: str
    bound: str
    """``compute``, ``memory``, ``host`` or ``latency``."""
    efficiency: float | None
    peak_name: str
    """What efficiency is measured against (``MXU peak``, ``DRAM bw``...)."""
    span_us: float
    energy_j: float = 0.0
    """Dynamic energy of the op's commands (:mod:`archsim.energy`), joules."""
    compulsory_bytes: int | None = None
    """DRAM bytes the op must move at least: each distinct box element it reads read
    once, each it writes written once (:mod:`reports.compulsory`); None: not known."""

    @property
    def dram_over_compulsory(self) -> float | None:
        """DRAM bytes charged over compulsory bytes (1.0: nothing moved twice); None
        when the op must move nothing or the figure is not known."""
        return ratio(self.dram_bytes, self.compulsory_bytes or 0)

    @property
    def span_cycles(self) -> int:
        return self.last_end - self.first_start

    @property
    def arithmetic_intensity(self) -> float | None:
        """FLOPs per DRAM byte (None without DRAM traffic)."""
        return self.flops / self.dram_bytes if self.dram_bytes else None

    @property
    def achieved_flops(self) -> float:
        """FLOP/s over the op's span."""
        return self.flops / (self.span_us * 1e-6) if self.span_us else 0.0


SORT_KEYS: Mapping[str, Callable[[OpRow], float | str]] = MappingProxyType({
    # "time" is the op's share of the latency: cycles of the critical path spent in it.
    # An op's span can cover most of the run when its commands are spread out (weights
    # prepared up front, used at the end), so span says little about what it costs.
    "time": lambda r: (-r.critical_cycles, -r.span_cycles),
    "critical": lambda r: -r.critical_cycles,
    "span": lambda r: -r.span_cycles,
    "flops": lambda r: -r.flops,
    "bytes": lambda r: -r.bytes,
    "energy": lambda r: -r.energy_j,
    "name": lambda r: r.source,
})
"""Sort orders of :func:`op_rows` (all but ``name`` largest first)."""


def op_rows(result: ResultLike, sort: str = "time", top: int | None = None) -> tuple[OpRow, ...]:
    """The per-op table as data. ``sort`` is one of :data:`SORT_KEYS`; ties keep the
    order of first appearance."""
    if sort not in SORT_KEYS:
        raise ValueError(f"unknown sort {sort!r}; choose one of {', '.join(SORT_KEYS)}")
    data = report_data(result)
    groups: dict[str, list[CommandRecord]] = {}
    for c in data.commands:
        groups.setdefault(c.attributed_source, []).append(c)
    critical: dict[str, int] = {}
    for step in critical_path(data).steps:
        key = step.source or "<unattributed>"
        critical[key] = critical.get(key, 0) + step.cycles
    rows = [_row(source, cmds, critical.get(source, 0), data) for source, cmds in groups.items()]
    rows.sort(key=SORT_KEYS[sort])
    return tuple(rows[:top] if top is not None else rows)


def _row(source: str, commands: list[CommandRecord], critical_cycles: int,
         data: ReportData) -> OpRow:
    first = min(c.start for c in commands)
    last = max(c.end for c in commands)
    span = last - first
    busy: dict[str, int] = {}
    intervals: dict[str, list[tuple[int, int]]] = {}
    for c in commands:
        busy[c.kind] = busy.get(c.kind, 0) + c.cycles
        intervals.setdefault(c.kind, []).append((c.start, c.end))
    coverage = {kind: _union_length(iv) for kind, iv in intervals.items()}
    dominant = max(coverage, key=lambda k: (coverage[k], busy[k]))
    bound = ("latency" if coverage[dominant] < LATENCY_COVERAGE * span
             else _BOUND_OF_KIND.get(dominant, "latency"))
    matmul_flops = sum(c.flops for c in commands if c.op in MATMUL_MNEMONICS)
    flops = sum(c.flops for c in commands)
    nbytes = sum(c.bytes for c in commands)
    dram_bytes = sum(c.dram_bytes for c in commands)
    host_bytes = sum(c.bytes for c in commands if c.kind == "hdma")
    span_s = span / data.clock_hz
    return OpRow(
        source=source, commands=len(commands), first_start=first, last_end=last,
        busy_cycles=MappingProxyType(busy), coverage_cycles=MappingProxyType(coverage),
        critical_cycles=critical_cycles, flops=flops, matmul_flops=matmul_flops,
        bytes=nbytes, dram_bytes=dram_bytes, dominant_kind=dominant, bound=bound,
        efficiency=_efficiency(dominant, span_s, matmul_flops, flops - matmul_flops,
                               dram_bytes, host_bytes, data),
        peak_name=_PEAK_NAME.get(dominant, "-"),
        span_us=span_s * 1e6,
        energy_j=sum(c.energy_j for c in commands),
        compulsory_bytes=(None if data.compulsory_dram_bytes is None
                          else data.compulsory_dram_bytes.get(source, 0)),
    )


def _efficiency(kind: str, span_s: float, matmul_flops: int, vector_flops: int,
                dram_bytes: int, host_bytes: int, data: ReportData) -> float | None:
    if span_s <= 0:
        return None
    if kind == "mxu":
        return matmul_flops / (span_s * data.peak_flops)
    if kind == "vpu":
        return vector_flops / (span_s * data.vector_peak_flops)
    if kind in ("dma", "tdma"):
        return dram_bytes / (span_s * data.dram_bandwidth_bytes_per_s) if dram_bytes else None
    if kind == "hdma":
        return host_bytes / (span_s * data.host_link_bandwidth_bytes_per_s)
    return None


def _union_length(intervals: list[tuple[int, int]]) -> int:
    total = 0
    reach = None
    for start, end in sorted(intervals):
        if reach is None or start >= reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def op_table(result: ResultLike, sort: str = "time", top: int | None = None) -> str:
    """The per-op table as aligned text (see the module docstring for the columns)."""
    data = report_data(result)
    rows = op_rows(data, sort, top)
    total = data.total_cycles
    names = distinct_labels([r.source for r in rows], SOURCE_WIDTH)
    cells = []
    for r in rows:
        efficiency = "-" if r.efficiency is None else f"{100 * r.efficiency:.1f}%"
        reuse = r.dram_over_compulsory
        cells.append((
            names[r.source], f"{r.span_us:.2f}", percent(r.critical_cycles, total),
            format_count(r.flops), format_bytes(r.bytes),
            "-" if reuse is None else f"{reuse:.2f}x", format_joules(r.energy_j), r.bound,
            efficiency, r.peak_name))
    # The span's share of the run is left out (span us says it) to keep the table
    # within 100 characters.
    headers = ("op (source)", "span us", "critical", "FLOPs", "bytes", "DRAM/min",
               "energy", "bound", "eff", "vs")
    all_rows = len(op_rows(data)) if top is not None else len(rows)
    title = (f"Ops by {sort} ({len(rows)} of {all_rows}); run "
             f"{format_cycles(total)} cycles")
    if data.extended:
        title += (f", of which {format_cycles(data.total_cycles - data.extended_cycles)} "
                  f"simulated (the ops below)")
    notes = [f"  + {span.label}: {format_cycles(span.cycles)} cycles "
             f"({percent(span.cycles, total)} of the run), the ops of the simulated middle "
             f"{span.unit}s again" for span in data.extended]
    return "\n".join([title, format_table(headers, cells, align="lrrrrrrlrl"), *notes])


__all__ = ["LATENCY_COVERAGE", "SOURCE_WIDTH", "OpRow", "SORT_KEYS", "op_rows", "op_table"]
