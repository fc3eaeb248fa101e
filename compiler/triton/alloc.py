"""Scratchpad space for a kernel's tiles: next-fit over each core's scratchpad.

A tile's space is freed after its last use. Allocation resumes where the previous one
ended and wraps around, so a freed tile is reused as late as possible: the next
program's loads land in fresh space and overlap the current program's compute, the
double buffering a hand-written kernel gets from ``num_stages``. Reuse is still safe
early: the emitter orders every write after the reads of the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.errors import CapacityError

ALIGN = 64


@dataclass
class Block:
    offset: int
    size: int
    refs: int = 0


class NextFit:
    """Free space of one scratchpad as sorted ``[start, end)`` holes."""

    def __init__(self, capacity: int, what: str) -> None:
        self.capacity = capacity
        self.what = what
        self.holes: list[list[int]] = [[0, capacity]]
        self.cursor = 0
        self.in_use = 0
        self.peak = 0

    def alloc(self, nbytes: int) -> Block:
        size = -(-max(1, nbytes) // ALIGN) * ALIGN
        order = sorted(range(len(self.holes)), key=lambda i: (self.holes[i][1] <= self.cursor,
                                                              self.holes[i][0]))
        for i in order:
            start, end = self.holes[i]
            begin = max(start, self.cursor) if start < self.cursor < end else start
            if end - begin < size:
                begin = start
            if end - begin >= size:
                self._take(i, begin, begin + size)
                self.cursor = begin + size
                self.in_use += size
                self.peak = max(self.peak, self.in_use)
                return Block(begin, size)
        raise CapacityError(f"{self.what}: {size} B more do not fit the {self.capacity} B "
                            f"scratchpad ({self.in_use} B in use by live tiles); use "
                            f"smaller blocks")

    def free(self, block: Block) -> None:
        self.in_use -= block.size
        self.holes.append([block.offset, block.offset + block.size])
        self.holes.sort()
        merged: list[list[int]] = []
        for hole in self.holes:
            if merged and merged[-1][1] == hole[0]:
                merged[-1][1] = hole[1]
            else:
                merged.append(hole)
        self.holes = merged

    def _take(self, i: int, begin: int, end: int) -> None:
        start, stop = self.holes.pop(i)
        if end < stop:
            self.holes.insert(i, [end, stop])
        if start < begin:
            self.holes.insert(i, [start, begin])
