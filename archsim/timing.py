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
    Dequantize,
    Gather,
    HostOp,
    HostTransfer,
    Load,
    MatMul,
    Op,
    Reduce,
    MulAdd,
    Select,
    Store,
    Transpose,
    Unary,
    VCopy,
    VectorMatMul,
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


def _box(cls: type[Op], extra: Hashable, ref: DramRef) -> tuple[Any, ...]:
    """The key of a DRAM transfer: its op class and ``extra`` (the op's other fields),
    then the box without its position (the tensor, then length and step per dim). One
    flat tuple, ranks 1 and 2 spelled out: every transfer of a plan builds and hashes
    this."""
    slices = ref.slices
    if len(slices) == 2:
        a, b = slices
        return (cls, extra, ref.tensor, a.stop - a.start, a.step, b.stop - b.start, b.step)
    if len(slices) == 1:
        (a,) = slices
        return (cls, extra, ref.tensor, a.stop - a.start, a.step)
    key: tuple[Any, ...] = (cls, extra, ref.tensor)
    for s in slices:
        key += (s.stop - s.start, s.step)
    return key


def _load_key(op: Load) -> tuple[Any, ...]:
    ref = op.src
    if len(ref.slices) == 2:  # most loads: spelled out, a call less per command
        a, b = ref.slices
        return (Load, op.dst.space, ref.tensor, a.stop - a.start, a.step, b.stop - b.start,
                b.step)
    return _box(Load, op.dst.space, ref)


def _store_key(op: Store) -> tuple[Any, ...]:
    ref = op.dst
    if len(ref.slices) == 2:  # most stores: spelled out, as loads
        a, b = ref.slices
        return (Store, op.src.space, ref.tensor, a.stop - a.start, a.step, b.stop - b.start,
                b.step)
    return _box(Store, op.src.space, ref)


def _shape(operand: Any) -> Any:
    """An SRAM operand's shape and dtype (a Scalar operand has none): vector ops are
    timed by elements and by the bytes they stream through the scratchpad."""
    return (operand.shape, operand.dtype) if type(operand) is SramRef else None


COST_KEY: dict[type[Op], Callable[[Any], Hashable]] = {
    Load: _load_key,
    Store: _store_key,
    Copy: lambda op: (Copy, op.src.space, op.dst.space, op.src.shape, op.src.dtype),
    Gather: lambda op: _box(Gather, (op.indices.shape, op.dst.space), op.table),
    MatMul: lambda op: (MatMul, op.a.shape, op.a.dtype, op.b.shape, op.columns),
    Unary: lambda op: (Unary, op.kind, _shape(op.src), _shape(op.dst), op.chained),
    Binary: lambda op: (Binary, op.kind, _shape(op.a), _shape(op.b), _shape(op.dst),
                        op.chained),
    MulAdd: lambda op: (MulAdd, _shape(op.acc), _shape(op.a), _shape(op.b), _shape(op.dst),
                        op.chained),
    Select: lambda op: (Select, _shape(op.cond), _shape(op.a), _shape(op.b), _shape(op.dst)),
    Cast: lambda op: (Cast, _shape(op.src), _shape(op.dst), op.chained),
    Reduce: lambda op: (Reduce, _shape(op.src), _shape(op.dst), op.axis),
    Transpose: lambda op: (Transpose, _shape(op.src), _shape(op.dst)),
    VCopy: lambda op: (VCopy, _shape(op.src), _shape(op.dst)),
    Dequantize: lambda op: (Dequantize, _shape(op.src), _shape(op.scales), _shape(op.dst),
                            op.dequant.nibbles),
    VectorMatMul: lambda op: (VectorMatMul, _shape(op.a), _shape(op.b), op.columns,
                              _shape(op.scales) if op.scales is not None else None,
                              op.dequant.nibbles if op.dequant is not None else None,
                              _shape(op.out), op.accumulate),
    HostTransfer: lambda op: _box(HostTransfer, op.to_device, op.ref),
    HostOp: lambda op: (HostOp, op.cycles),
}
"""Per op class, the fields its cost depends on (see the module docstring), as one
tuple that starts with the class (so the keys of a Load and a Store on one engine never
meet). A block whose timing starts reading another field must add it here; a test
checks, over real compiler output, that commands with equal keys cost the same."""


def cost_key(op: Op) -> Hashable:
    """The shape of ``op`` that its cost depends on."""
    return COST_KEY.get(type(op), no_cost_key)(op)


def no_cost_key(op: Op) -> Hashable:
    raise TypeError(f"archsim.timing.COST_KEY has no entry for op class "
                    f"{type(op).__name__}; add one")
