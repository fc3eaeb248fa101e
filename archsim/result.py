"""What a run returns: an immutable trace and the statistics derived from it."""

from __future__ import annotations

import copy

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

import numpy as np

from archsim.config.model import NpuConfig
from compiler.ir.dtypes import DType
from compiler.ir.ops import Program


@dataclass(frozen=True)
class TraceEvent:
    """One command's execution."""

    command: int
    engine: str
    start: int
    end: int
    op: str
    """The operation's mnemonic (``load``, ``matmul``...)."""
    bytes: int
    flops: int
    source: str

    @property
    def cycles(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class OpStats:
    """Everything a run attributes to one source op (aten op / graph node)."""

    source: str
    commands: int
    busy_cycles: Mapping[str, int]
    """Busy cycles per engine kind (dma, mxu, vpu, tdma, hdma, host)."""
    first_start: int
    last_end: int
    flops: int
    bytes: int

    @property
    def span_cycles(self) -> int:
        return self.last_end - self.first_start


@dataclass(frozen=True)
class Extension:
    """What the units (layers, panels) a run did not simulate add to it, as
    :mod:`archsim.repeated` counted them: reports place them on the timeline and split
    their time like the simulated units they repeat."""

    first_cycle: int = 0
    """Where they are placed on the run's timeline: right after the simulated trace
    and any extension applied before (in the model they run before the last simulated
    unit, which fuses with what follows; being identical, where they are drawn changes
    no total)."""
    cycles: int = 0
    """Cycles they add to the run's latency."""
    window: tuple[int, int] = (0, 0)
    """Trace cycles of the middle simulated units they repeat: from the end of the first
    simulated unit to the end of the last middle one."""
    busy_cycles: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Busy cycles they add, per engine."""

    @property
    def last_cycle(self) -> int:
        return self.first_cycle + self.cycles


@dataclass(frozen=True)
class RepeatedLayers:
    """How a result covers a stack of identical layers."""

    path: str
    """The stack's module path in the model (``model.layers``)."""
    simulated: int
    """Layers compiled and simulated (the first ones)."""
    total: int
    """Layers in the model."""
    layer_cycles: int
    """Cycles each layer not simulated adds (the mean of the middle simulated ones)."""
    extension: Extension = field(default_factory=Extension)
    """What the layers not simulated add, and where reports place them."""

    def describe(self) -> str:
        """``3 of 80 simulated, 77 extended at 16,620,801 cycles each`` (the stack's
        path is ``path``)."""
        if self.simulated >= self.total:
            return f"{self.total} of {self.total} simulated"
        return (f"{self.simulated} of {self.total} simulated, {self.total - self.simulated} "
                f"extended at {self.layer_cycles:,} cycles each")


@dataclass(frozen=True)
class RepeatedTiles:
    """How a result covers a matmul compiled in part: its first panels of output tiles
    (a panel is a round of tiles, one or a few per core, all of one shape) simulated,
    the others extended (:func:`archsim.repeated.extend_tiles`)."""

    kernel: str
    """The matmul kernel (``mm``)."""
    simulated: int
    """Panels compiled and simulated (the first ones)."""
    total: int
    """Panels in the matmul."""
    tiles_per_panel: int
    panel_cycles: int
    """Cycles each panel not simulated adds (the mean of the middle simulated ones)."""
    extension: Extension = field(default_factory=Extension)
    """What the panels not simulated add, and where reports place them."""

    def describe(self) -> str:
        """``3 of 64 panels of mm simulated, 61 extended at 4,512,345 cycles each``."""
        return (f"{self.simulated} of {self.total} panels of {self.kernel} simulated, "
                f"{self.total - self.simulated} extended at {self.panel_cycles:,} cycles each")


@dataclass(frozen=True)
class CommandCosts:
    """Per command (program order), what its cost alone says, apart from the run."""

    dram_bytes: np.ndarray = field(repr=False)
    """DRAM bytes read plus written."""
    uncontended_cycles: np.ndarray = field(repr=False)
    """Duration had the command been alone on the chip (its duration for compute; for
    transfers: fixed cycles plus its bytes at the slowest of its engine's cap and its
    links' capacities, rounded up as the flow network rounds)."""


@dataclass(frozen=True)
class SimResult:
    program: Program
    config: NpuConfig
    total_cycles: int
    starts: np.ndarray = field(repr=False)
    ends: np.ndarray = field(repr=False)
    command_bytes: np.ndarray = field(repr=False)
    command_flops: np.ndarray = field(repr=False)
    engine_busy_cycles: Mapping[str, int]
    dram_bytes_read: int
    dram_bytes_written: int
    host_link_bytes: int
    matmul_flops: int
    flops: int
    link_bytes: Mapping[str, int] = field(default_factory=dict)
    """Bytes each shared link carried (``dram``, ``noc.coreN``, ``sramN.port``,
    ``shared.port``, ``host_link``)."""
    outputs: Mapping[str, np.ndarray] | None = None
    """Final DRAM tensor values in functional mode (bf16 as float32); None otherwise."""
    layers: RepeatedLayers | None = None
    """Set when a stack of identical layers was simulated in part and the totals cover
    all of it (:func:`archsim.repeated.extend`); the trace is that of the simulated
    layers."""
    tiles: RepeatedTiles | None = None
    """Set when a large matmul was compiled and simulated in part and the totals cover
    all of it (:func:`archsim.repeated.extend_tiles`); the trace is that of the simulated
    panels."""
    kernels: int = 0
    """Kernels the compiler made of the workload, over all of it (layers and panels not
    simulated included); 0 when unknown (a hand-written program)."""
    choices: Mapping[str, str] = field(default_factory=dict)
    """Source -> the mapping the compiler chose for it among several, and why (a
    convolution's: taps packed into K or implicit GEMM, with both estimates)."""

    @property
    def runtime_overhead_cycles(self) -> int:
        """What the config's runtime (``NpuConfig.runtime``) adds before the run when it
        is called once: one dispatch and a launch per kernel. Not in ``total_cycles``,
        the hardware's time; 0 when the runtime costs nothing or the kernels are
        unknown."""
        return self.config.launch_cycles(self.kernels, 1) if self.kernels else 0

    @property
    def sram_peak_bytes(self) -> Mapping[str, int]:
        """Per SRAM space, the highest byte address the program touches."""
        return self.program.sram_high_water

    @property
    def extensions(self) -> tuple[RepeatedLayers | RepeatedTiles, ...]:
        """The extensions of the run (panels of a matmul, layers of a stack), in the
        order they were applied, which is the order of their place on the timeline."""
        parts = [p for p in (self.tiles, self.layers) if p is not None]
        return tuple(sorted(parts, key=lambda p: p.extension.first_cycle))

    @cached_property
    def command_costs(self) -> CommandCosts:
        """Per command, its DRAM bytes and uncontended duration: from the costs the run
        was planned with (the plan is kept per program, so this costs nothing new)."""
        from archsim.plan import plan_for

        plan = plan_for(self.program, self.config, verify=False)
        kinds = np.asarray(plan.kinds, dtype=np.intp)
        dram = np.array([t.dram_read + t.dram_written for t in plan.timings], dtype=np.int64)
        # costs are per distinct command shape (the plan's kinds): alone-on-chip time
        # once each, from the first command of the kind
        _, first = np.unique(kinds, return_index=True)
        alone = np.zeros(len(plan.timings), dtype=np.int64)
        for kind, i in zip(kinds[first].tolist(), first.tolist()):
            fixed, links, nbytes, solo = plan.run_steps[i][:4]
            alone[kind] = uncontended_cycles(fixed, links, nbytes, solo)
        return CommandCosts(dram[kinds], alone[kinds])

    # -- time ---------------------------------------------------------------------
    @property
    def seconds(self) -> float:
        return self.total_cycles / self.config.clock_hz

    @property
    def functional(self) -> bool:
        return self.outputs is not None

    def with_outputs(self, outputs: Mapping[str, np.ndarray]) -> SimResult:
        """This result with other outputs (a replay: same timing, new data); what was
        derived from the timing is kept, not recomputed."""
        result = copy.copy(self)
        object.__setattr__(result, "outputs", MappingProxyType(dict(outputs)))
        return result

    # -- utilization ----------------------------------------------------------------
    @cached_property
    def utilization(self) -> Mapping[str, float]:
        """Busy fraction of the run per engine (0 for an empty run)."""
        total = self.total_cycles
        return MappingProxyType({e: (busy / total if total else 0.0)
                                 for e, busy in self.engine_busy_cycles.items()})

    @property
    def dram_bytes(self) -> int:
        return self.dram_bytes_read + self.dram_bytes_written

    @property
    def dram_bandwidth_bytes_per_s(self) -> float:
        return self.dram_bytes / self.seconds if self.total_cycles else 0.0

    @property
    def dram_bandwidth_utilization(self) -> float:
        return self.dram_bandwidth_bytes_per_s / self.config.dram_bandwidth_bytes_per_s

    @property
    def achieved_flops(self) -> float:
        """Matrix-engine FLOP/s achieved over the whole run."""
        return self.matmul_flops / self.seconds if self.total_cycles else 0.0

    @cached_property
    def matmul_flops_by_dtypes(self) -> Mapping[tuple[DType, DType], float]:
        """Matmul FLOPs done, by the dtypes of the operands (a, b): (bf16, i8) is a
        weight-only int8 matmul, its weights widened on the way in."""
        from compiler.ir.ops import MATMUL_OPS

        flops: dict[tuple[DType, DType], float] = {}
        for command, done in zip(self.program.commands, self.command_flops.tolist()):
            if isinstance(command.op, MATMUL_OPS) and done:
                dtypes = (command.op.a.dtype, command.op.b.dtype)
                flops[dtypes] = flops.get(dtypes, 0.0) + done
        return MappingProxyType(flops)

    @cached_property
    def matrix_peak_flops(self) -> float:
        """The arrays' peak for this run's matmuls: the config's peak where they take the
        native dtype, times the arrays' rate for narrow inputs (``core.matrix.rates``:
        int8 on ATOM is 4x), weighted by each dtype's share of the matmul FLOPs (the
        time they would take at their peaks adds up)."""
        rates = self.config.core.matrix.rates
        flops: dict[int, float] = {}
        for (dtype, _), done in self.matmul_flops_by_dtypes.items():
            rate = rates.of(dtype.rate_name)  # the array's mode is set by its a input
            flops[rate] = flops.get(rate, 0.0) + done
        total = sum(flops.values())
        if not total or set(flops) == {1}:
            return self.config.peak_flops
        return self.config.peak_flops * total / sum(f / rate for rate, f in flops.items())

    @property
    def matrix_utilization(self) -> float:
        """Achieved matrix FLOP/s as a fraction of the peak of this run's matmuls."""
        return self.achieved_flops / self.matrix_peak_flops

    # -- trace ----------------------------------------------------------------------
    @cached_property
    def trace(self) -> tuple[TraceEvent, ...]:
        """Every command once, in program order."""
        return tuple(
            TraceEvent(c.id, c.engine, int(s), int(e), c.op.mnemonic, int(b), int(f), c.source)
            for c, s, e, b, f in zip(self.program.commands, self.starts, self.ends,
                                     self.command_bytes, self.command_flops)
        )

    @cached_property
    def by_source(self) -> tuple[OpStats, ...]:
        """Per-source-op breakdown, in order of first appearance."""
        from compiler.ir.ops import engine_kind

        groups: dict[str, dict] = {}
        for ev in self.trace:
            g = groups.setdefault(ev.source or "<unattributed>", {
                "commands": 0, "busy": {}, "start": ev.start, "end": ev.end,
                "flops": 0, "bytes": 0})
            g["commands"] += 1
            kind = engine_kind(ev.engine)
            g["busy"][kind] = g["busy"].get(kind, 0) + ev.cycles
            g["start"] = min(g["start"], ev.start)
            g["end"] = max(g["end"], ev.end)
            g["flops"] += ev.flops
            g["bytes"] += ev.bytes
        return tuple(
            OpStats(source, g["commands"], MappingProxyType(g["busy"]), g["start"], g["end"],
                    g["flops"], g["bytes"])
            for source, g in groups.items()
        )

    @property
    def host_cycles(self) -> int:
        return self.engine_busy_cycles.get("host", 0)


def uncontended_cycles(fixed_cycles: int, links: tuple[int, ...], nbytes: float,
                       solo: float) -> int:
    """A command's duration alone on the chip (its transfer at its ``solo`` rate), rounded
    like the flow network rounds (a flow finishes at the ceiling of its exact finish
    time)."""
    from archsim.bandwidth import cycles_to_move

    if not links or nbytes <= 0:
        return int(fixed_cycles)
    return int(fixed_cycles) + cycles_to_move(nbytes, solo)
