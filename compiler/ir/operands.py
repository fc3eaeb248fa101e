"""Typed operand references of the scheduled IR: DRAM slices and SRAM regions.

They carry enough to compute bytes moved and to execute a command on data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from archsim.config.names import space_core, sram_space  # noqa: F401 (re-exported)
from compiler.ir.dtypes import DType

Shape = tuple[int, ...]


def numel(shape: Shape) -> int:
    return math.prod(shape)


@dataclass(frozen=True, slots=True)
class DramTensor:
    """A named tensor in device DRAM. ``role`` says who provides/reads it:
    ``in`` (given by the caller), ``out`` (read back), ``inout``, or ``temp``."""

    name: str
    shape: Shape
    dtype: DType
    role: str = "temp"

    @property
    def nbytes(self) -> int:
        return numel(self.shape) * self.dtype.itemsize


ROLES: tuple[str, ...] = ("in", "out", "inout", "temp")


@dataclass(frozen=True, slots=True)
class Slice:
    """``start:stop:step`` along one dimension (step > 0)."""

    start: int
    stop: int
    step: int = 1

    @property
    def length(self) -> int:
        span = self.stop - self.start
        if span <= 0 or self.step <= 0:  # the verifier reports a bad step
            return 0
        return (span + self.step - 1) // self.step


@dataclass(frozen=True, slots=True)
class DramRef:
    """A strided box of a DRAM tensor: one :class:`Slice` per dimension."""

    tensor: str
    slices: tuple[Slice, ...]

    @property
    def shape(self) -> Shape:
        return tuple(s.length for s in self.slices)


EXACT_RUNS = 64
"""A strided scratchpad ref of at most this many contiguous runs is tracked run by run
(:meth:`SramRef.intervals`): DMA commands filling interleaved parts of one buffer (a
packed weight tile's blocks) then do not wait for each other and may go to several
engines. A wider one is tracked by its span (the emitter's and the verifier's work
grows with the runs they record)."""


@dataclass(frozen=True, slots=True)
class SramRef:
    """A region of an SRAM space: dense and row-major, or with ``strides`` (in elements,
    one per dim) a strided view — how DMA engines address a box inside a bigger buffer
    and the arrays read an operand that skips rows.

    ``space`` is ``sram<N>`` for core N's scratchpad or ``shared`` for the shared SRAM;
    ``offset`` is in bytes.
    """

    space: str
    offset: int
    shape: Shape
    dtype: DType
    strides: Shape | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of data (what an op moves)."""
        return numel(self.shape) * self.dtype.itemsize

    @property
    def span_bytes(self) -> int:
        """Bytes from the first element to the end of the last (the footprint)."""
        if self.strides is None or numel(self.shape) == 0:
            return self.nbytes
        last = sum((n - 1) * s for n, s in zip(self.shape, self.strides))
        return (last + 1) * self.dtype.itemsize

    @property
    def end(self) -> int:
        return self.offset + self.span_bytes

    def runs(self) -> list[tuple[int, int]] | None:
        """The byte intervals ``[start, end)`` a strided ref covers, in order, adjacent
        ones merged, when its last dim is contiguous and they are at most
        :data:`EXACT_RUNS`; None otherwise (a dense ref too: :meth:`intervals` gives its
        one interval)."""
        if self.strides is None or not self.shape or len(self.strides) != len(self.shape) \
                or numel(self.shape) == 0 or (self.shape[-1] > 1 and self.strides[-1] != 1):
            return None  # (a malformed ref too: the verifier names it, by its span)
        lead = self.shape[:-1]
        if numel(lead) > EXACT_RUNS:
            return None
        item = self.dtype.itemsize
        width = self.shape[-1] * item
        starts = [self.offset]
        for n, stride in zip(lead, self.strides):
            starts = [s + i * stride * item for s in starts for i in range(n)]
        out: list[tuple[int, int]] = []
        for start in sorted(starts):
            if out and out[-1][1] >= start:
                out[-1] = (out[-1][0], max(out[-1][1], start + width))
            else:
                out.append((start, start + width))
        return out

    def intervals(self) -> list[tuple[int, int]]:
        """The byte intervals the ref touches as the emitter and the verifier track them:
        exact when dense or :meth:`runs` gives them, else the span (first byte to end)."""
        if self.strides is None:
            return [(self.offset, self.offset + self.nbytes)]
        return self.runs() or [(self.offset, self.end)]

    @property
    def exact(self) -> bool:
        """Whether :meth:`intervals` are the ref's bytes exactly, so commands filling
        interleaved parts of one buffer need not wait for each other."""
        return self.strides is None or self.runs() is not None

    @property
    def core(self) -> int | None:
        """The core owning this scratchpad; None for shared SRAM (or a malformed
        space name, which the verifier reports)."""
        return space_core(self.space)


@dataclass(frozen=True, slots=True)
class Scalar:
    """A constant operand of a vector binary op."""

    value: float
