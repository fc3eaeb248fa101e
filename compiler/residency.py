"""Memory-space assignment: intermediate tensors kept in shared SRAM instead of DRAM.

A kernel's result that the next kernels read goes to DRAM and back by default: a store
and a load, each paying the DRAM latency. A real NPU compiler keeps such buffers on
chip when there is room: XLA's memory-space assignment places buffers in TPU v4's
128 MiB CMEM (software-managed, between HBM and the cores' VMEM), and on Ascend parts
the 192 MiB L2 holds a kernel's output until the next kernel reads it. Decode steps
are made of such hand-offs (a 4096-element activation between every two kernels), so
their chain of DRAM latencies is a large share of a step when the weights do not
bound it.

:func:`keep_on_chip` rewrites a built program: each temporary tensor (``temp`` role)
that only loads and stores of one contiguous run each touch is given a region of the shared SRAM above the
program's own use of it, and its loads and stores become copies to and from that
region (a core's DMA over the NoC: no DRAM latency, no DRAM bytes). Tensors are
placed in program order; a region is reused by a later tensor only once every
access to its previous tensor happens before the later tensor's first writes (the
queues and deps already order them: the shared SRAM's race check in the verifier
holds). What does not fit stays in DRAM, as do tensors read or written in strided
boxes (column blocks of a prefill's activations: the race check compares a strided
ref's byte span when it has more than ``EXACT_RUNS`` rows, and disjoint strided boxes of
one tensor have overlapping spans). A chip without shared SRAM is unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from archsim.config.model import NpuConfig
from archsim.config.names import SHARED
from compiler.ir.operands import DramRef, DramTensor, SramRef
from compiler.ir.ops import Command, Copy, Gather, HostOp, HostTransfer, Load, Program, Store
from compiler.ir.verify_order import HappensBefore, WaitGraph

ALIGNMENT = 64
"""Bytes: each placed tensor starts on this boundary (a DMA burst)."""


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


@dataclass
class _Temp:
    tensor: DramTensor
    accesses: list[int] = field(default_factory=list)
    """Positions of the loads and stores of it, in program order."""
    writes: list[int] = field(default_factory=list)

    @property
    def size(self) -> int:
        return _aligned(self.tensor.nbytes)


@dataclass
class _Region:
    offset: int
    size: int
    last: _Temp


def keep_on_chip(program: Program, config: NpuConfig) -> Program:
    """``program`` with what fits of its temporary tensors in shared SRAM (see the
    module doc); the same program when none is placed."""
    capacity = config.shared_sram.size_bytes
    temps = _candidates(program)
    if capacity <= 0 or not temps:
        return program
    base = _aligned(program.sram_high_water.get(SHARED, 0))
    offsets = _place(program.commands, temps, base, capacity)
    if not offsets:
        return program
    placed = {name: (offset, program.tensor_map[name]) for name, offset in offsets.items()}
    commands = tuple(_rewritten(c, placed) for c in program.commands)
    tensors = tuple(t for t in program.tensors if t.name not in offsets)
    return dataclasses.replace(program, tensors=tensors, commands=commands)


def _candidates(program: Program) -> list[_Temp]:
    """The temporary tensors only loads and stores touch, written at least once, in
    the order of their first access."""
    temps = {t.name: _Temp(t) for t in program.tensors if t.role == "temp"}
    excluded: set[str] = set()
    for p, command in enumerate(program.commands):
        op = command.op
        if isinstance(op, (Load, Store)):
            ref = op.src if isinstance(op, Load) else op.dst
            found = temps.get(ref.tensor)
            if found is None:
                continue
            if not _contiguous(ref, found.tensor.shape):
                excluded.add(ref.tensor)
            found.accesses.append(p)
            if isinstance(op, Store):
                found.writes.append(p)
        elif isinstance(op, HostOp):
            excluded.update(op.inputs, op.outputs)
        elif isinstance(op, HostTransfer):
            excluded.add(op.ref.tensor)
        elif isinstance(op, Gather):
            excluded.add(op.table.tensor)
    kept = [t for name, t in temps.items()
            if name not in excluded and t.writes and t.tensor.nbytes]
    return sorted(kept, key=lambda t: t.accesses[0])


def _contiguous(ref: DramRef, shape: Sequence[int]) -> bool:
    """Whether the box ``ref`` of a row-major tensor of ``shape`` is one run of bytes:
    full inner dims, then one partial dim, then dims of length 1."""
    partial = False
    for s, n in zip(reversed(ref.slices), reversed(shape)):
        length = s.length
        if partial and length > 1 or length > 1 and s.step != 1:
            return False
        if length != n:
            partial = True
    return True


def _place(commands: Sequence[Command], temps: list[_Temp], base: int,
           capacity: int) -> dict[str, int]:
    """Offsets in shared SRAM by tensor name: each tensor takes the smallest region
    freed by an earlier one whose accesses all happen before its first writes, else
    new space above ``base`` while it fits."""
    order = _Order(commands)
    regions: list[_Region] = []
    top = base
    offsets: dict[str, int] = {}
    for temp in temps:
        first = temp.accesses[0]
        free = [r for r in regions if r.size >= temp.size and r.last.accesses[-1] < first
                and order.done_before(r.last, temp)]
        if free:
            region = min(free, key=lambda r: r.size)
            region.last = temp
        elif top + temp.size <= capacity:
            region = _Region(top, temp.size, temp)
            regions.append(region)
            top += temp.size
        else:
            continue
        offsets[temp.tensor.name] = region.offset
    return offsets


class _Order:
    """Happens-before between a program's commands, its wait-for graph built on the
    first question: a program whose tensors never compete for a region needs none (a
    70B prefill's 387k commands took 1.4 s to order)."""

    def __init__(self, commands: Sequence[Command]) -> None:
        self.commands = commands
        self._before: HappensBefore | None = None
        self._engine: list[int] = []
        self._stuck = False

    def done_before(self, old: _Temp, new: _Temp) -> bool:
        """Whether every access to ``old`` happens before every write of ``new``: the
        last access on each engine before the first write on each engine (a queue runs
        in order). Never in a deadlocked program (the verifier reports it)."""
        if self._before is None and not self._stuck:
            graph = WaitGraph.build(self.commands)
            order, stuck = graph.topological_order()
            self._stuck = bool(stuck)
            if not stuck:
                self._before, self._engine = HappensBefore(graph, order), graph.engine_index
        if self._before is None:
            return False
        engine = self._engine
        last: dict[int, int] = {}
        for p in old.accesses:
            last[engine[p]] = p
        first: dict[int, int] = {}
        for p in new.writes:
            first.setdefault(engine[p], p)
        return all(self._before.ordered(a, w) for a in last.values() for w in first.values())


def _rewritten(command: Command, placed: dict[str, tuple[int, DramTensor]]) -> Command:
    op = command.op
    if isinstance(op, Load) and op.src.tensor in placed:
        return dataclasses.replace(command, op=Copy(_on_chip(op.src, placed), op.dst))
    if isinstance(op, Store) and op.dst.tensor in placed:
        return dataclasses.replace(command, op=Copy(op.src, _on_chip(op.dst, placed)))
    return command


def _on_chip(ref: DramRef, placed: dict[str, tuple[int, DramTensor]]) -> SramRef:
    """The shared SRAM region of the DRAM box ``ref``, its tensor lying dense and
    row-major at its offset: one run of bytes from the box's first element (only such
    boxes are placed, :func:`_contiguous`)."""
    offset, tensor = placed[ref.tensor]
    start = sum(s.start * st for s, st in zip(ref.slices, _row_major(tensor.shape)))
    return SramRef(SHARED, offset + start * tensor.dtype.itemsize, ref.shape, tensor.dtype)


def _row_major(shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(math.prod(shape[d + 1:]) for d in range(len(shape)))


__all__ = ["ALIGNMENT", "keep_on_chip"]
