"""The emitter's record of who touched which SRAM bytes, with a fast path for the
common access: a buffer used again exactly as it was last written (the same tile slot,
the same accumulator), which ByteMap would answer with two no-op cuts and four binary
searches.
"""

from __future__ import annotations

from bisect import bisect_right

from compiler.byte_map import ByteMap, Record


class SramSpace(ByteMap):
    """A :class:`ByteMap` whose lookups of exactly one existing record skip the cuts
    (they would cut nothing): same records, same answers."""

    def _exact(self, start: int, end: int) -> int:
        """The index of the record spanning exactly ``[start, end)``, else -1 (also
        for empty ranges, and when an empty record shares the start: ByteMap's own
        paths treat those)."""
        starts = self._starts
        i = bisect_right(starts, start) - 1
        if i >= 0 and start < end:
            record = self._records[i]
            if (record.start == start and record.end == end
                    and (i == 0 or starts[i - 1] != start)):
                return i
        return -1

    def __len__(self) -> int:
        """Records held. A lookup that cuts a record adds one (nothing else but a write
        changes the records), so between writes, records a lookup returned are still
        the space's own, covering the same bytes, while this count is unchanged."""
        return len(self._records)

    def inside(self, start: int, end: int) -> list[Record]:
        i = self._exact(start, end)
        if i >= 0:
            return [self._records[i]]
        return super().inside(start, end)

    def write(self, start: int, end: int, command: int) -> None:
        i = self._exact(start, end)
        if i >= 0:
            self._records[i] = Record(start, end, command)
            return
        super().write(start, end, command)


__all__ = ["SramSpace"]
