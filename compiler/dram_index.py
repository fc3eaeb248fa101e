"""Which earlier commands wrote DRAM boxes overlapping a given box: the emitter's index
for DRAM dependencies (RAW, and WAW between overlapping stores).

The answer to a query is exactly ``{cid for box, cid in writes if overlap(box, query)}``
over every write recorded so far (a write is never forgotten: a later store does not
hide an earlier one from the dependency set). Two things keep that cheap for the
hundreds of thousands of tiles of a large model:

* Boxes are filed in a grid over the tensor's first two non-unit dims under the cell
  where they *start*, each once (no duplicates to skip); a query looks only at the
  cells from which a box could reach it. Along a dim where a box spans more than
  :attr:`BoxIndex.WIDE` cells (a whole tensor written by the host) it is filed under
  "any cell", which every query looks at.
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

    CELLS = 32
    """Grid cells along each indexed dim."""
    WIDE = 4
    """Cells past its first a box may reach along a dim and still be filed under its
    start cell there (wider ones are filed under :data:`_ANY` along that dim)."""
    TAIL = 256
    """Writes since a remembered answer worth checking one by one; past that, the grid
    answers faster."""

    def __init__(self, shape: Shape) -> None:
        # the first two non-unit dims: rows and columns of a matrix, heads and rows of
        # attention's (batch, heads, rows, dim) tensors
        dims = [d for d, n in enumerate(shape) if n > 1][:2]
        self.dims = tuple(dims)
        self.widths = tuple(max(1, -(-shape[d] // self.CELLS)) for d in dims)
        self.reach = [0] * len(dims)
        """Per indexed dim, the most cells past its start a box filed there reaches."""
        self.writes: list[tuple[Box, int]] = []
        """Every write, in order (the remembered answers refer to its length)."""
        self.cells: dict[tuple[int, ...], list[tuple[Box, int]]] = {}
        self.answers: dict[Box, tuple[frozenset[int], int]] = {}

    def _cells(self, box: Box) -> list[tuple[int, int]]:
        """Per indexed dim, the first and last cell of ``box`` (an empty range counts
        as touching its start, as :func:`overlap` lets it meet a range around it)."""
        out = []
        for d, width in zip(self.dims, self.widths):
            s = box[d]
            out.append((s.start // width, max(s.start, s.stop - 1) // width))
        return out

    def add(self, box: Box, cid: int) -> None:
        entry = (box, cid)
        self.writes.append(entry)
        key = []
        for i, (first, last) in enumerate(self._cells(box)):
            if last - first > self.WIDE:
                key.append(_ANY)
            else:
                key.append(first)
                if last - first > self.reach[i]:
                    self.reach[i] = last - first
        self.cells.setdefault(tuple(key), []).append(entry)

    def overlapping(self, box: Box) -> frozenset[int]:
        """Commands that wrote a box overlapping ``box``."""
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
        """The answer from the grid. Along each indexed dim a box filed under cell
        ``c`` ends by cell ``c + reach``, so only cells from ``first - reach`` to
        ``last`` (and :data:`_ANY`) can hold a box overlapping ``box``."""
        ranges = [(first - reach, last) for (first, last), reach
                  in zip(self._cells(box), self.reach)]
        cells = self.cells
        if _product(ranges) < len(cells):
            keys: list[tuple[int, ...]] = [()]
            for lo, hi in ranges:
                keys = [(*k, c) for k in keys for c in (_ANY, *range(lo, hi + 1))]
        else:  # fewer cells are filled than the query's ranges name: filter them
            keys = [k for k in cells
                    if all(c == _ANY or lo <= c <= hi for c, (lo, hi) in zip(k, ranges))]
        found: list[int] = []
        for key in keys:
            entries = cells.get(key)
            if entries:
                found += [cid for written, cid in entries if overlap(written, box)]
        return found

    def all(self) -> set[int]:
        return {cid for _, cid in self.writes}


_ANY = -1 << 62
"""The cell of a box too wide to file under its start along a dim (a whole tensor
written by the host)."""


def _product(ranges: list[tuple[int, int]]) -> int:
    n = 1
    for lo, hi in ranges:
        n *= hi - lo + 2  # the range and _ANY
    return n


__all__ = ["BoxIndex", "overlap"]
