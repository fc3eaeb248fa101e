"""The device's state: the simulated hardware config and one timeline of device work.

Eager execution on ``"npu"`` is synchronous, but the *simulated* device keeps a clock:
every op executed on the device appends an :class:`Event` to one :class:`Timeline`
(like a single stream). Events are back to back; the timeline's ``now_cycles`` is the
device clock that ``torch.npu.elapsed_cycles()`` reports.

Three kinds of work are recorded:

- ``"device"``: work the NPU itself does (simulated kernels, memsets, on-device copies),
- ``"host"``: ops that fell back to the host CPU, timed as host compute plus the
  host-link transfers of their inputs and outputs (host work is never free),
- ``"transfer"``: host<->device copies over the host link.

Listeners (:func:`add_listener`; the profiler is one) see every event as it is recorded,
together with the simulated :class:`Run` behind it, if any. The timeline
itself keeps only cycles, so a long training loop does not hold every run's trace.

This module does not import torch, so the timeline can be read and tested alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from archsim.config import DEFAULT_PRESET, NpuConfig, load_config

if TYPE_CHECKING:
    from archsim.result import SimResult

EventKind = Literal["device", "host", "transfer", "runtime"]
EVENT_KINDS: tuple[str, ...] = ("device", "host", "transfer", "runtime")
"""``runtime``: the software's launch and dispatch cost before a device call
(:func:`record_launch`), its own kind so reports show it apart from the hardware."""


@dataclass(frozen=True)
class Event:
    """One piece of work on the device timeline; cycles are core-clock cycles."""

    op: str
    kind: EventKind
    start_cycle: int
    end_cycle: int
    bytes: int
    """Bytes moved by this event (over the host link for host work and transfers)."""
    flops: int = 0
    """Arithmetic done (estimated for host work; from the schedule for simulated runs)."""
    note: str = ""
    """Why the work ran where it did, e.g. why an op fell back to the host."""

    @property
    def cycles(self) -> int:
        return self.end_cycle - self.start_cycle


@dataclass
class Timeline:
    """Device work in the order it was issued; each event starts when the previous ended."""

    events: list[Event] = field(default_factory=list)
    now_cycles: int = 0

    def record(self, op: str, kind: EventKind, cycles: int, nbytes: int = 0,
               flops: int = 0, note: str = "") -> Event:
        """Append ``cycles`` of work at the current device time and advance the clock."""
        if kind not in EVENT_KINDS:
            raise ValueError(f'"kind" must be one of {EVENT_KINDS}, got {kind!r}')
        if cycles < 0:
            raise ValueError(f'"cycles" must be >= 0, got {cycles} for op {op!r}')
        start = self.now_cycles
        event = Event(op, kind, start, start + cycles, nbytes, flops, note)
        self.events.append(event)
        self.now_cycles = event.end_cycle
        return event

    def busy_cycles(self, kind: EventKind) -> int:
        """Total cycles spent in events of one kind."""
        return sum(e.cycles for e in self.events if e.kind == kind)


@dataclass(frozen=True)
class _Costs:
    """Per-config constants of the cost estimates, precomputed once per config."""

    link_bytes_per_cycle: float
    link_latency_cycles: int
    host_flops_per_cycle: float
    dram_bytes_per_cycle: float

    @staticmethod
    def of(config: NpuConfig) -> "_Costs":
        return _Costs(
            link_bytes_per_cycle=config.host_link_bytes_per_cycle,
            link_latency_cycles=config.host_link.latency_cycles,
            host_flops_per_cycle=config.host_link.host_flops_per_s / config.clock_hz,
            dram_bytes_per_cycle=config.dram_sustained_bytes_per_cycle,
        )


class _State:
    """The process-wide device state; the config is loaded on first use (import stays fast)."""

    def __init__(self) -> None:
        self._config: NpuConfig | None = None
        self.costs: _Costs | None = None
        self.timeline = Timeline()

    @property
    def config(self) -> NpuConfig:
        if self._config is None:
            self.set_config(load_config(DEFAULT_PRESET))
        return self._config  # type: ignore[return-value]

    def set_config(self, config: NpuConfig) -> None:
        self._config = config
        self.costs = _Costs.of(config)


_state = _State()


def get_config() -> NpuConfig:
    """The simulated hardware (default preset ``atom`` until :func:`set_config`)."""
    return _state.config


def set_config(config: NpuConfig | str) -> NpuConfig:
    """Select the simulated hardware by preset name, YAML path or config object.

    The device clock restarts: cycles of different clocks do not add up, so a new
    timeline begins. Tensors already on the device stay there; if they no longer fit
    the new DRAM capacity, the config is not changed and ``CapacityError`` is raised.
    """
    from archsim.errors import CapacityError

    new = load_config(config) if isinstance(config, str) else config
    if not isinstance(new, NpuConfig):
        raise TypeError(f"set_config expects a preset name, a path or an NpuConfig, "
                        f"got {type(config).__name__}")
    in_use = memory_in_use()
    if in_use > new.dram.capacity_bytes:
        raise CapacityError(
            f"cannot switch to {new.name!r}: {in_use} bytes are on the device, more than "
            f"its dram.capacity_bytes={new.dram.capacity_bytes}")
    _state.set_config(new)
    _state.timeline = Timeline()
    return new


def timeline() -> Timeline:
    """The current device timeline (replaced by :func:`set_config` and :func:`reset_timeline`)."""
    return _state.timeline


def reset_timeline() -> Timeline:
    """Start a fresh timeline at cycle 0 and return it."""
    _state.timeline = Timeline()
    return _state.timeline


@contextmanager
def use_config(config: NpuConfig | str) -> Iterator[NpuConfig]:
    """Simulate ``config`` inside the block (on a fresh timeline), then go back to the
    previous config *and* its timeline, so the device clock outside is untouched."""
    previous, previous_timeline = _state.config, _state.timeline
    new = set_config(config)
    try:
        yield new
    finally:
        _state.set_config(previous)
        _state.timeline = previous_timeline


@dataclass(frozen=True)
class Run:
    """A simulated run behind a device event."""

    result: SimResult
    sources: Mapping[str, str] = field(default_factory=dict)
    """Source tag in the result (graph node name) -> aten op, for compiled graphs; empty
    for an eager op, whose event names the op."""


Listener = Callable[[Event, "Run | None"], None]
_listeners: list[Listener] = []


def add_listener(listener: Listener) -> None:
    """Call ``listener(event, run)`` for every event recorded from now on; ``run`` is the
    simulated :class:`Run` behind a device event, ``None`` for estimated work."""
    _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    """Stop calling ``listener``; raises ``ValueError`` if it was not added."""
    _listeners.remove(listener)


def _record(op: str, kind: EventKind, cycles: int, nbytes: int, flops: int = 0,
            note: str = "", run: Run | None = None) -> Event:
    event = _state.timeline.record(op, kind, cycles, nbytes, flops, note)
    for listener in _listeners:
        listener(event, run)
    return event


def _costs() -> _Costs:
    if _state.costs is None:
        _state.config  # noqa: B018 (reading it loads the default preset)
    return _state.costs  # type: ignore[return-value]


def transfer_cycles(nbytes: int) -> int:
    """Cycles to move ``nbytes`` over the host link once (latency + bytes / bandwidth)."""
    costs = _costs()
    return costs.link_latency_cycles + math.ceil(nbytes / costs.link_bytes_per_cycle)


def record_transfer(op: str, nbytes: int) -> Event:
    """Record a host<->device copy of ``nbytes`` over the host link."""
    return _record(op, "transfer", transfer_cycles(nbytes), nbytes)


def host_op_cycles(flops: float, bytes_to_host: int, bytes_to_device: int) -> int:
    """Cycles of host work: inputs up the host link, the host computes at
    ``host_link.host_flops_per_s``, outputs come back down the link."""
    costs = _costs()
    compute = math.ceil(flops / costs.host_flops_per_cycle)
    return compute + transfer_cycles(bytes_to_host) + transfer_cycles(bytes_to_device)


def record_host_op(op: str, flops: float, bytes_to_host: int, bytes_to_device: int,
                   note: str = "") -> Event:
    """Record an op that ran on the host (see :func:`host_op_cycles`); ``note`` says why
    it did not run on the device, when there is more to say than "no npu kernel"."""
    cycles = host_op_cycles(flops, bytes_to_host, bytes_to_device)
    moved = bytes_to_host + bytes_to_device
    return _record(op, "host", cycles, moved, int(flops), note)


def record_device_memory_op(op: str, nbytes_read: int, nbytes_written: int) -> Event:
    """Record a memory-bound op done on the device (memset, on-device copy), timed at the
    DRAM bandwidth, after its launch (one kernel). An estimate until the compiler lowers
    these ops."""
    record_launch(op, 1)
    costs = _costs()
    cycles = math.ceil((nbytes_read + nbytes_written) / costs.dram_bytes_per_cycle)
    return _record(op, "device", cycles, nbytes_read + nbytes_written)


def record_device(op: str, cycles: int, nbytes: int = 0, *, flops: int = 0, note: str = "",
                  result: SimResult | None = None,
                  sources: Mapping[str, str] | None = None) -> Event:
    """Record device work whose cycles someone else computed, e.g. a simulated schedule
    (pass its ``result``, and for a graph the node -> op ``sources``, so listeners such
    as the profiler can keep them)."""
    run = Run(result, sources or {}) if result is not None else None
    return _record(op, "device", cycles, nbytes, flops, note, run)


def record_launch(op: str, kernels: int) -> Event | None:
    """Record the runtime's cost of one call issued from Python (an eager op, a compiled
    graph, a Triton launch) that runs ``kernels`` kernels: one dispatch and their launches
    (``NpuConfig.runtime``); nothing is recorded when the config's runtime costs none."""
    cycles = get_config().launch_cycles(kernels, dispatches=1)
    if not cycles:
        return None
    return _record(op, "runtime", cycles, 0,
                   note=f"{kernels} kernel launch{'es' if kernels != 1 else ''} + dispatch")


def memory_in_use() -> int:
    """Bytes currently allocated on the device (see :mod:`torch_bridge.storage`)."""
    from torch_bridge import storage

    return storage.allocator.in_use_bytes


__all__ = [
    "EVENT_KINDS", "Event", "EventKind", "Listener", "Run", "Timeline", "add_listener",
    "get_config", "host_op_cycles", "memory_in_use", "record_device",
    "record_device_memory_op", "record_host_op", "record_launch", "record_transfer",
    "remove_listener",
    "reset_timeline", "set_config", "timeline", "transfer_cycles", "use_config",
]
