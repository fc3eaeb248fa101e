"""Bottleneck analysis: the schedule's critical path and why each engine sat idle.

**Critical path.** A command starts exactly at ``max(end of the previous command in
its engine's queue, ends of its dependencies)`` (0 if it has neither). Walking back
from the last command to finish, each step goes to the predecessor whose end equals
this command's start — a dependency if one qualifies, else the previous command in the
queue — until a command starting at cycle 0. A DMA engine keeping several transfers in
flight streams their data in order: a transfer issued while the previous one was still
in flight goes to that one, and its step counts from that one's end. The segments tile ``[0, total_cycles]``,
so the path's length is the run's latency: shortening anything off the path cannot
make the run faster.

**Idle reasons.** Over ``[0, total_cycles]`` every engine's time is split into exact
integer buckets that sum to ``total_cycles``:

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
"""

from __future__ import annotations

import re

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from reports.data import DMA_KINDS, CommandRecord, ResultLike, report_data
from reports.text import format_cycles, format_table, percent


@dataclass(frozen=True)
class PathStep:
    """One command on the critical path and how it was reached from the previous one."""

    command: int
    engine: str
    op: str
    source: str
    start: int
    end: int
    via: str
    """How this step's start was set: ``"start"`` (cycle 0), ``"dep"`` (a dependency
    ended), ``"queue"`` (the previous command on its engine ended) or ``"stream"``
    (a DMA transfer issued while the previous one was in flight, whose data streamed
    after it: the step counts from that transfer's end)."""

    @property
    def cycles(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class CriticalPath:
    steps: tuple[PathStep, ...]
    """From cycle 0 to the end of the run."""

    @property
    def length_cycles(self) -> int:
        return sum(s.cycles for s in self.steps)

    def cycles_by(self, key: str) -> Mapping[str, int]:
        """Path cycles grouped by a step attribute (``engine``, ``source``, ``op``) or
        ``kind`` (engine kind), largest first."""
        from compiler.ir.ops import engine_kind

        totals: dict[str, int] = {}
        for step in self.steps:
            name = engine_kind(step.engine) if key == "kind" else getattr(step, key)
            totals[name or "<unattributed>"] = totals.get(name or "<unattributed>", 0) + step.cycles
        return MappingProxyType(dict(sorted(totals.items(), key=lambda kv: -kv[1])))


def critical_path(result: ResultLike) -> CriticalPath:
    """The chain of commands that set the run's latency (see module docstring)."""
    data = report_data(result)
    commands = data.commands
    if not commands:
        return CriticalPath(())
    index = {c.id: i for i, c in enumerate(commands)}
    previous_in_queue = _previous_in_queue(commands)
    # The last command to finish; ties go to the later one in program order.
    current = max(range(len(commands)), key=lambda i: (commands[i].end, i))
    steps: list[PathStep] = []
    end = None
    while True:
        c = commands[current]
        via, predecessor = _predecessor(c, commands, index, previous_in_queue[current])
        stop = c.end if end is None else end
        start = commands[predecessor].end if via == "stream" else c.start
        steps.append(PathStep(c.id, c.engine, c.op, c.source, start, stop, via))
        end = start
        if predecessor is None:
            break
        current = predecessor
    steps.reverse()
    return CriticalPath(tuple(steps))


def _previous_in_queue(commands: tuple[CommandRecord, ...]) -> list[int | None]:
    last: dict[str, int] = {}
    previous: list[int | None] = []
    for i, c in enumerate(commands):
        previous.append(last.get(c.engine))
        last[c.engine] = i
    return previous


def _predecessor(c: CommandRecord, commands: tuple[CommandRecord, ...], index: dict[int, int],
                 queue_previous: int | None) -> tuple[str, int | None]:
    """The predecessor whose end set ``c``'s start (dependencies first, the latest
    one in program order on ties)."""
    for d in sorted((index[d] for d in c.deps), reverse=True):
        if commands[d].end == c.start:
            return "dep", d
    if queue_previous is not None and commands[queue_previous].end > c.start:
        return "stream", queue_previous  # in flight together: its data streamed first
    if queue_previous is not None and commands[queue_previous].end == c.start:
        return "queue", queue_previous
    if c.start == 0:
        return "start", None
    raise ValueError(
        f"command {c.id} on {c.engine} starts at cycle {c.start}, but no dependency or "
        f"earlier command on its engine ends then: the trace does not follow the "
        f"in-order semantics")


# ---------------------------------------------------------------- idle reasons


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


def engine_times(result: ResultLike, include_unused: bool = False) -> tuple[EngineTime, ...]:
    """Per engine, busy / contention / waiting / nothing-to-do cycles (see module
    docstring), in display order. Unused engines only with ``include_unused``."""
    data = report_data(result)
    queues: dict[str, list[CommandRecord]] = {}
    for c in data.commands:
        queues.setdefault(c.engine, []).append(c)
    by_id = {c.id: c for c in data.commands}
    engines = data.engines if include_unused else data.used_engines
    return tuple(_engine_time(e, queues.get(e, []), by_id, data.total_cycles) for e in engines)


def _engine_time(engine: str, queue: list[CommandRecord], by_id: dict[int, CommandRecord],
                 total: int) -> EngineTime:
    busy = contention = waiting = 0
    waiting_on: dict[str, int] = {}
    free_at = 0
    for c in queue:
        gap = c.start - free_at
        if gap > 0:
            waiting += gap
            blocker = max((by_id[d] for d in c.deps), key=lambda d: (d.end, d.id), default=None)
            kind = blocker.kind if blocker is not None else "?"
            waiting_on[kind] = waiting_on.get(kind, 0) + gap
        # a transfer in flight with the one before counts from where that one ended
        span = max(0, c.end - max(c.start, free_at))
        extra = min(span, max(0, span - c.uncontended_cycles)
                    if c.start < free_at else c.contention_cycles) \
            if c.kind in DMA_KINDS else 0
        contention += extra
        busy += span - extra
        free_at = max(free_at, c.end)
    nothing = total - free_at
    return EngineTime(engine, total, busy, contention, waiting, nothing,
                      MappingProxyType(dict(sorted(waiting_on.items(), key=lambda kv: -kv[1]))))


# ---------------------------------------------------------------- text


def critical_path_text(result: ResultLike, max_rows: int = 12, fold_below: float = 0.01
                       ) -> str:
    """The critical path by source op, ranked by its share of the path: per op the
    engines and commands it spent there and when it was first and last on it. Ops under
    ``fold_below`` of the path (or past ``max_rows``) are folded into one line."""
    from compiler.ir.ops import engine_kind

    data = report_data(result)
    path = critical_path(data)
    total = data.total_cycles
    lines = [f"Critical path: {len(path.steps)} commands, {format_cycles(path.length_cycles)} "
             f"cycles ({data.cycles_to_us(path.length_cycles):.2f} us), by op"]
    groups: dict[str, list[PathStep]] = {}
    for step in path.steps:
        groups.setdefault(step.source or "<unattributed>", []).append(step)
    ranked = sorted(groups.items(), key=lambda item: -sum(s.cycles for s in item[1]))
    rows, folded = [], []
    for source, steps in ranked:
        cycles = sum(s.cycles for s in steps)
        if len(rows) >= max_rows or cycles < fold_below * total:
            folded.append(cycles)
            continue
        engines = ",".join(dict.fromkeys(engine_kind(s.engine) for s in steps))
        ops = ",".join(dict.fromkeys(s.op for s in steps))
        rows.append((source, ops, engines, str(len(steps)), format_cycles(steps[0].start),
                     format_cycles(steps[-1].end), format_cycles(cycles),
                     percent(cycles, total)))
    lines.append(format_table(
        ("source", "op", "engines", "commands", "first", "last", "cycles", "share"), rows,
        align="lllrrrrr"))
    if folded:
        lines.append(f"... {len(folded)} more ops (under {percent(fold_below * total, total)} "
                     f"each, or past the first {max_rows}): {format_cycles(sum(folded))} "
                     f"cycles ({percent(sum(folded), total)})")
    merged = _across_layers(ranked)
    if len(merged) < len(ranked):  # repeated layers: what each kind of op costs in all
        top = sorted(merged.items(), key=lambda kv: -kv[1])[:6]
        lines.append("Across layers: " + ", ".join(f"{name} {percent(cycles, total)}"
                                                    for name, cycles in top))
    shares = ", ".join(f"{k} {percent(v, total)}" for k, v in path.cycles_by("kind").items())
    lines.append(f"Path time by engine kind: {shares}")
    return "\n".join(lines)


def _across_layers(ranked: list[tuple[str, list[PathStep]]]) -> dict[str, int]:
    """Path cycles per source with layer numbers and node counters merged:
    ``blocks.3.proj:addmm_23`` and ``blocks.5.proj:addmm_35`` -> ``blocks.*.proj:addmm``."""
    merged: dict[str, int] = {}
    for source, steps in ranked:
        path, colon, node = source.rpartition(":")
        key = re.sub(r"(^|\.)\d+(?=\.|$)", r"\1*", path) + colon + re.sub(r"_\d+$", "", node)
        merged[key] = merged.get(key, 0) + sum(s.cycles for s in steps)
    return merged


def idle_text(result: ResultLike) -> str:
    """Per engine: busy, contention, waiting (and on what), nothing to do."""
    data = report_data(result)
    rows = []
    for t in engine_times(data):
        on = ", ".join(f"{k} {percent(v, t.total)}" for k, v in t.waiting_on.items()) or "-"
        rows.append((t.engine, percent(t.busy, t.total), percent(t.contention, t.total),
                     percent(t.waiting, t.total), on, percent(t.nothing_to_do, t.total)))
    unused = len(data.engines) - len(data.used_engines)
    table = format_table(("engine", "busy", "contention", "waiting", "waiting on",
                          "nothing to do"), rows, align="lrrrlr")
    note = f"\n({unused} engines ran no commands)" if unused else ""
    return f"Engine time over {format_cycles(data.total_cycles)} cycles\n{table}{note}"


__all__ = [
    "CriticalPath", "EngineTime", "PathStep", "critical_path", "critical_path_text",
    "engine_times", "idle_text",
]
