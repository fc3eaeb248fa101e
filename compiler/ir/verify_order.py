"""The verifier's ordering checks (see :mod:`compiler.ir.verify`): the *wait-for
graph* of a program whose command ids are unique, its deadlocks, and happens-before
between two of its commands (used by the race replay, :mod:`compiler.ir.verify_races`).

A command waits for its deps and for the command ahead of it on its engine's in-order
queue. Deadlock is a cycle in that graph (Kahn's algorithm finds the commands that can
never run; its order is the one the race replay follows). Most happens-before
questions are answered by the queue or a direct dep, the rest by a short search
(vector clocks only when searches would cost more).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compiler.ir.ops import Command

__all__ = ["Describe", "HappensBefore", "WaitGraph", "format_region"]

Describe = Callable[[Command], str]
"""How the verifier names a command in a message: ``command 5 (core0.mxu0 matmul)``."""


def format_region(space: str, start: int, end: int) -> str:
    """``sram0[0x000010:0x000020]``."""
    return f"{space}[0x{start:06x}:0x{end:06x}]"


# ---------------------------------------------------------------- the wait-for graph


@dataclass(frozen=True, eq=False)
class WaitGraph:
    """Who waits for whom, by command position: deps plus the queue predecessor."""

    commands: Sequence[Command]
    engine_index: list[int]
    """Index of each command's engine among the engines the program uses."""
    queue_pos: list[int]
    """Position of each command in its engine's queue."""
    deps: list[tuple[int, ...]]
    """Positions of each command's known deps (self-deps and unknown ids dropped,
    each once, in the order written)."""
    queue_prev: list[int | None]
    """Position of the command ahead in the same queue."""
    waits: list[tuple[int, ...]]
    """Everything each command waits for: its deps, then its queue predecessor unless
    it is a dep already."""

    @classmethod
    def build(cls, commands: Sequence[Command]) -> "WaitGraph":
        """The graph of ``commands``, whose ids must be unique."""
        position = {cmd.id: p for p, cmd in enumerate(commands)}
        engines: dict[str, int] = {}
        engine_index = [engines.setdefault(cmd.engine, len(engines)) for cmd in commands]
        last: list[int | None] = [None] * len(engines)
        count = [0] * len(engines)
        queue_prev: list[int | None] = []
        queue_pos: list[int] = []
        for p, engine in enumerate(engine_index):
            queue_prev.append(last[engine])
            queue_pos.append(count[engine])
            last[engine] = p
            count[engine] += 1
        deps = [_known_deps(cmd, position) for cmd in commands]
        waits = [d if prev is None or prev in d else (*d, prev)
                 for d, prev in zip(deps, queue_prev)]
        return cls(commands, engine_index, queue_pos, deps, queue_prev, waits)

    @property
    def engine_count(self) -> int:
        return max(self.engine_index, default=-1) + 1

    def topological_order(self) -> tuple[list[int], list[list[int]]]:
        """Kahn's algorithm (first in, first out). Returns the order of every runnable
        command and, if some cannot run, the wait-for cycles among them (each once)."""
        n = len(self.commands)
        waiting = [len(w) for w in self.waits]
        unblocks: list[list[int]] = [[] for _ in range(n)]
        for p, waits in enumerate(self.waits):
            for q in waits:
                unblocks[q].append(p)
        order = [p for p in range(n) if not waiting[p]]
        for p in order:  # the list is the queue: commands are appended as they unblock
            for s in unblocks[p]:
                waiting[s] -= 1
                if not waiting[s]:
                    order.append(s)
        if len(order) == n:
            return order, []
        return order, self._cycles(stuck={p for p in range(n) if waiting[p] > 0})

    def _cycles(self, stuck: set[int]) -> list[list[int]]:
        """Cycles among commands that never became ready. Every stuck command waits for
        another stuck one, so walking wait-for edges inside ``stuck`` must loop."""
        walked: set[int] = set()
        cycles: list[list[int]] = []
        for start in sorted(stuck):
            path: dict[int, int] = {}
            p = start
            while p not in path and p not in walked:
                path[p] = len(path)
                p = next(q for q in self.waits[p] if q in stuck)
            walked.update(path)
            if p in path:
                cycle = list(path)[path[p]:]
                first = cycle.index(min(cycle))
                cycles.append(cycle[first:] + cycle[:first])
        return cycles

    def describe_cycle(self, cycle: list[int]) -> str:
        """``deadlock: command 3 (core0.dma0) waits on command 7 (core0.mxu0), which is
        queued on core0.mxu0 behind command 5, which waits on command 3``."""
        head = self.commands[cycle[0]]
        parts = [f"deadlock: command {head.id} ({head.engine})"]
        for here, there in zip(cycle, cycle[1:] + cycle[:1]):
            target = self.commands[there]
            if there in self.deps[here]:
                step = f"waits on command {target.id}"
                if there != cycle[0]:
                    step += f" ({target.engine})"
            else:
                step = f"is queued on {target.engine} behind command {target.id}"
            parts.append(step)
        return parts[0] + " " + ", which ".join(parts[1:])


def _known_deps(cmd: Command, position: dict[int, int]) -> tuple[int, ...]:
    """Positions of the deps of ``cmd`` that name another existing command, each once,
    in the order written."""
    deps = cmd.deps
    if not deps:
        return ()
    try:
        known = tuple(map(position.__getitem__, deps))  # the usual case: all exist
    except KeyError:
        known = tuple(position[d] for d in deps if d in position)
    if cmd.id in deps:
        own = position[cmd.id]
        known = tuple(p for p in known if p != own)
    if len(known) < 2 or len(set(known)) == len(known):
        return known
    return tuple(dict.fromkeys(known))


# ---------------------------------------------------------------- happens-before


Clock = tuple[int, ...]


class _Clocks:
    """Vector clocks: does command ``first`` finish before command ``then`` starts?

    ``seen[p][e]`` is the highest queue position on engine ``e`` known to have finished
    when command ``p`` finishes (-1: none), for every engine but ``p``'s own (that entry
    is not kept up to date: ``p``'s own queue position stands for it). So a command
    whose deps bring no news shares the clock of the command ahead of it, and a dep
    already implied by what is known (its engine is known to have reached it) costs
    one comparison.
    """

    def __init__(self, graph: WaitGraph, order: list[int]) -> None:
        self.engine_index = graph.engine_index
        self.queue_pos = graph.queue_pos
        self.seen: list[Clock] = [()] * len(order)
        nothing = (-1,) * max(graph.engine_count, 1)
        for p in order:
            prev = graph.queue_prev[p]
            self.seen[p] = self._merge_deps(p, nothing if prev is None else self.seen[prev],
                                            graph.deps[p])

    def _merge_deps(self, p: int, known: Clock, deps: tuple[int, ...]) -> Clock:
        """``known`` (the queue predecessor's clock) joined with the clocks of ``deps``.
        Deps are visited latest first, so earlier ones are more often implied."""
        engine_index, queue_pos, seen = self.engine_index, self.queue_pos, self.seen
        own = engine_index[p]
        for d in reversed(deps):
            engine = engine_index[d]
            if engine == own or known[engine] >= queue_pos[d]:
                continue  # d finished before something already known to have finished
            joined = [a if a > b else b for a, b in zip(known, seen[d])]
            joined[engine] = queue_pos[d]
            known = tuple(joined)
        return known

    def ordered(self, first: int, then: int) -> bool:
        """Does command ``first`` finish before command ``then`` starts?"""
        engine = self.engine_index[first]
        if engine == self.engine_index[then]:
            return self.queue_pos[first] < self.queue_pos[then]
        return self.seen[then][engine] >= self.queue_pos[first]


class HappensBefore:
    """Does command ``first`` finish before command ``then`` starts?

    Nearly always the queue (same engine) or a direct dep says so. Otherwise a search
    walks back from ``then`` over what it waits for, looking for a command on
    ``first``'s engine at or after ``first``; it skips commands on that engine before
    ``first`` and commands earlier than ``first`` in the topological order, as nothing
    they wait for can be ``first`` or after it. Searches share a step budget
    proportional to the program: a program needing more (deeply interleaved, or with
    many races) gets vector clocks for every command instead, which answer each
    question in one step.
    """

    search_steps = (4, 1000)
    """The searches' budget: so many steps per command, plus so many."""

    def __init__(self, graph: WaitGraph, order: list[int]) -> None:
        self.graph = graph
        self.engine_index, self.queue_pos, self.deps = (graph.engine_index, graph.queue_pos,
                                                        graph.deps)
        self.order = order
        self.rank = [0] * len(order)
        """Each command's place in ``order``."""
        for i, p in enumerate(order):
            self.rank[p] = i
        per_command, base = self.search_steps
        self.budget = per_command * len(order) + base
        self.clocks: _Clocks | None = None

    def ordered(self, first: int, then: int) -> bool:
        """Does command ``first`` finish before command ``then`` starts?"""
        engine_index = self.engine_index
        if engine_index[first] == engine_index[then]:
            return self.queue_pos[first] < self.queue_pos[then]
        if first in self.deps[then]:
            return True
        if self.clocks is None and self.budget <= 0:
            self.clocks = _Clocks(self.graph, self.order)
        if self.clocks is not None:
            return self.clocks.ordered(first, then)
        return self._search(first, then)

    def _search(self, first: int, then: int) -> bool:
        """Is some command on ``first``'s engine, at or after it, among the commands
        ``then`` waits for, directly or not?"""
        engine_index, queue_pos, waits = (self.graph.engine_index, self.graph.queue_pos,
                                          self.graph.waits)
        engine, pos, rank = engine_index[first], queue_pos[first], self.rank[first]
        todo, seen = [then], {then}
        while todo:
            self.budget -= 1
            for w in waits[todo.pop()]:
                if engine_index[w] == engine:
                    if queue_pos[w] >= pos:
                        return True
                elif w not in seen and self.rank[w] > rank:
                    seen.add(w)
                    todo.append(w)
        return False
