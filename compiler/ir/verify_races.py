"""The verifier's SRAM race check (see :mod:`compiler.ir.verify`).

Two commands touching overlapping SRAM bytes, at least one writing, must be ordered by
happens-before (:mod:`compiler.ir.verify_order`). Races are found by replaying SRAM
accesses in a topological order of the wait-for graph, keeping per SRAM space, for each
byte interval, the last writer and the latest reader per engine; each earlier access a
new one conflicts with must happen before it.

The work is about linear in commands and touched intervals: the common access of a
region exactly as it was last touched (or exactly the run of pieces it was written in)
updates those intervals in place.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Callable, Sequence

from compiler.ir.access import SRAM_READ_FIELDS, SRAM_WRITE_FIELDS
from compiler.ir.operands import SramRef
from compiler.ir.ops import MATMUL_OPS, Command, Op
from compiler.ir.verify_order import Describe, HappensBefore, WaitGraph, format_region

__all__ = ["race_problems"]


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
                 clocks: HappensBefore, describe: Describe) -> None:
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
        if op_type in MATMUL_OPS and op.accumulate:  # it adds to what ``out`` holds
            self._read(p, "out", op.out)
        for field in SRAM_WRITE_FIELDS[op_type]:
            self._write(p, field, getattr(op, field))

    def _read(self, p: int, field: str, ref: SramRef) -> None:
        me: Access = (p, field)
        ordered = self.ordered
        for start, end in _intervals(ref):
            old = self.spaces[ref.space].read(start, end, me, self.engine_index)
            for writer, _ in (old if len(old) == 1 else dict.fromkeys(old)):
                if writer is not None and writer[0] != p and not ordered(writer[0], p):
                    self._report(writer, "writes", me, ref, False)

    def _write(self, p: int, field: str, ref: SramRef) -> None:
        me: Access = (p, field)
        ordered = self.ordered
        for start, end in _intervals(ref):
            old = self.spaces[ref.space].write(start, end, (me, ()))
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


def _intervals(ref: SramRef) -> list[tuple[int, int]]:
    """The byte intervals ``ref`` touches (:meth:`SramRef.intervals`: the emitter's own),
    a dense ref's computed directly (most of them); none when it is empty."""
    if ref.strides is None:
        nbytes = math.prod(ref.shape) * ref.dtype.itemsize
        return [(ref.offset, ref.offset + nbytes)] if nbytes > 0 else []
    return [(start, end) for start, end in ref.intervals() if start < end]


def race_problems(commands: Sequence[Command], graph: WaitGraph, order: list[int],
                  describe: Describe) -> list[str]:
    """Every unordered pair of commands touching common SRAM bytes, one writing, found
    by replaying the commands in ``order`` (a topological order of ``graph``)."""
    finder = _RaceFinder(commands, graph, HappensBefore(graph, order), describe)
    for p in order:
        op = commands[p].op
        if type(op) in SRAM_READ_FIELDS:  # else an unknown op class, reported already
            finder.visit(p, op)
    return finder.problems
