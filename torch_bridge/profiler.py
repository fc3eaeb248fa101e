"""``with torch_bridge.profile(config=...) as prof:`` — everything the device did in a block.

The profile listens to the device timeline (:func:`torch_bridge.runtime.add_listener`):
every eager op and compiled graph simulated inside the block (with its ``SimResult``),
every op that ran on the host (with the reason, if it had a lowering) and every
host<->device copy. Events lie back to back on the timeline, so the session's latency
is the sum of their cycles.

- :meth:`profile.summary`: latency split into device / host / transfer time, FLOP/s and
  engine utilization over the device time, DRAM traffic, and the host work listed;
- :meth:`profile.table`: per-op rows like ``torch.profiler``'s ``key_averages`` (aten op,
  calls, device / host / transfer time, FLOPs, bytes); the ops inside a compiled graph
  get the cycles of its critical path they account for, so the rows add up to the run;
- :meth:`profile.export_perfetto`: one Chrome/Perfetto trace of the session, each run's
  commands placed at its start on the device timeline;
- :attr:`profile.result` (:class:`ProfileResult`) and :attr:`profile.results` (the
  ``SimResult`` of each simulated run) for programs.

Runs are kept without their numeric outputs (the tensors already hold them).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any

from archsim.config import NpuConfig
from archsim.result import SimResult
from torch_bridge import runtime
from torch_bridge.runtime import Event, Run

_UNATTRIBUTED = "<unattributed>"


@dataclass(frozen=True)
class ProfiledEvent:
    """One timeline event of the session and the simulated run behind it, if any."""

    event: Event
    run: Run | None = None


@dataclass(frozen=True)
class OpRecord:
    """One row of :meth:`profile.table`: every call of one op in the session."""

    name: str
    calls: int = 0
    device_cycles: int = 0
    host_cycles: int = 0
    """Host fallback work (including host nodes inside compiled graphs)."""
    transfer_cycles: int = 0
    flops: int = 0
    bytes: int = 0
    """DRAM bytes for device work, host-link bytes for host work and copies."""
    notes: tuple[str, ...] = ()
    """Why calls ran on the host, when they had a lowering (distinct reasons)."""
    runtime_cycles: int = 0
    """The runtime's launch and dispatch cost before the calls (``NpuConfig.runtime``)."""

    @property
    def total_cycles(self) -> int:
        return self.device_cycles + self.host_cycles + self.transfer_cycles \
            + self.runtime_cycles

    def __add__(self, other: OpRecord) -> OpRecord:
        notes = self.notes + tuple(n for n in other.notes if n not in self.notes)
        return OpRecord(self.name, self.calls + other.calls,
                        self.device_cycles + other.device_cycles,
                        self.host_cycles + other.host_cycles,
                        self.transfer_cycles + other.transfer_cycles,
                        self.flops + other.flops, self.bytes + other.bytes, notes,
                        self.runtime_cycles + other.runtime_cycles)


SORT_KEYS: Mapping[str, Any] = MappingProxyType({
    "time": lambda r: -r.total_cycles,
    "device": lambda r: -r.device_cycles,
    "host": lambda r: -r.host_cycles,
    "transfer": lambda r: -r.transfer_cycles,
    "runtime": lambda r: -r.runtime_cycles,
    "calls": lambda r: -r.calls,
    "flops": lambda r: -r.flops,
    "bytes": lambda r: -r.bytes,
    "name": lambda r: r.name,
})
"""Orders of :meth:`profile.table` (all but ``name`` largest first)."""


@dataclass(frozen=True)
class ProfileResult:
    """A profiling session: its events and the totals over them."""

    config: NpuConfig
    events: tuple[ProfiledEvent, ...]
    start_cycle: int
    """Device clock when the session began (events are on the same timeline)."""

    @property
    def runs(self) -> tuple[SimResult, ...]:
        """The simulated runs (eager ops and compiled graphs) in order."""
        return tuple(e.run.result for e in self.events if e.run is not None)

    def cycles(self, kind: str) -> int:
        """Cycles of the events of one kind (``device``, ``host``, ``transfer`` or
        ``runtime``)."""
        return sum(e.event.cycles for e in self.events if e.event.kind == kind)

    @property
    def total_cycles(self) -> int:
        return sum(e.event.cycles for e in self.events)

    @property
    def device_cycles(self) -> int:
        return self.cycles("device")

    @property
    def host_cycles(self) -> int:
        """Host work: ops that fell back to the host, plus the host nodes inside compiled
        graphs (their share of the graph's critical path, as in :attr:`ops`)."""
        return sum(r.host_cycles for r in self.ops)

    @property
    def host_cycles_inside_runs(self) -> int:
        """The part of :attr:`host_cycles` spent in host nodes of compiled graphs (it is
        also part of :attr:`device_cycles`: the graph's run includes it)."""
        return self.host_cycles - self.cycles("host")

    @property
    def transfer_cycles(self) -> int:
        return self.cycles("transfer")

    @property
    def runtime_cycles(self) -> int:
        """The runtime's launches and dispatches (``NpuConfig.runtime``; zero: none)."""
        return self.cycles("runtime")

    @property
    def seconds(self) -> float:
        return self.config.cycles_to_seconds(self.total_cycles)

    @cached_property
    def engine_busy_cycles(self) -> Mapping[str, int]:
        """Busy cycles per engine, summed over the runs."""
        busy: dict[str, int] = {}
        for result in self.runs:
            for engine, cycles in result.engine_busy_cycles.items():
                busy[engine] = busy.get(engine, 0) + cycles
        return MappingProxyType(busy)

    @cached_property
    def utilization(self) -> Mapping[str, float]:
        """Busy fraction per engine kind (mean over the engines of the kind) during the
        simulated runs' time."""
        from compiler.ir.ops import engine_kind

        run_cycles = sum(r.total_cycles for r in self.runs)
        busy: dict[str, int] = {}
        count: dict[str, int] = {}
        for engine in self.config.engines:
            kind = engine_kind(engine)
            busy[kind] = busy.get(kind, 0) + self.engine_busy_cycles.get(engine, 0)
            count[kind] = count.get(kind, 0) + 1
        return MappingProxyType({k: (busy[k] / (count[k] * run_cycles) if run_cycles else 0.0)
                                 for k in busy})

    @property
    def dram_bytes_read(self) -> int:
        return sum(r.dram_bytes_read for r in self.runs)

    @property
    def dram_bytes_written(self) -> int:
        return sum(r.dram_bytes_written for r in self.runs)

    @property
    def host_link_bytes(self) -> int:
        """Bytes over the host link: copies, host work, and host nodes inside runs."""
        outside = sum(e.event.bytes for e in self.events if e.event.kind != "device")
        return outside + sum(r.host_link_bytes for r in self.runs)

    @property
    def flops(self) -> int:
        return sum(e.event.flops for e in self.events)

    @property
    def matmul_flops(self) -> int:
        return sum(r.matmul_flops for r in self.runs)

    @cached_property
    def ops(self) -> tuple[OpRecord, ...]:
        """Per-op records in order of first appearance (see :meth:`profile.table`)."""
        rows: dict[str, OpRecord] = {}
        for item in self.events:
            for record in _records(item):
                rows[record.name] = rows[record.name] + record if record.name in rows \
                    else record
        return tuple(rows.values())

    @property
    def host_work(self) -> tuple[OpRecord, ...]:
        """Ops with host time, most host time first."""
        return tuple(sorted((r for r in self.ops if r.host_cycles),
                            key=lambda r: -r.host_cycles))


def _records(item: ProfiledEvent) -> list[OpRecord]:
    event, run = item.event, item.run
    notes = (event.note,) if event.note else ()
    if event.kind == "host":
        return [OpRecord(event.op, 1, host_cycles=event.cycles, flops=event.flops,
                         bytes=event.bytes, notes=notes)]
    if event.kind == "transfer":
        return [OpRecord(event.op, 1, transfer_cycles=event.cycles, bytes=event.bytes)]
    if event.kind == "runtime":  # the call it precedes counts the call
        return [OpRecord(event.op, 0, runtime_cycles=event.cycles)]
    if run is None or not run.sources:  # an eager op: the run is the op
        return [OpRecord(event.op, 1, device_cycles=event.cycles, flops=event.flops,
                         bytes=event.bytes)]
    return _graph_records(run)


def _graph_records(run: Run) -> list[OpRecord]:
    """A compiled graph's cycles per aten op: each node gets the cycles of the run's
    critical path spent in its commands (they add up to the run's cycles)."""
    from reports import op_rows

    records = []
    for row in op_rows(run.result, sort="name"):
        name = run.sources.get(row.source, row.source)
        if row.source == _UNATTRIBUTED:
            name = "(graph glue)"
        on_host = "host" in row.busy_cycles
        records.append(OpRecord(
            name, 1, device_cycles=0 if on_host else row.critical_cycles,
            host_cycles=row.critical_cycles if on_host else 0, flops=row.flops,
            bytes=row.dram_bytes if not on_host else row.bytes,
            notes=(f"host node {row.source} in a compiled graph",) if on_host else ()))
    return records


class profile(AbstractContextManager["profile"]):
    """Collect the device's work inside a ``with`` block; ``config`` (a preset name,
    YAML path or ``NpuConfig``) selects the simulated hardware for the block only,
    leaving the previous config and its device clock as they were."""

    def __init__(self, config: str | Path | NpuConfig | None = None) -> None:
        self.config_request = str(config) if isinstance(config, Path) else config
        self._events: list[ProfiledEvent] = []
        self._config_block: AbstractContextManager[NpuConfig] | None = None
        self._config: NpuConfig | None = None
        self._start = 0
        self._active = False

    def __enter__(self) -> profile:
        if self._active:
            raise RuntimeError("this profile is already active; create a new one to nest")
        if self.config_request is not None:
            self._config_block = runtime.use_config(self.config_request)
            self._config = self._config_block.__enter__()
        else:
            self._config = runtime.get_config()
        self._events = []
        self._start = runtime.timeline().now_cycles
        runtime.add_listener(self._on_event)
        self._active = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        runtime.remove_listener(self._on_event)
        self._active = False
        if self._config_block is not None:
            self._config_block.__exit__(exc_type, exc, tb)
            self._config_block = None

    def _on_event(self, event: Event, run: Run | None) -> None:
        if run is not None and run.result.outputs is not None:
            run = Run(dataclasses.replace(run.result, outputs=None), run.sources)
        self._events.append(ProfiledEvent(event, run))

    # -- programmatic -------------------------------------------------------------------
    @property
    def result(self) -> ProfileResult:
        """The session so far (a snapshot: later events are not in it)."""
        if self._config is None:
            raise RuntimeError("the profile has not started: use it in a `with` block")
        return ProfileResult(self._config, tuple(self._events), self._start)

    @property
    def results(self) -> tuple[SimResult, ...]:
        """The ``SimResult`` of every simulated run, in order."""
        return self.result.runs

    # -- reports ------------------------------------------------------------------------
    def summary(self) -> str:
        from torch_bridge.profile_report import summary_text

        return summary_text(self.result)

    def table(self, sort: str = "time", top: int | None = None) -> str:
        """Per-op rows sorted by ``sort`` (one of :data:`SORT_KEYS`), the ``top`` first."""
        from torch_bridge.profile_report import table_text

        return table_text(self.result, sort, top)

    def export_perfetto(self, path: str | os.PathLike[str]) -> None:
        """Write the session's trace (open it in ui.perfetto.dev)."""
        from torch_bridge.profile_report import perfetto_trace

        with open(path, "w", encoding="utf-8") as f:
            json.dump(perfetto_trace(self.result), f)


__all__ = ["OpRecord", "ProfileResult", "ProfiledEvent", "SORT_KEYS", "profile"]
