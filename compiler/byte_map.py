"""Who touched which SRAM bytes: the emitter's record for deriving dependencies.

Per SRAM space, a :class:`ByteMap` holds disjoint byte intervals sorted by start, each
with the command that last wrote it and, per engine, the latest command that read it
since (an engine's reads finish in order, so the latest stands for the others). A
query cuts the intervals that straddle its ends, so what it returns lies inside the
queried bytes: neighbouring buffers never depend on each other. Lookups are a binary
search plus the intervals inside.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field


@dataclass
class Record:
    start: int
    end: int
    writer: int | None
    readers: dict[str, int] = field(default_factory=dict)
    """Latest reader per engine since the write."""


class ByteMap:
    def __init__(self) -> None:
        self._starts: list[int] = []
        self._records: list[Record] = []

    def _cut(self, position: int) -> None:
        i = bisect_right(self._starts, position) - 1
        if i < 0:
            return
        record = self._records[i]
        if record.start < position < record.end:
            right = Record(position, record.end, record.writer, dict(record.readers))
            record.end = position
            self._starts.insert(i + 1, position)
            self._records.insert(i + 1, right)

    def _bounds(self, start: int, end: int) -> tuple[int, int]:
        self._cut(start)
        self._cut(end)
        return bisect_left(self._starts, start), bisect_left(self._starts, end)

    def inside(self, start: int, end: int) -> list[Record]:
        """The records of bytes in ``[start, end)`` (cut at its ends)."""
        i, j = self._bounds(start, end)
        return self._records[i:j]

    def write(self, start: int, end: int, command: int) -> None:
        """``command`` wrote ``[start, end)``: one record replaces what was there."""
        i, j = self._bounds(start, end)
        self._starts[i:j] = [start]
        self._records[i:j] = [Record(start, end, command)]


__all__ = ["ByteMap", "Record"]
