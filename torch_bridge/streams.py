"""``torch.npu.Event`` and ``torch.npu.Stream``, timed in simulated device time.

The simulated device runs everything on one timeline (:mod:`torch_bridge.runtime`),
in the order the host issues it, like a single stream: an event records the device
clock at that point, and ``elapsed_time`` between two events is the simulated time of
the work issued between them (the clock ``torch_bridge.profile()`` reports), in
milliseconds as ``torch.cuda.Event.elapsed_time``. Streams exist so that code written
for ``torch.cuda`` runs unchanged; they all share that one timeline (work on two
streams does not overlap on the simulated device), so ``synchronize``, ``wait_stream``
and ``wait_event`` have nothing to wait for and ``query`` is always true.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch_bridge import runtime

__all__ = ["Event", "Stream", "current_stream", "default_stream", "set_stream", "stream"]


class Stream:
    """A stream of the simulated device (all streams share its one timeline)."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = device
        self.priority = priority

    def query(self) -> bool:
        """True: work is simulated when it is issued, so nothing is ever pending."""
        return True

    def synchronize(self) -> None:
        """Nothing to wait for (see the module docstring)."""

    def wait_stream(self, stream: Stream) -> None:
        """Nothing to wait for: streams share one in-order timeline."""

    def wait_event(self, event: Event) -> None:
        """Nothing to wait for: ``event`` was recorded on the one timeline already."""

    def record_event(self, event: Event | None = None) -> Event:
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __enter__(self) -> Stream:
        self._previous = current_stream()
        set_stream(self)
        return self

    def __exit__(self, *exc: object) -> None:
        set_stream(self._previous)

    def __repr__(self) -> str:
        return f"torch.npu.Stream(device=npu:0 priority={self.priority})"


_DEFAULT = Stream()
_current: list[Stream] = [_DEFAULT]


def default_stream(device: Any = None) -> Stream:
    return _DEFAULT


def current_stream(device: Any = None) -> Stream:
    return _current[0]


def set_stream(stream: Stream) -> None:
    _current[0] = stream


@contextmanager
def stream(s: Stream | None) -> Iterator[Stream | None]:
    """``with torch.npu.stream(s):`` makes ``s`` current (None: no change)."""
    if s is None:
        yield s
        return
    previous = current_stream()
    set_stream(s)
    try:
        yield s
    finally:
        set_stream(previous)


class Event:
    """A point on the simulated device's timeline.

    ``record()`` notes the device clock; ``elapsed_time(end)`` is the simulated time
    from this event to ``end`` in milliseconds. Both must have been recorded on the same
    timeline (``torch.npu.set_config`` starts a new one)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self._cycles: int | None = None
        self._timeline: object | None = None
        self._clock_hz = 0

    def record(self, stream: Stream | None = None) -> None:
        timeline = runtime.timeline()
        self._cycles = timeline.now_cycles
        self._timeline = timeline
        self._clock_hz = runtime.get_config().clock_hz

    def query(self) -> bool:
        """True once recorded: the work before it has been simulated already."""
        return self._cycles is not None

    def synchronize(self) -> None:
        """Nothing to wait for: the work before the event has been simulated."""

    def wait(self, stream: Stream | None = None) -> None:
        """Nothing to wait for (one timeline)."""

    @property
    def cycles(self) -> int | None:
        """Device cycle at which the event was recorded (None before ``record``)."""
        return self._cycles

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds of simulated device time from this event to ``end_event``."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument "
                               "'enable_timing=True'.")
        if self._cycles is None or end_event._cycles is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed "
                               "time.")
        if self._timeline is not end_event._timeline:
            raise RuntimeError("the events were recorded on different device timelines "
                               "(torch.npu.set_config started a new one between them)")
        return (end_event._cycles - self._cycles) / self._clock_hz * 1e3

    def __repr__(self) -> str:
        where = "not recorded" if self._cycles is None else f"cycle {self._cycles}"
        return f"torch.npu.Event({where})"
