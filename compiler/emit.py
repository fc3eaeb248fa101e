"""Emitting commands: dependencies derived from memory accesses, DRAM access through
views, SRAM arenas.

Every command goes through :meth:`Emitter.emit`, which reads the op's SRAM and DRAM
operands (:mod:`compiler.ir.access`) and adds a dependency on every earlier command
that touched overlapping bytes with a conflicting access (RAW, WAR, WAW). Kernels thus
only decide *what* runs *where*; ordering is derived, so reuse of a buffer can never
race. Dependencies on the same engine are dropped (queue order implies them).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from archsim.config.model import NpuConfig
from archsim.config.names import dma_engine
from archsim.errors import CapacityError, ConfigError, ProgramTooLargeError
from compiler.dram_index import BoxIndex
from compiler.sram_index import SramSpace
from compiler.ir import access
from compiler.ir.builder import ProgramBuilder
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, Slice, SramRef
from compiler.ir.ops import MATMUL_OPS, HostOp, HostTransfer, Op, Program
from compiler.views import Box, dense_parts, place_box

Shape = tuple[int, ...]
ALIGN_BYTES = 64


@dataclass(frozen=True)
class DramView:
    """A value's window onto a DRAM tensor: the value's shape over the tensor's storage."""

    tensor: str
    base_shape: Shape
    shape: Shape
    dtype: DType


class Arena:
    """Bump allocator over one SRAM space for the duration of a kernel."""

    def __init__(self, space: str, capacity: int) -> None:
        self.space = space
        self.capacity = capacity
        self.top = 0

    def alloc(self, shape: Shape, dtype: DType, what: str) -> SramRef:
        nbytes = max(1, _numel(shape)) * dtype.itemsize
        offset = -(-self.top // ALIGN_BYTES) * ALIGN_BYTES
        if offset + nbytes > self.capacity:
            raise CapacityError(f"{what}: {nbytes} B at offset {offset} exceeds {self.space} "
                                f"capacity {self.capacity} B")
        self.top = offset + nbytes
        return SramRef(self.space, offset, tuple(shape), dtype)


def _ref(tensor: str, box: Box) -> DramRef:
    return DramRef(tensor, tuple(Slice(lo, hi) for lo, hi in box))


def _numel(shape: Shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


MAX_COMMANDS_ENV = "ARCHSIM_MAX_COMMANDS"
DEFAULT_MAX_COMMANDS = 2_000_000
"""Commands one program may hold (about 1 KB of host memory each while compiling)."""


def max_commands() -> int:
    """The command cap: ``ARCHSIM_MAX_COMMANDS`` if set, else 2,000,000."""
    text = os.environ.get(MAX_COMMANDS_ENV)
    if text is None:
        return DEFAULT_MAX_COMMANDS
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError([f"{MAX_COMMANDS_ENV}={text!r}: expected a positive integer"],
                          source="environment")
    return value


@dataclass(frozen=True)
class _OpFields:
    """Where the emitter finds an op class's memory operands (from the tables of
    :mod:`compiler.ir.access`, looked up once per class rather than per command)."""

    reads: tuple[str, ...]
    """Fields whose SRAM region the op reads (a Scalar there is skipped)."""
    writes: tuple[str, ...]
    """Fields whose SRAM region the op writes."""
    accumulates: bool
    """A matmul (``MATMUL_OPS``): it also reads ``out`` when ``accumulate`` is set."""
    dram: tuple[tuple[str, bool], ...]
    """Fields holding a DRAM box, with whether the op writes it."""


_FIELDS: dict[type[Op], _OpFields] = {
    op_type: _OpFields(access.SRAM_READ_FIELDS[op_type], access.SRAM_WRITE_FIELDS[op_type],
                       op_type in MATMUL_OPS, access.DRAM_REF_FIELDS.get(op_type, ()))
    for op_type in access.SRAM_READ_FIELDS}


class Emitter:
    def __init__(self, name: str, config: NpuConfig) -> None:
        self.config = config
        self.builder = ProgramBuilder(name, target=config.name)
        self._engine_of: list[str] = []
        self._sram: dict[str, SramSpace] = {}
        self._dram_writes: dict[str, BoxIndex] = {}
        self._dram_reads: dict[str, list[int]] = {}
        self._rr: dict[str, int] = {}
        self._dma_rr: dict[tuple[int, str], int] = {}
        """The DMA round robins: the next turn per core and kind of transfer."""
        self._dma_names: dict[int, list[str]] = {}
        """Each core's DMA engine names, made once."""
        self._max_commands = max_commands()
        self._last_on: dict[str, int] = {}
        """Each engine's last command so far."""
        self._barrier: tuple[int, ...] = ()
        self._past_barrier: set[str] = set()
        """Engines with a command since the last :meth:`barrier`."""

    def barrier(self) -> None:
        """Every command emitted from now on starts after every command emitted so far
        ended: the first on each engine waits for each engine's last, its own engine's
        too (a DMA engine starts a transfer while the one before is in flight), and
        each queue orders the rest after it. What a runtime that starts each kernel
        after the previous one ended puts between two (``runtime.kernel_order:
        serial``)."""
        self._barrier = tuple(sorted(self._last_on.values()))
        self._past_barrier = set()

    # -- tensors -------------------------------------------------------------------
    def tensor(self, name: str, shape: Shape, dtype: DType, role: str) -> None:
        self.builder.tensor(name, shape, dtype, role)

    def set_role(self, name: str, role: str) -> None:
        t = self.builder._tensors[name]
        self.builder.tensor(name, t.shape, t.dtype, role)

    # -- engines -------------------------------------------------------------------
    def dma(self, core: int, kind: str = "any") -> str:
        """Round-robin over a core's DMA engines. With ``kind="load"``/``"store"`` and
        two or more engines, the last engine is kept for stores."""
        names = self._dma_names.get(core)
        if names is None:
            names = self._dma_names[core] = [
                dma_engine(core, i) for i in range(self.config.core.dma.engines)]
        engines = len(names)
        if kind == "store" and engines > 1:
            return names[-1]
        count = engines - 1 if kind == "load" and engines > 1 else engines
        key = (core, kind)
        i = self._dma_rr.get(key, 0)
        self._dma_rr[key] = i + 1
        return names[i % count]

    def next_rr(self, key: str, count: int) -> int:
        """The next of ``count`` engines in a round robin named ``key``."""
        i = self._rr.get(key, 0)
        self._rr[key] = i + 1
        return i % count

    # -- commands ------------------------------------------------------------------
    @property
    def count(self) -> int:
        """Commands emitted so far (the next command's id)."""
        return len(self._engine_of)

    def idle(self, engine: str) -> bool:
        """No command of the program so far runs on ``engine`` (its queue starts empty)."""
        return engine not in self._engine_of

    def reserve(self, count: int, source: str) -> None:
        """Refuse now, before a kernel builds its plan, if ``count`` more commands would
        pass the cap (a 100000^3 GEMM would otherwise fill the host's memory first)."""
        if len(self._engine_of) + count > self._max_commands:
            raise ProgramTooLargeError(
                f"program {self.builder.name!r} needs more than {self._max_commands:,} "
                f"commands (at {source}: {count:,} more); its host memory would grow "
                f"without bound. Use smaller shapes, or raise the cap with "
                f"{MAX_COMMANDS_ENV}")

    def emit(self, engine: str, op: Op, source: str) -> int:
        cid = len(self._engine_of)
        if cid >= self._max_commands:
            self.reserve(1, source)
        fields = _FIELDS.get(type(op))
        if fields is None:
            access.reads(op)  # raises the TypeError naming the op class
        deps: set[int] = set()
        reads = self._regions(op, fields.reads, fields.accumulates)
        writes = self._regions(op, fields.writes, False)
        looked_up = []
        for space, start, end in reads:
            records = space.inside(start, end)
            looked_up.append((records, len(space)))
            for rec in records:
                if rec.writer is not None:
                    deps.add(rec.writer)
        for space, start, end in writes:
            for rec in space.inside(start, end):
                if rec.writer is not None:
                    deps.add(rec.writer)
                deps.update(rec.readers.values())
        boxes = tuple((name, getattr(op, name), is_write) for name, is_write in fields.dram)
        self._dram_deps(op, boxes, deps)
        own = -1  # this engine's last command, kept as a dependency after a barrier
        if self._barrier and engine not in self._past_barrier:
            self._past_barrier.add(engine)
            deps.update(self._barrier)
            own = self._last_on.get(engine, -1)
        self._last_on[engine] = cid
        deps.discard(cid)
        engine_of = self._engine_of
        ordered = tuple(sorted([d for d in deps if engine_of[d] != engine or d == own]))
        self.builder.add(engine, op, ordered, source)
        engine_of.append(engine)
        # looked up again if a later lookup cut records of the space (the records a
        # read got may have been cut since; a cut adds a record, nothing removes one)
        for (space, start, end), (records, size) in zip(reads, looked_up):
            if len(space) != size:
                records = space.inside(start, end)
            for rec in records:
                rec.readers[engine] = cid
        for space, start, end in writes:
            space.write(start, end, cid)
        self._record_dram(op, boxes, cid)
        return cid

    def _regions(self, op: Op, names: tuple[str, ...], accumulates: bool
                 ) -> list[tuple[SramSpace, int, int]]:
        """The record of the space of each SRAM operand in ``names`` (Scalars skipped;
        with ``accumulates``, a matmul's ``out`` when it accumulates) with its bytes
        (exact byte intervals, no false dependencies between neighbouring buffers):
        what :func:`access.reads` or :func:`access.writes` give, computed once per
        command."""
        out = []
        sram = self._sram
        for name in names:
            ref = getattr(op, name)
            if not isinstance(ref, SramRef):
                continue  # a Scalar
            space = sram.get(ref.space)
            if space is None:
                space = sram[ref.space] = SramSpace()
            if ref.strides is None:
                out.append((space, ref.offset,
                            ref.offset + math.prod(ref.shape) * ref.dtype.itemsize))
                continue
            out += [(space, start, end) for start, end in ref.intervals()]
        if accumulates and op.accumulate:
            out += self._regions(op, ("out",), False)
        return out

    def _dram_deps(self, op: Op, boxes: tuple[tuple[str, DramRef, bool], ...],
                   deps: set[int]) -> None:
        """Add to ``deps`` the earlier commands ``op`` must wait for in DRAM (``boxes``
        are its DRAM operands, :func:`access.dram_refs`)."""
        if isinstance(op, (HostOp, HostTransfer)):
            names = op.inputs if isinstance(op, HostOp) else (op.ref.tensor,)
            for name in names:
                if name in self._dram_writes:
                    deps.update(self._dram_writes[name].all())
            if isinstance(op, HostOp):
                for name in op.outputs:
                    deps.update(self._dram_reads.get(name, ()))
            return
        for _, ref, is_write in boxes:
            index = self._dram_writes.get(ref.tensor)
            if index is not None:
                deps |= index.overlapping(ref.slices)  # RAW, and WAW for overlapping stores
            if is_write:
                deps.update(self._dram_reads.get(ref.tensor, ()))  # WAR after host reads

    def _record_dram(self, op: Op, boxes: tuple[tuple[str, DramRef, bool], ...],
                     cid: int) -> None:
        if isinstance(op, HostOp):
            for name in op.outputs:
                full = tuple(Slice(0, n) for n in self.builder._tensors[name].shape)
                self._writes(name).add(full, cid)
            return
        if isinstance(op, HostTransfer):
            if op.to_device:
                self._writes(op.ref.tensor).add(op.ref.slices, cid)
            else:
                self._dram_reads.setdefault(op.ref.tensor, []).append(cid)
            return
        for _, ref, is_write in boxes:
            if is_write:
                self._writes(ref.tensor).add(ref.slices, cid)

    def _writes(self, name: str) -> BoxIndex:
        index = self._dram_writes.get(name)
        if index is None:
            index = self._dram_writes[name] = BoxIndex(self.builder._tensors[name].shape)
        return index

    # -- DRAM access through views ---------------------------------------------------------
    def dram_pieces(self, view: DramView, box: Box, steps: tuple[int, ...] | None = None
                    ) -> list[tuple[DramRef, int]]:
        """DRAM refs covering ``box`` of ``view`` with their element offset into a dense
        row-major buffer of the box, each dense there (a piece :meth:`dram_places`
        places strided comes as its dense runs). ``steps`` (per dim) only works on
        base-shaped views."""
        if steps is not None and any(s != 1 for s in steps):
            if view.shape != view.base_shape:
                raise ValueError("strided access needs a base-shaped view")
            slices = tuple(Slice(lo, lo + (hi - lo - 1) * s + 1, s) if hi > lo else
                           Slice(lo, lo, 1) for (lo, hi), s in zip(box, steps))
            return [(DramRef(view.tensor, slices), 0)]
        return [(_ref(view.tensor, part), offset)
                for piece in place_box(view.shape, view.base_shape, box)
                for part, offset in dense_parts(piece)]

    def dram_places(self, view: DramView, box: Box
                    ) -> list[tuple[DramRef, int, Shape | None]]:
        """DRAM refs covering ``box`` of ``view``, the fewest the view allows, each with
        its place in a dense row-major buffer of the box: element offset and element
        strides per dim of the ref (None: dense from the offset). A piece of a merged
        dim cut mid-row spans all the box's rows, strided in the buffer
        (:func:`compiler.views.place_box`)."""
        return [(_ref(view.tensor, p.base_box), p.offset, p.strides)
                for p in place_box(view.shape, view.base_shape, box)]

    def build(self) -> Program:
        return self.builder.build()
