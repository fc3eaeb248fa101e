"""Which earlier commands wrote DRAM boxes overlapping a given box: the emitter's index
for DRAM dependencies (RAW, and WAW between overlapping stores).

The answer to a query is exactly ``{cid for box, cid in writes if overlap(box, query)}``
over every write recorded so far (a write is never forgotten: a later store does not
hide an earlier one from the dependency set). Two things keep that cheap for the
hundreds of thousands of tiles of a large model:

* Boxes are bucketed by where they *start* along the tensor's first non-unit dim, each
  in one bucket (no duplicates to skip); a query scans only the buckets from which a
  box could reach it. Boxes spanning more than :attr:`BoxIndex.REACH` buckets (a whole
  tensor written by the host) are kept aside and always checked.
* Kernels read the same tile many times (a matmul's A tile once per output panel) and
  writes are only ever added, so the answer to a box is remembered with how many
  writes it covered; asking again only checks the writes recorded since.
"""

from __future__ import annotations

from compiler.ir.operands import Slice

Box = tuple[Slice, ...]
Shape = tuple[int, ...]


def overlap(a: Box, b: Box) -> bool:
    """Do two boxes share an element (per dim, half-open ranges intersect)?"""
    for x, y in zip(a, b):
        if not (x.start < y.stop and y.start < x.stop):
            return False
    return True


class BoxIndex:
    """The boxes written into one DRAM tensor, each with the command that wrote it."""

    BUCKETS = 64
    """Buckets along the indexed dim."""
    REACH = 4
    """Buckets a box may span and still be bucketed (wider ones are kept aside)."""
    TAIL = 256
    """Writes since a remembered answer worth checking one by one; past that, the
    buckets answer faster."""

    def __init__(self, shape: Shape) -> None:
        self.dim = next((d for d, n in enumerate(shape) if n > 1), 0)
        size = shape[self.dim] if shape else 1
        self.width = max(1, -(-size // self.BUCKETS))
        self.writes: list[tuple[Box, int]] = []
        """Every write, in order (the remembered answers refer to its length)."""
        self.buckets: dict[int, list[tuple[Box, int]]] = {}
        self.wide: list[tuple[Box, int]] = []
        self.answers: dict[Box, tuple[frozenset[int], int]] = {}

    def _buckets(self, box: Box) -> tuple[int, int]:
        """First and last bucket of ``box`` along the indexed dim (an empty range counts
        as touching its start, as :func:`overlap` lets it meet a range around it)."""
        if not box:
            return 0, 0
        s = box[self.dim]
        return s.start // self.width, max(s.start, s.stop - 1) // self.width

    def add(self, box: Box, cid: int) -> None:
        entry = (box, cid)
        self.writes.append(entry)
        first, last = self._buckets(box)
        if last - first >= self.REACH:
            self.wide.append(entry)
        else:
            self.buckets.setdefault(first, []).append(entry)

    def overlapping(self, box: Box) -> frozenset[int]:
        """Commands that wrote a box overlapping ``box`` (do not mutate the result)."""
        count = len(self.writes)
        known = self.answers.get(box)
        if known is not None:
            found, covered = known
            if covered == count:
                return found
            if count - covered <= self.TAIL:
                new = [cid for written, cid in self.writes[covered:]
                       if overlap(written, box)]
                if new:
                    found = found.union(new)
                self.answers[box] = (found, count)
                return found
        found = frozenset(self._scan(box))
        self.answers[box] = (found, count)
        return found

    def _scan(self, box: Box) -> list[int]:
        """The answer from the buckets: a box starting in bucket ``b`` ends by bucket
        ``b + REACH - 1``, so only buckets from ``first - REACH + 1`` can reach ``box``."""
        first, last = self._buckets(box)
        found = [cid for written, cid in self.wide if overlap(written, box)]
        buckets = self.buckets
        for b in range(first - self.REACH + 1, last + 1):
            entries = buckets.get(b)
            if entries:
                found += [cid for written, cid in entries if overlap(written, box)]
        return found

    def all(self) -> set[int]:
        return {cid for _, cid in self.writes}


__all__ = ["BoxIndex", "overlap"]
