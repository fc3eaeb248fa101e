"""What a run returns: an immutable trace and the statistics derived from it."""

from __future__ import annotations

import copy

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

import numpy as np

from archsim.config.model import NpuConfig
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

    def describe(self) -> str:
        """``3 of 64 panels of mm simulated, 61 extended at 4,512,345 cycles each``."""
        return (f"{self.simulated} of {self.total} panels of {self.kernel} simulated, "
                f"{self.total - self.simulated} extended at {self.panel_cycles:,} cycles each")


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

    @property
    def sram_peak_bytes(self) -> Mapping[str, int]:
        """Per SRAM space, the highest byte address the program touches."""
        return self.program.sram_high_water

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

    @property
    def matrix_utilization(self) -> float:
        """Achieved matrix FLOP/s as a fraction of the config's peak."""
        return self.achieved_flops / self.config.peak_flops

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
