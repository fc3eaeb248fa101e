"""Why each engine sat idle: every engine's time over the run in exact buckets.

Over ``[0, total_cycles]`` every engine's time is split into integer buckets that sum
to ``total_cycles``:

- ``busy``: running commands at their uncontended speed;
- ``contention``: transfers (DMA, task DMA, host DMA) taking longer than they would
  alone on the chip, because other flows shared a DRAM channel, NoC link or SRAM port
  (actual duration minus fixed cycles plus bytes at the slowest of the engine's cap and
  the links' capacities);
- ``waiting``: the engine was free and its next queued command was waiting for a
  dependency (including the time before its first command, which always waits on
  one: a command with no pending dependency starts as soon as its engine is free).
  The wait is further split by the engine kind of the dependency that finished last
  (``waiting_on``): e.g. a matrix engine waiting on ``dma`` is starved of data;
- ``nothing_to_do``: after the engine's last command (its queue is empty), or the
  whole run for an engine without commands.

``busy + contention`` is the engine's busy time as the result counts it, so it over
``total_cycles`` is the utilization every other report shows. When the run was
extended (layers or matmul panels counted but not simulated, :mod:`reports.extended`),
the simulated trace covers ``[0, total - extended]`` and each extension its span
after it: there an engine is busy for the cycles the extension added, split into busy
and contention, and idle for the rest, split into waiting (on what) and nothing to do,
as in the simulated units the extension repeats (its window of the trace).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from reports.data import DMA_KINDS, CommandRecord, ResultLike, report_data
from reports.extended import ExtendedSpan, apportion, overlap
from reports.text import format_cycles, format_table, percent


@dataclass(frozen=True)
class EngineTime:
    """Where one engine's ``total`` cycles went; the four buckets sum to ``total``."""

    engine: str
    total: int
    busy: int
    contention: int
    waiting: int
    nothing_to_do: int
    waiting_on: Mapping[str, int]
    """``waiting`` split by the engine kind of the dependency that finished last."""

    @property
    def idle(self) -> int:
        return self.waiting + self.nothing_to_do

    @property
    def busy_including_contention(self) -> int:
        return self.busy + self.contention


@dataclass(frozen=True)
class _Segment:
    """A stretch of one engine's time: ``active`` (running a command, ``contention``
    of its cycles slowed by sharing), ``waiting`` (on an engine kind) or ``nothing``."""

    start: int
    end: int
    bucket: str
    contention: int = 0
    on: str = ""


def engine_times(result: ResultLike, include_unused: bool = False) -> tuple[EngineTime, ...]:
    """Per engine, busy / contention / waiting / nothing-to-do cycles (see module
    docstring), in display order. Unused engines only with ``include_unused``."""
    data = report_data(result)
    queues: dict[str, list[CommandRecord]] = {}
    for c in data.commands:
        queues.setdefault(c.engine, []).append(c)
    by_id = {c.id: c for c in data.commands}
    engines = data.engines if include_unused else data.used_engines
    simulated = data.total_cycles - data.extended_cycles
    return tuple(_engine_time(e, list(_segments(queues.get(e, []), by_id, simulated)),
                              data.total_cycles, data.extended) for e in engines)


def _segments(queue: list[CommandRecord], by_id: dict[int, CommandRecord], end: int
              ) -> Iterator[_Segment]:
    """An engine's time over ``[0, end]`` as segments, in order."""
    free_at = 0
    for c in queue:
        if c.start > free_at:
            blocker = max((by_id[d] for d in c.deps), key=lambda d: (d.end, d.id), default=None)
            yield _Segment(free_at, c.start, "waiting", on=blocker.kind if blocker else "?")
        # a transfer in flight with the one before counts from where that one ended
        start = max(c.start, free_at)
        span = max(0, c.end - start)
        extra = min(span, max(0, span - c.uncontended_cycles)
                    if c.start < free_at else c.contention_cycles) \
            if c.kind in DMA_KINDS else 0
        if span:
            yield _Segment(start, c.end, "active", contention=extra)
        free_at = max(free_at, c.end)
    if end > free_at:
        yield _Segment(free_at, end, "nothing")


def _engine_time(engine: str, segments: list[_Segment], total: int,
                 extended: tuple[ExtendedSpan, ...]) -> EngineTime:
    buckets = {"busy": 0, "contention": 0, "waiting": 0, "nothing": 0}
    waiting_on: dict[str, int] = {}
    for s in segments:
        length = s.end - s.start
        if s.bucket == "active":
            buckets["busy"] += length - s.contention
            buckets["contention"] += s.contention
        elif s.bucket == "waiting":
            buckets["waiting"] += length
            waiting_on[s.on] = waiting_on.get(s.on, 0) + length
        else:
            buckets["nothing"] += length
    for span in extended:
        for bucket, cycles in _extended_time(engine, segments, span).items():
            if isinstance(bucket, tuple):  # ("waiting", kind)
                buckets["waiting"] += cycles
                waiting_on[bucket[1]] = waiting_on.get(bucket[1], 0) + cycles
            else:
                buckets[bucket] += cycles
    return EngineTime(engine, total, buckets["busy"], buckets["contention"],
                      buckets["waiting"], buckets["nothing"],
                      MappingProxyType(dict(sorted(waiting_on.items(), key=lambda kv: -kv[1]))))


def _extended_time(engine: str, segments: list[_Segment], span: ExtendedSpan
                   ) -> dict[str | tuple[str, str], int]:
    """The engine's buckets over ``span``: busy for the cycles the extension added
    (split into busy and contention), idle for the rest (split into waiting on each kind
    and nothing to do), each split like the engine's time in the span's window."""
    window: dict[str | tuple[str, str], float] = {}
    for s in segments:
        inside = overlap(s.start, s.end, span.window)
        if not inside:
            continue
        if s.bucket == "active":
            contention = inside * s.contention / (s.end - s.start)
            window["busy"] = window.get("busy", 0) + inside - contention
            window["contention"] = window.get("contention", 0) + contention
        else:
            key = ("waiting", s.on) if s.bucket == "waiting" else "nothing"
            window[key] = window.get(key, 0) + inside
    active = min(span.busy_cycles.get(engine, 0), span.cycles)
    busy = apportion(active, {k: window.get(k, 0) for k in ("busy", "contention")}) \
        or ({"busy": active} if active else {})
    idle_weights = {k: w for k, w in window.items() if k not in ("busy", "contention")}
    idle = span.cycles - active
    rest = apportion(idle, idle_weights) or ({"nothing": idle} if idle else {})
    return busy | rest


def idle_text(result: ResultLike) -> str:
    """Per engine: busy (its utilization: busy plus contention), contention, waiting
    (and on what), nothing to do."""
    data = report_data(result)
    rows = []
    for t in engine_times(data):
        on = ", ".join(f"{k} {percent(v, t.total)}" for k, v in t.waiting_on.items()) or "-"
        rows.append((t.engine, percent(t.busy_including_contention, t.total),
                     percent(t.busy, t.total), percent(t.contention, t.total),
                     percent(t.waiting, t.total), on, percent(t.nothing_to_do, t.total)))
    unused = len(data.engines) - len(data.used_engines)
    table = format_table(("engine", "util", "busy", "contention", "waiting",
                          "waiting on", "nothing to do"), rows, align="lrrrrlr")
    notes = [f"({unused} engines ran no commands)"] if unused else []
    for span in data.extended:
        notes.append(f"(includes {span.label}: {format_cycles(span.cycles)} cycles after the "
                     f"simulated trace, split like the simulated middle {span.unit}s)")
    return (f"Engine time over {format_cycles(data.total_cycles)} cycles "
            f"(util = busy + contention, the utilization of the summary)\n{table}"
            + "".join(f"\n{note}" for note in notes))


__all__ = ["EngineTime", "engine_times", "idle_text"]
