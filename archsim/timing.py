"""What a command costs, decided before the simulation starts.

Each hardware block turns an op into a :class:`CommandTiming`: a fixed part (latency
or compute cycles) and, for data movement, a flow over shared links. The simulator's
inner loop only reads these, so it allocates nothing per command.

A command's cost depends on its engine and its op's *shape* (sizes, dtypes, kinds,
which memories it connects), never on its addresses. :data:`COST_KEY` says, per op
class, which fields that is, so a plan costs each distinct shape once: a
double-buffered loop repeats a handful of shapes at thousands of addresses.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

from compiler.ir.operands import DramRef, SramRef
from compiler.ir.ops import (
    Binary,
    Cast,
    Copy,
    Gather,
    HostOp,
    HostTransfer,
    Load,
    MatMul,
    Op,
    Reduce,
    Select,
    Store,
    Transpose,
    Unary,
    VCopy,
)


class CommandTiming(NamedTuple):
    fixed_cycles: int
    """Cycles the engine spends before (or, without a flow, instead of) moving bytes."""
    links: tuple[int, ...] = ()
    """Flow-network links the transfer crosses; empty for compute."""
    nbytes: float = 0.0
    """Bytes the flow moves (as charged to the links)."""
    cap: float = 0.0
    """The engine's own bandwidth limit, bytes per cycle."""
    flops: int = 0
    dram_read: int = 0
    dram_written: int = 0
    host_bytes: int = 0


def compute(cycles: int, flops: int = 0) -> CommandTiming:
    return CommandTiming(fixed_cycles=cycles, flops=flops)


def _box(ref: DramRef, extra: Hashable) -> tuple[Any, ...]:
    """A DRAM box without its position, after ``extra`` (the op's other fields): the
    tensor, then length and step per dim. One flat tuple (ranks 1 and 2 spelled out):
    every command of a plan builds and hashes this."""
    slices = ref.slices
    if len(slices) == 2:
        a, b = slices
        return (extra, ref.tensor, a.stop - a.start, a.step, b.stop - b.start, b.step)
    if len(slices) == 1:
        (a,) = slices
        return (extra, ref.tensor, a.stop - a.start, a.step)
    key: tuple[Any, ...] = (extra, ref.tensor)
    for s in slices:
        key += (s.stop - s.start, s.step)
    return key


def _shape(operand: Any) -> Any:
    """An SRAM operand's shape and dtype (a Scalar operand has none): vector ops are
    timed by elements and by the bytes they stream through the scratchpad."""
    return (operand.shape, operand.dtype) if type(operand) is SramRef else None


COST_KEY: dict[type[Op], Callable[[Any], Hashable]] = {
    Load: lambda op: _box(op.src, op.dst.space),
    Store: lambda op: _box(op.dst, op.src.space),
    Copy: lambda op: (op.src.space, op.dst.space, op.src.shape, op.src.dtype),
    Gather: lambda op: _box(op.table, (op.indices.shape, op.dst.space)),
    MatMul: lambda op: (op.a.shape, op.a.dtype, op.b.shape),
    Unary: lambda op: (op.kind, _shape(op.src), _shape(op.dst), op.chained),
    Binary: lambda op: (op.kind, _shape(op.a), _shape(op.b), _shape(op.dst), op.chained),
    Select: lambda op: (_shape(op.cond), _shape(op.a), _shape(op.b), _shape(op.dst)),
    Cast: lambda op: (_shape(op.src), _shape(op.dst), op.chained),
    Reduce: lambda op: (_shape(op.src), _shape(op.dst), op.axis),
    Transpose: lambda op: (_shape(op.src), _shape(op.dst)),
    VCopy: lambda op: (_shape(op.src), _shape(op.dst)),
    HostTransfer: lambda op: _box(op.ref, op.to_device),
    HostOp: lambda op: op.cycles,
}
"""Per op class, the fields its cost depends on (see the module docstring). A block
whose timing starts reading another field must add it here; a test checks, over real
compiler output, that commands with equal keys cost the same."""


def cost_key(op: Op) -> Hashable:
    """The shape of ``op`` that its cost depends on."""
    return COST_KEY.get(type(op), no_cost_key)(op)


def no_cost_key(op: Op) -> Hashable:
    raise TypeError(f"archsim.timing.COST_KEY has no entry for op class "
                    f"{type(op).__name__}; add one")
