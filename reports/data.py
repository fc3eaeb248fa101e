"""``ReportData``: everything the reports read, from a ``SimResult`` or from saved JSON.

Every report function accepts either a :class:`~archsim.result.SimResult` or a
:class:`ReportData` (see :func:`report_data`), so ``archsim report result.json`` can
re-render the text reports without re-simulating. The per-command figures a report
needs beyond the trace (DRAM bytes, uncontended duration) are the result's own
(``SimResult.command_costs``); SRAM regions and operand text are read from the
program's ops when first asked. Busy cycles are the result's, so utilization is one
number in every report; the part of an extended run that was not simulated is in
``extended`` (:mod:`reports.extended`).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Union

from archsim.result import uncontended_cycles
from archsim.energy import run_energy
from reports.compulsory import compulsory_bytes
from reports.energy import EnergySummary, energy_summary
from reports.extended import ExtendedSpan, extended_spans
from archsim.config.model import NARROW_DTYPES
from compiler.ir.dtypes import DType
from compiler.ir.ops import engine_core, engine_kind

if TYPE_CHECKING:
    from archsim.config.model import NpuConfig
    from archsim.result import SimResult
    from compiler.ir.ops import Op

DMA_KINDS: frozenset[str] = frozenset({"dma", "tdma", "hdma"})
"""Engine kinds that move data (their commands can be slowed by contention)."""

COMPUTE_KINDS: frozenset[str] = frozenset({"mxu", "vpu"})
UNATTRIBUTED = "<unattributed>"


@dataclass(frozen=True)
class Region:
    """A byte range of one SRAM space."""

    space: str
    offset: int
    nbytes: int

    @property
    def end(self) -> int:
        return self.offset + self.nbytes


class Description:
    """A command's operand text and the SRAM bytes it reads and writes: derived from its
    op when first asked (the text summary never asks; traces, JSON and the SRAM figure
    do), or given (loaded from JSON)."""

    __slots__ = ("_op", "_value")

    def __init__(self, op: Op | None = None, operands: str = "",
                 reads: tuple[Region, ...] = (), writes: tuple[Region, ...] = ()) -> None:
        self._op = op
        self._value = None if op is not None else (operands, reads, writes)

    def get(self) -> tuple[str, tuple[Region, ...], tuple[Region, ...]]:
        if self._value is None:
            op = self._op
            self._value = (operand_text(op), _regions(op, write=False),
                           _regions(op, write=True))
            self._op = None
        return self._value


@dataclass(frozen=True)
class CommandRecord:
    """One executed command with everything reports need about it."""

    id: int
    engine: str
    op: str
    source: str
    deps: tuple[int, ...]
    start: int
    end: int
    bytes: int
    """Bytes the command moves (DMA/host link), as charged to the links."""
    flops: int
    dram_bytes: int
    """DRAM bytes read plus written."""
    uncontended_cycles: int
    """Duration had the command been alone on the chip (equal to its duration for
    compute; for transfers: fixed cycles + bytes at the slowest of its engine cap
    and its links' capacities)."""
    energy_j: float = 0.0
    """Dynamic energy the command charged (:mod:`archsim.energy`), joules."""
    description: Description = field(default_factory=lambda: Description(), compare=False,
                                     repr=False)
    """Operand text and SRAM regions, derived from the op when first read."""

    @property
    def operands(self) -> str:
        """Operand text: ``src=%A[0:8, 0:8] dst=sram0[0x000000] f32[8,8]``."""
        return self.description.get()[0]

    @property
    def reads(self) -> tuple[Region, ...]:
        return self.description.get()[1]

    @property
    def writes(self) -> tuple[Region, ...]:
        return self.description.get()[2]

    @property
    def cycles(self) -> int:
        return self.end - self.start

    @property
    def kind(self) -> str:
        return engine_kind(self.engine)

    @property
    def core(self) -> int | None:
        return engine_core(self.engine)

    @property
    def contention_cycles(self) -> int:
        """Cycles beyond the uncontended duration (0 for compute)."""
        return max(0, self.cycles - self.uncontended_cycles)

    @property
    def attributed_source(self) -> str:
        return self.source or UNATTRIBUTED


@dataclass(frozen=True)
class ReportData:
    """A run, reduced to plain numbers and records (JSON-serializable)."""

    program_name: str
    config_name: str
    clock_hz: int
    cores: int
    total_cycles: int
    functional: bool
    peak_flops: float
    """Matrix-engine peak of the chip for this run's matmuls, FLOP/s (op/s): the
    native peak, times the arrays' rate for narrow inputs (``SimResult.matrix_peak_flops``)."""
    vector_peak_flops: float
    """Vector-engine peak of the chip (one FLOP per lane per cycle), FLOP/s."""
    dram_bandwidth_bytes_per_s: float
    host_link_bandwidth_bytes_per_s: float
    matmul_flops: int
    flops: int
    dram_bytes_read: int
    dram_bytes_written: int
    host_link_bytes: int
    engines: tuple[str, ...]
    """Every engine of the config, in display order (used or not)."""
    sram_peak_bytes: Mapping[str, int]
    sram_capacity_bytes: Mapping[str, int]
    commands: tuple[CommandRecord, ...]
    """Every command once, in program order."""
    matrix_precision: str = ""
    """How the arrays run matmuls: their input dtype and the f32 precision policy."""
    layers: str = ""
    """When a stack of identical layers was simulated in part, how (``SimResult.layers``):
    totals and busy cycles cover the whole stack, the commands the simulated layers."""
    tiles: str = ""
    """When a large matmul was simulated in its first panels of output tiles, how
    (``SimResult.tiles``): totals and busy cycles cover all of it, the commands the
    simulated panels."""
    run_busy_cycles: Mapping[str, int] | None = None
    """Busy cycles per engine as the result counts them (over the whole run when it was
    extended), what utilization is read from everywhere; None: from the commands."""
    extended: tuple[ExtendedSpan, ...] = ()
    """The units counted in the totals but not simulated (``layers``, ``tiles``), in
    timeline order after the trace."""
    dram_efficiency: float = 1.0
    """The share of ``dram_bandwidth_bytes_per_s`` (the pins' peak) DRAM sustains."""
    energy: EnergySummary | None = None
    """Energy and power of the run (:mod:`reports.energy`); None: not known (a report
    saved before energy was modelled)."""
    compulsory_dram_bytes: Mapping[str, int] | None = None
    """Per attributed source, the DRAM bytes its commands must move at least
    (:mod:`reports.compulsory`); None: not known (a report saved before it was)."""
    kernels: int = 0
    """Kernels the compiler made of the workload (0: unknown)."""
    runtime_overhead_cycles: int = 0
    """The config's runtime cost of one call of the run (a dispatch and a launch per
    kernel, ``SimResult.runtime_overhead_cycles``); not in ``total_cycles``."""
    choices: Mapping[str, str] = field(default_factory=dict)
    """Source -> the mapping the compiler chose for it and why (``SimResult.choices``)."""
    integer_matmuls: bool = False
    """Every matmul multiplied 8-bit integers: its rates read as ops/s (int8 TOPS), not
    FLOP/s."""

    # -- time -----------------------------------------------------------------------
    @property
    def seconds(self) -> float:
        return self.total_cycles / self.clock_hz

    def cycles_to_us(self, cycles: float) -> float:
        return cycles * 1e6 / self.clock_hz

    # -- derived totals -------------------------------------------------------------
    @property
    def dram_bytes(self) -> int:
        return self.dram_bytes_read + self.dram_bytes_written

    @property
    def dram_bandwidth_used_bytes_per_s(self) -> float:
        return self.dram_bytes / self.seconds if self.total_cycles else 0.0

    @property
    def dram_bytes_per_cycle(self) -> float:
        return self.dram_bandwidth_bytes_per_s / self.clock_hz

    @property
    def achieved_flops(self) -> float:
        """Matrix-engine FLOP/s over the whole run."""
        return self.matmul_flops / self.seconds if self.total_cycles else 0.0

    @cached_property
    def trace_cycles(self) -> int:
        """Cycles the trace covers: the run's, or fewer when a stack of identical layers
        or a matmul's tiles were simulated in part and the totals extended
        (``SimResult.layers``, ``SimResult.tiles``; the rest is in ``extended``)."""
        return max((c.end for c in self.commands), default=0)

    @property
    def extended_cycles(self) -> int:
        """Cycles of the run not simulated (``extended``)."""
        return sum(span.cycles for span in self.extended)

    @cached_property
    def engine_busy_cycles(self) -> Mapping[str, int]:
        """Busy cycles per engine of the config (0 for unused ones)."""
        busy = dict.fromkeys(self.engines, 0)
        if self.run_busy_cycles is not None:
            return MappingProxyType(busy | dict(self.run_busy_cycles))
        reach: dict[str, int] = {}  # a DMA keeping transfers in flight overlaps them:
        for c in self.commands:     # count each cycle once (commands start in order)
            start = max(c.start, reach.get(c.engine, c.start))
            if c.end > start:
                busy[c.engine] = busy.get(c.engine, 0) + c.end - start
                reach[c.engine] = max(c.end, reach.get(c.engine, c.end))
        return MappingProxyType(busy)

    @cached_property
    def utilization(self) -> Mapping[str, float]:
        total = self.total_cycles
        return MappingProxyType({e: (b / total if total else 0.0)
                                 for e, b in self.engine_busy_cycles.items()})

    @cached_property
    def used_engines(self) -> tuple[str, ...]:
        """Engines that ran at least one command, in display order."""
        used = {c.engine for c in self.commands}
        ordered = [e for e in self.engines if e in used]
        return tuple(ordered + sorted(used - set(ordered)))


ResultLike = Union["SimResult", ReportData]


_DERIVED: dict[int, ReportData] = {}
"""Report data per SimResult object (every report of one result shares it); an entry
goes away with its result."""


def report_data(result: ResultLike) -> ReportData:
    """``result`` as :class:`ReportData` (unchanged if it already is one; derived once
    per SimResult)."""
    if isinstance(result, ReportData):
        return result
    key = id(result)
    data = _DERIVED.get(key)
    if data is None:
        data = _DERIVED[key] = from_sim_result(result)
        weakref.finalize(result, _DERIVED.pop, key, None)
    return data


WEIGHT_FORMATS = {DType.u8: "int4 weights (two a byte, scaled per group)"}
"""What a float matmul's narrow ``b`` of each dtype holds when not named by it: bytes
``b`` of a float matmul are packed int4 weights (``compiler.ir.ops.Dequant``)."""


def matrix_precision(config: NpuConfig,
                     pairs: Iterable[tuple[DType, DType]] = ()) -> str:
    """E.g. ``bf16 arrays; f32 matmuls at 'default' precision (1 bf16 pass)``, then how
    the run's narrow matmuls ran (``pairs``: their (a, b) input dtypes): ``; i8
    matmuls in the arrays' int8 mode (4x)``, ``widened to f16 (1x)`` where the arrays
    have no mode for them, and weight-only ``i8 weights widened to bf16 on the way in``."""
    matrix = config.core.matrix
    if matrix.input_dtype == "f32":
        text = "f32 arrays"
    else:
        passes = matrix.f32_passes
        text = (f"{matrix.input_dtype} arrays; f32 matmuls at {matrix.f32_precision!r} "
                f"precision ({passes} {matrix.input_dtype} pass{'es' if passes > 1 else ''})")
    pairs = set(pairs)
    for name in sorted({a.rate_name for a, _ in pairs} & set(NARROW_DTYPES)):
        dtypes = "/".join(sorted({a.value for a, _ in pairs if a.rate_name == name}))
        rate = getattr(matrix.rates, name)
        mode = {"i8": "int8", "i4": "int4"}.get(name, name)
        text += (f"; {dtypes} matmuls in the arrays' {mode} mode ({rate}x)" if rate else
                 f"; {dtypes} matmuls widened to {matrix.input_dtype} (1x)")
    for a, b in sorted((p for p in pairs if p[0].is_float and p[0] != p[1]),
                       key=lambda p: (p[0].value, p[1].value)):
        weights = WEIGHT_FORMATS.get(b, f"{b} weights")
        text += f"; {weights} widened to {a} on the way in"
    return text


def from_sim_result(result: SimResult) -> ReportData:
    """``result`` as report data: the trace, the per-command costs the result carries
    (``SimResult.command_costs``) and its totals; nothing is re-costed here."""
    config = result.config
    program = result.program
    costs = result.command_costs
    energy = energy_summary(result)
    command_j = run_energy(result).command_j.tolist()
    records = []
    # Programs may repeat one op object: describe it once, and only if asked.
    described: dict[int, Description] = {}
    for command, start, end, nbytes, flops, dram, alone, joules in zip(
            program.commands, result.starts.tolist(), result.ends.tolist(),
            result.command_bytes.tolist(), result.command_flops.tolist(),
            costs.dram_bytes.tolist(), costs.uncontended_cycles.tolist(), command_j):
        description = described.get(id(command.op))
        if description is None:
            description = described[id(command.op)] = Description(command.op)
        records.append(CommandRecord(
            id=command.id, engine=command.engine, op=command.op.mnemonic,
            source=command.source, deps=tuple(command.deps), start=start, end=end,
            bytes=nbytes, flops=flops, dram_bytes=dram, uncontended_cycles=alone,
            energy_j=joules, description=description,
        ))
    capacity = config.sram_capacities
    return ReportData(
        program_name=program.name,
        config_name=config.name,
        clock_hz=config.clock_hz,
        cores=config.cores,
        total_cycles=result.total_cycles,
        functional=result.functional,
        peak_flops=result.matrix_peak_flops,
        vector_peak_flops=float(config.cores * config.core.vector.lanes * config.clock_hz),
        dram_bandwidth_bytes_per_s=config.dram_bandwidth_bytes_per_s,
        dram_efficiency=config.dram.efficiency,
        kernels=result.kernels,
        runtime_overhead_cycles=result.runtime_overhead_cycles,
        choices=dict(result.choices),
        host_link_bandwidth_bytes_per_s=config.host_link.bandwidth_gb_per_s * 1e9,
        matmul_flops=result.matmul_flops,
        flops=result.flops,
        dram_bytes_read=int(result.dram_bytes_read),
        dram_bytes_written=int(result.dram_bytes_written),
        host_link_bytes=int(result.host_link_bytes),
        engines=config.engines,
        sram_peak_bytes=MappingProxyType(dict(result.sram_peak_bytes)),
        sram_capacity_bytes=MappingProxyType(capacity),
        matrix_precision=matrix_precision(config, result.matmul_flops_by_dtypes),
        integer_matmuls=bool(result.matmul_flops_by_dtypes) and all(
            a.is_int8 for a, _ in result.matmul_flops_by_dtypes),
        layers=result.layers.describe() if result.layers else "",
        tiles=result.tiles.describe() if result.tiles else "",
        run_busy_cycles=MappingProxyType(dict.fromkeys(config.engines, 0) | {
            e: int(b) for e, b in result.engine_busy_cycles.items()}),
        extended=extended_spans(result.extensions),
        energy=energy,
        compulsory_dram_bytes=MappingProxyType({
            source or UNATTRIBUTED: n for source, n in compulsory_bytes(program).items()}),
        commands=tuple(records),
    )


def operand_text(op: Op) -> str:
    """``field=value`` for each operand of ``op`` (SRAM/DRAM refs in the IR's text form)."""
    from compiler.ir.operands import DramRef, SramRef
    from compiler.ir.text import format_dram_ref, format_sram_ref

    parts = []
    for spec in fields(op):
        name, value = spec.name, getattr(op, spec.name)
        if isinstance(value, SramRef):
            text = format_sram_ref(value)
        elif isinstance(value, DramRef):
            text = format_dram_ref(value)
        elif hasattr(value, "value"):  # enums and scalars
            text = str(value.value)
        else:
            text = str(value)
        parts.append(f"{name}={text}")
    return " ".join(parts)


def _regions(op: Op, write: bool) -> tuple[Region, ...]:
    from compiler.ir.access import reads, writes

    refs = writes(op) if write else reads(op)
    return tuple(Region(r.space, r.offset, r.nbytes) for r in refs)


def busy_cycles(commands: Iterable[CommandRecord]) -> int:
    """Cycles at least one of ``commands`` runs: the union of their [start, end), so
    host-DMA transfers running beside host ops count once (their sum could exceed the
    run)."""
    busy, reach = 0, 0
    for c in sorted(commands, key=lambda c: c.start):
        busy += max(0, c.end - max(c.start, reach))
        reach = max(reach, c.end)
    return busy


__all__ = [
    "COMPUTE_KINDS", "CommandRecord", "Description", "DMA_KINDS", "Region", "ReportData", "ResultLike",
    "UNATTRIBUTED", "busy_cycles", "from_sim_result", "operand_text", "report_data",
    "uncontended_cycles",
]
