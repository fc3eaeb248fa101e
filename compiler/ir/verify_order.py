"""The verifier's ordering checks: deadlock and SRAM races (see :mod:`compiler.ir.verify`).

Both work on the *wait-for graph* of a program whose command ids are unique: a command
waits for its deps and for the command ahead of it on its engine's in-order queue.

Deadlock is a cycle in that graph (Kahn's algorithm finds the commands that can never
run). Races are found by replaying SRAM accesses in the topological order Kahn's
algorithm gives, keeping per SRAM space, for each byte interval, the last writer and
the latest reader per engine; each earlier access a new one conflicts with must
happen before it.

The work is about linear in commands, dependencies and touched intervals: most
happens-before questions are answered by the queue or a direct dep, the rest by a
short search (vector clocks only when searches would cost more), and the common access
of a region exactly as it was last touched updates one interval in place.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compiler.ir.access import SRAM_READ_FIELDS, SRAM_WRITE_FIELDS
from compiler.ir.operands import SramRef
from compiler.ir.ops import Command, MatMul, Op

__all__ = ["WaitGraph", "race_problems"]

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


class _HappensBefore:
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


# ---------------------------------------------------------------- SRAM histories


Access = tuple[int, str]
"""A command position and the op field through which it touches SRAM."""

History = tuple[Access | None, tuple[Access, ...]]
"""Of a byte interval: the last writer, and the latest reader per engine since then."""

_UNTOUCHED: History = (None, ())


class _SpaceHistory:
    """Disjoint, sorted byte intervals of one SRAM space with their :data:`History`.

    Bytes never touched have no interval. Which intervals a run of equal histories is
    cut into does not matter: only each byte's history does.
    """

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.histories: list[History] = []

    def write(self, start: int, end: int, history: History) -> Sequence[History]:
        """Give ``[start, end)`` the history ``history``; returns the old histories of
        the touched intervals in address order (untouched gaps left out)."""
        starts, ends, histories = self.starts, self.ends, self.histories
        lo = bisect.bisect_right(ends, start)
        if lo < len(starts) and starts[lo] == start and ends[lo] == end:
            old = histories[lo]  # exactly the last interval touched here
            histories[lo] = history
            return (old,)
        hi = bisect.bisect_left(starts, end, lo)
        old = histories[lo:hi]
        pieces = [(start, end, history)]
        if lo < hi and starts[lo] < start:
            pieces.insert(0, (starts[lo], start, histories[lo]))
        if lo < hi and ends[hi - 1] > end:
            pieces.append((end, ends[hi - 1], histories[hi - 1]))
        self._replace(lo, hi, pieces)
        return old

    def read(self, start: int, end: int, reader: Access, engine_of: list[int]
             ) -> Sequence[History]:
        """``reader`` becomes the latest reader of ``[start, end)`` for its engine;
        returns the old histories there in address order (untouched gaps included).
        ``engine_of`` gives the engine index of each command position."""
        starts, ends, histories = self.starts, self.ends, self.histories
        lo = bisect.bisect_right(ends, start)
        if lo < len(starts) and starts[lo] == start:
            if ends[lo] == end:
                old = histories[lo]  # exactly the last interval touched here
                histories[lo] = _with_reader(old, reader, engine_of)
                return (old,)
            hi = bisect.bisect_left(starts, end, lo)
            if ends[hi - 1] == end and ends[lo:hi - 1] == starts[lo + 1:hi]:
                # adjacent intervals covering exactly [start, end) (a buffer written in
                # pieces): what update() does, without cutting or gaps
                olds = histories[lo:hi]
                histories[lo:hi] = [_with_reader(h, reader, engine_of) for h in olds]
                return olds
        return self.update(start, end, lambda h: _with_reader(h, reader, engine_of))

    def update(self, start: int, end: int, change: Callable[[History], History]
               ) -> list[History]:
        """Replace the history ``h`` of every byte in ``[start, end)`` by ``change(h)``;
        returns the old histories there in address order (untouched gaps included)."""
        starts, ends, histories = self.starts, self.ends, self.histories
        lo = bisect.bisect_right(ends, start)
        hi = bisect.bisect_left(starts, end, lo)
        old: list[History] = []
        pieces: list[tuple[int, int, History]] = []
        if lo < hi and starts[lo] < start:
            pieces.append((starts[lo], start, histories[lo]))
        cursor = start
        for k in range(lo, hi):
            s, e, h = max(starts[k], start), min(ends[k], end), histories[k]
            if cursor < s:
                old.append(_UNTOUCHED)
                pieces.append((cursor, s, change(_UNTOUCHED)))
            old.append(h)
            pieces.append((s, e, change(h)))
            cursor = e
        if cursor < end:
            old.append(_UNTOUCHED)
            pieces.append((cursor, end, change(_UNTOUCHED)))
        if lo < hi and ends[hi - 1] > end:
            pieces.append((end, ends[hi - 1], histories[hi - 1]))
        self._replace(lo, hi, pieces)
        return old

    def _replace(self, lo: int, hi: int, pieces: list[tuple[int, int, History]]) -> None:
        """Intervals ``lo:hi`` become ``pieces``."""
        self.starts[lo:hi] = [p[0] for p in pieces]
        self.ends[lo:hi] = [p[1] for p in pieces]
        self.histories[lo:hi] = [p[2] for p in pieces]


def _with_reader(history: History, reader: Access, engine_of: list[int]) -> History:
    """``history`` with ``reader`` as the latest reader of its engine."""
    writer, readers = history
    if readers:
        engine = engine_of[reader[0]]
        if len(readers) == 1:
            if engine_of[readers[0][0]] == engine:
                readers = ()
        else:
            readers = tuple(r for r in readers if engine_of[r[0]] != engine)
    return (writer, (*readers, reader))


# ---------------------------------------------------------------- the replay


class _RaceFinder:
    """Replays SRAM accesses in a topological order and reports unordered conflicts."""

    def __init__(self, commands: Sequence[Command], graph: WaitGraph,
                 clocks: _HappensBefore, describe: Describe) -> None:
        self.commands = commands
        self.engine_index = graph.engine_index
        self.ordered = clocks.ordered
        self.describe = describe
        self.spaces: defaultdict[str, _SpaceHistory] = defaultdict(_SpaceHistory)
        self.reported: set[tuple[int, int]] = set()
        self.problems: list[str] = []

    def visit(self, p: int, op: Op) -> None:
        """Replay the reads, then the writes, of command ``p`` running ``op`` (the
        fields of :func:`~compiler.ir.access.sram_reads` and ``sram_writes``)."""
        op_type = type(op)
        for field in SRAM_READ_FIELDS[op_type]:
            ref = getattr(op, field)
            if isinstance(ref, SramRef):  # not a Scalar
                self._read(p, field, ref)
        if op_type is MatMul and op.accumulate:  # it adds to what ``out`` holds
            self._read(p, "out", op.out)
        for field in SRAM_WRITE_FIELDS[op_type]:
            self._write(p, field, getattr(op, field))

    def _read(self, p: int, field: str, ref: SramRef) -> None:
        nbytes = _span_bytes(ref)
        if nbytes <= 0:
            return
        me: Access = (p, field)
        old = self.spaces[ref.space].read(ref.offset, ref.offset + nbytes, me,
                                          self.engine_index)
        ordered = self.ordered
        for writer, _ in (old if len(old) == 1 else dict.fromkeys(old)):
            if writer is not None and writer[0] != p and not ordered(writer[0], p):
                self._report(writer, "writes", me, ref, False)

    def _write(self, p: int, field: str, ref: SramRef) -> None:
        nbytes = _span_bytes(ref)
        if nbytes <= 0:
            return
        me: Access = (p, field)
        old = self.spaces[ref.space].write(ref.offset, ref.offset + nbytes, (me, ()))
        ordered = self.ordered
        for writer, readers in (old if len(old) == 1 else dict.fromkeys(old)):
            if writer is not None and writer[0] != p and not ordered(writer[0], p):
                self._report(writer, "writes", me, ref, True)
            for reader in readers:
                if reader[0] != p and not ordered(reader[0], p):
                    self._report(reader, "reads", me, ref, True)

    def _report(self, earlier: Access, how: str, me: Access, ref: SramRef,
                write: bool) -> None:
        """A race between ``earlier`` and ``me`` (unordered), unless reported already
        for the same two commands."""
        first, then = earlier[0], me[0]
        if (first, then) in self.reported:
            return
        self.reported.add((first, then))
        other_cmd = self.commands[first]
        other_ref: SramRef = getattr(other_cmd.op, earlier[1])
        start, end = max(ref.offset, other_ref.offset), min(ref.end, other_ref.end)
        verb = "writes" if write else "reads"
        self.problems.append(
            f"{self.describe(self.commands[then])}: field {me[1]}: {verb} "
            f"{format_region(ref.space, start, end)}, which {self.describe(other_cmd)} "
            f"{how} (field {earlier[1]}), but neither command waits for the other "
            f"(add a dependency)")


def _span_bytes(ref: SramRef) -> int:
    """``ref.span_bytes``, computed directly for a dense ref (most of them)."""
    if ref.strides is None:
        return math.prod(ref.shape) * ref.dtype.itemsize
    return ref.span_bytes


def race_problems(commands: Sequence[Command], graph: WaitGraph, order: list[int],
                  describe: Describe) -> list[str]:
    """Every unordered pair of commands touching common SRAM bytes, one writing, found
    by replaying the commands in ``order`` (a topological order of ``graph``)."""
    finder = _RaceFinder(commands, graph, _HappensBefore(graph, order), describe)
    for p in order:
        op = commands[p].op
        if type(op) in SRAM_READ_FIELDS:  # else an unknown op class, reported already
            finder.visit(p, op)
    return finder.problems
