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

**Extended runs.** When the run counted layers or matmul panels it did not simulate
(:mod:`reports.extended`), the path continues through them after the trace: through
each extension it is the path through the simulated middle units it repeats (the steps
inside its window), scaled to its cycles, so the path still adds up to the run's
latency. Why engines sat idle is in :mod:`reports.idle`.
"""

from __future__ import annotations

import re

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from reports.data import CommandRecord, ResultLike, report_data
from reports.extended import ExtendedSpan, apportion, overlap
from reports.idle import EngineTime, engine_times, idle_text
from reports.text import format_cycles, format_table, format_us, percent


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
class ExtendedPath:
    """The critical path through units counted but not simulated: the path through the
    simulated middle units they repeat (its steps inside the span's window), scaled to
    the span's cycles."""

    span: ExtendedSpan
    commands: int
    """Path steps in the window, scaled like the cycles."""
    cycles: Mapping[tuple[str, str, str], int]
    """Cycles per (engine, op, source) of the repeated steps; they sum to the span's."""

    @property
    def length_cycles(self) -> int:
        return sum(self.cycles.values())


@dataclass(frozen=True)
class CriticalPath:
    steps: tuple[PathStep, ...]
    """From cycle 0 to the end of the simulated trace."""
    extended: tuple[ExtendedPath, ...] = ()
    """After the trace, through each extension, to the end of the run."""

    @property
    def length_cycles(self) -> int:
        return (sum(s.cycles for s in self.steps)
                + sum(part.length_cycles for part in self.extended))

    def cycles_by(self, key: str) -> Mapping[str, int]:
        """Path cycles grouped by a step attribute (``engine``, ``source``, ``op``) or
        ``kind`` (engine kind), largest first. By ``source``, each extension is one
        entry named by its label."""
        from compiler.ir.ops import engine_kind

        pieces = [(s.engine, s.op, s.source, s.cycles) for s in self.steps]
        for part in self.extended:
            if key == "source":
                pieces.append(("", "", part.span.label, part.length_cycles))
            else:
                pieces.extend((*k, c) for k, c in part.cycles.items())
        field = {"engine": 0, "op": 1, "source": 2}.get(key)
        if field is None and key != "kind":
            raise ValueError(f"cannot group the critical path by {key!r}")
        totals: dict[str, int] = {}
        for piece in pieces:
            name = engine_kind(piece[0]) if key == "kind" else piece[field]
            name = name or "<unattributed>"
            totals[name] = totals.get(name, 0) + piece[3]
        return MappingProxyType(dict(sorted(totals.items(), key=lambda kv: -kv[1])))


def critical_path(result: ResultLike) -> CriticalPath:
    """The chain of commands that set the run's latency (see module docstring)."""
    data = report_data(result)
    commands = data.commands
    if not commands:
        return CriticalPath((), tuple(_extended_path(span, ()) for span in data.extended))
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
    return CriticalPath(tuple(steps), tuple(_extended_path(span, steps)
                                            for span in data.extended))


def _extended_path(span: ExtendedSpan, steps: tuple[PathStep, ...] | list[PathStep]
                   ) -> ExtendedPath:
    """The path through ``span``: its window's steps scaled to its cycles (one piece
    named by its label when the window holds none)."""
    inside: dict[tuple[str, str, str], int] = {}
    count = 0
    for s in steps:
        cycles = overlap(s.start, s.end, span.window)
        if cycles:
            key = (s.engine, s.op, s.source)
            inside[key] = inside.get(key, 0) + cycles
            count += 1
    scaled = apportion(span.cycles, inside) or ({("", "", span.label): span.cycles}
                                                if span.cycles else {})
    commands = round(count * span.cycles / span.window_cycles) if span.window_cycles else 0
    return ExtendedPath(span, commands, MappingProxyType(scaled))


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


# ---------------------------------------------------------------- text


def critical_path_text(result: ResultLike, max_rows: int = 12, fold_below: float = 0.01
                       ) -> str:
    """The critical path by source op, ranked by its share of the path: per op the
    engines and commands it spent there and when it was first and last on it; each
    extension (layers or panels not simulated) is one row. Ops under ``fold_below`` of
    the path (or past ``max_rows``) are folded into one line."""
    data = report_data(result)
    path = critical_path(data)
    total = data.total_cycles
    lines = [f"Critical path: {_path_commands(path)}, {format_cycles(path.length_cycles)} "
             f"cycles ({format_us(path.length_cycles / data.clock_hz)}), by op"]
    groups: dict[str, list[PathStep]] = {}
    for step in path.steps:
        groups.setdefault(step.source or "<unattributed>", []).append(step)
    ranked = [(sum(s.cycles for s in steps), source, _step_row(steps))
              for source, steps in groups.items()]
    ranked += [(part.length_cycles, part.span.label, _extended_row(part))
               for part in path.extended]
    ranked.sort(key=lambda item: -item[0])
    rows, folded = [], []
    for cycles, source, row in ranked:
        if len(rows) >= max_rows or cycles < fold_below * total:
            folded.append(cycles)
            continue
        rows.append((source, *row, format_cycles(cycles), percent(cycles, total)))
    lines.append(format_table(
        ("source", "op", "engines", "commands", "first", "last", "cycles", "share"), rows,
        align="lllrrrrr"))
    if folded:
        lines.append(f"... {len(folded)} more ops (under {percent(fold_below * total, total)} "
                     f"each, or past the first {max_rows}): {format_cycles(sum(folded))} "
                     f"cycles ({percent(sum(folded), total)})")
    merged = _across_layers(path)
    if len(merged) < len(groups) or path.extended:  # what each kind of op costs in all
        top = sorted(merged.items(), key=lambda kv: -kv[1])[:6]
        lines.append("Across layers: " + ", ".join(f"{name} {percent(cycles, total)}"
                                                    for name, cycles in top))
    shares = ", ".join(f"{k} {percent(v, total)}" for k, v in path.cycles_by("kind").items())
    lines.append(f"Path time by engine kind: {shares}")
    return "\n".join(lines)


def _path_commands(path: CriticalPath) -> str:
    """``994 commands`` or ``994 commands simulated + 29 layers extended``."""
    text = f"{len(path.steps)} commands"
    if path.extended:
        more = " + ".join(f"{p.span.units} {p.span.unit}s extended" for p in path.extended)
        text += f" simulated + {more}"
    return text


def _step_row(steps: list[PathStep]) -> tuple[str, str, str, str, str]:
    """op, engines, commands, first, last of one source's steps."""
    from compiler.ir.ops import engine_kind

    return (",".join(dict.fromkeys(s.op for s in steps)),
            ",".join(dict.fromkeys(engine_kind(s.engine) for s in steps)),
            str(len(steps)), format_cycles(steps[0].start), format_cycles(steps[-1].end))


def _extended_row(part: ExtendedPath) -> tuple[str, str, str, str, str]:
    """op, engines, commands, first, last of an extension (ops and engines by their
    share of its path, at most four ops)."""
    from compiler.ir.ops import engine_kind

    ops: dict[str, int] = {}
    kinds: dict[str, int] = {}
    for (engine, op, _), cycles in part.cycles.items():
        ops[op] = ops.get(op, 0) + cycles
        kinds[engine_kind(engine)] = kinds.get(engine_kind(engine), 0) + cycles
    ranked_ops = [op for op in sorted(ops, key=lambda k: -ops[k]) if op][:4]
    return (",".join(ranked_ops) or "-",
            ",".join(k for k in sorted(kinds, key=lambda k: -kinds[k]) if k) or "-",
            f"~{part.commands:,}", format_cycles(part.span.start_cycle),
            format_cycles(part.span.end_cycle))


def _across_layers(path: CriticalPath) -> dict[str, int]:
    """Path cycles per source with layer numbers and node counters merged:
    ``blocks.3.proj:addmm_23`` and ``blocks.5.proj:addmm_35`` -> ``blocks.*.proj:addmm``;
    extensions count as the sources they repeat."""
    pieces = [(s.source or "<unattributed>", s.cycles) for s in path.steps]
    for part in path.extended:
        pieces.extend((source or "<unattributed>", c)
                      for (_, _, source), c in part.cycles.items())
    merged: dict[str, int] = {}
    for source, cycles in pieces:
        module, colon, node = source.rpartition(":")
        key = re.sub(r"(^|\.)\d+(?=\.|$)", r"\1*", module) + colon + re.sub(r"_\d+$", "", node)
        merged[key] = merged.get(key, 0) + cycles
    return merged


__all__ = [
    "CriticalPath", "EngineTime", "ExtendedPath", "PathStep", "critical_path",
    "critical_path_text", "engine_times", "idle_text",
]
