"""Which memory each operation reads and writes, written down once.

The verifier (hazards, roles), the simulator (bytes moved, functional execution) and
reports all need to know which operands an op reads and which it writes. The answer
lives in the tables below, keyed by op class, so adding an op means adding one row to
each table rather than teaching every consumer about it.

SRAM accesses are returned with the name of the field they come from, so messages can
say ``field b``. Scalars in vector ops are not memory and are skipped. A
A matmul (``compiler.ir.ops.MATMUL_OPS``) with ``accumulate=True`` also *reads* ``out``.

DRAM accesses are tensor names. A :class:`~compiler.ir.ops.HostTransfer` models only
host-link traffic (DRAM already holds the caller's data), so it neither reads nor
writes DRAM here.
"""

from __future__ import annotations

from collections.abc import Iterable

from compiler.ir.operands import DramRef, SramRef
from compiler.ir.ops import (
    MATMUL_OPS,
    Binary,
    Cast,
    Copy,
    Dequantize,
    Gather,
    HostOp,
    HostTransfer,
    Load,
    MatMul,
    MulAdd,
    Op,
    Reduce,
    Select,
    Store,
    Transpose,
    Unary,
    VCopy,
    VectorMatMul,
)

FieldRef = tuple[str, SramRef]
"""An SRAM operand together with the name of the op field holding it."""

# Fields whose SRAM region an op reads (Scalars in these fields are skipped).
SRAM_READ_FIELDS: dict[type[Op], tuple[str, ...]] = {
    Load: (),
    Store: ("src",),
    Copy: ("src",),
    Gather: ("indices",),
    MatMul: ("a", "b", "scales"),  # + "out" when accumulate=True
    Unary: ("src",),
    Binary: ("a", "b"),
    MulAdd: ("acc", "a", "b"),
    Select: ("cond", "a", "b"),
    Cast: ("src",),
    Reduce: ("src",),
    Transpose: ("src",),
    VCopy: ("src",),
    Dequantize: ("src", "scales"),
    VectorMatMul: ("a", "b", "scales"),  # + "out" when accumulate=True
    HostTransfer: (),
    HostOp: (),
}

# Fields whose SRAM region an op writes.
SRAM_WRITE_FIELDS: dict[type[Op], tuple[str, ...]] = {
    Load: ("dst",),
    Store: (),
    Copy: ("dst",),
    Gather: ("dst",),
    MatMul: ("out",),
    Unary: ("dst",),
    Binary: ("dst",),
    MulAdd: ("dst",),
    Select: ("dst",),
    Cast: ("dst",),
    Reduce: ("dst",),
    Transpose: ("dst",),
    VCopy: ("dst",),
    Dequantize: ("dst",),
    VectorMatMul: ("out",),
    HostTransfer: (),
    HostOp: (),
}

# Fields holding a DramRef, with whether the op reads (False) or writes (True) it.
DRAM_REF_FIELDS: dict[type[Op], tuple[tuple[str, bool], ...]] = {
    Load: (("src", False),),
    Store: (("dst", True),),
    Gather: (("table", False),),
    HostTransfer: (("ref", False),),
}


def _table_row(table: dict[type[Op], tuple[str, ...]], op: Op) -> tuple[str, ...]:
    try:
        return table[type(op)]
    except KeyError:
        raise TypeError(f"compiler.ir.access has no entry for op class "
                        f"{type(op).__name__}; add it to the access tables") from None


def sram_reads(op: Op) -> tuple[FieldRef, ...]:
    """The SRAM regions ``op`` reads, as ``(field, ref)`` pairs."""
    names = _table_row(SRAM_READ_FIELDS, op)
    pairs = tuple((name, getattr(op, name)) for name in names)
    found = tuple((name, ref) for name, ref in pairs if isinstance(ref, SramRef))
    if isinstance(op, MATMUL_OPS) and op.accumulate:
        found += (("out", op.out),)
    return found


def sram_writes(op: Op) -> tuple[FieldRef, ...]:
    """The SRAM regions ``op`` writes, as ``(field, ref)`` pairs."""
    names = _table_row(SRAM_WRITE_FIELDS, op)
    return tuple((name, getattr(op, name)) for name in names)


def sram_operands(op: Op) -> tuple[FieldRef, ...]:
    """Every SRAM operand of ``op`` once (an accumulated ``out`` is listed once)."""
    seen: dict[str, SramRef] = dict(sram_reads(op))
    seen.update(sram_writes(op))
    return tuple(seen.items())


def reads(op: Op) -> tuple[SramRef, ...]:
    """The SRAM regions ``op`` reads."""
    return tuple(ref for _, ref in sram_reads(op))


def writes(op: Op) -> tuple[SramRef, ...]:
    """The SRAM regions ``op`` writes."""
    return tuple(ref for _, ref in sram_writes(op))


def dram_refs(op: Op) -> tuple[tuple[str, DramRef, bool], ...]:
    """``(field, ref, is_write)`` for each DRAM box operand of ``op``."""
    rows = DRAM_REF_FIELDS.get(type(op), ())
    return tuple((name, getattr(op, name), is_write) for name, is_write in rows)


def dram_reads(op: Op) -> tuple[str, ...]:
    """Names of the DRAM tensors ``op`` reads."""
    if isinstance(op, HostOp):
        return op.inputs
    if isinstance(op, HostTransfer):
        return ()
    return tuple(ref.tensor for _, ref, is_write in dram_refs(op) if not is_write)


def dram_writes(op: Op) -> tuple[str, ...]:
    """Names of the DRAM tensors ``op`` writes."""
    if isinstance(op, HostOp):
        return op.outputs
    return tuple(ref.tensor for _, ref, is_write in dram_refs(op) if is_write)


def dram_tensors(op: Op) -> tuple[str, ...]:
    """The DRAM tensors ``op`` touches: what :func:`dram_reads` and :func:`dram_writes`
    name, and a HostTransfer's tensor. The box ops (nearly all of a program's
    commands) are looked up directly: whole-program walks call this per command."""
    fields = _BOX_FIELDS.get(type(op))
    if fields is not None:
        return tuple(getattr(op, field).tensor for field in fields)
    if isinstance(op, HostTransfer):
        return (op.ref.tensor,)
    return (*dram_reads(op), *dram_writes(op))


SRAM_FIELDS: dict[type[Op], tuple[str, ...]] = {
    cls: tuple(dict.fromkeys(SRAM_READ_FIELDS[cls] + SRAM_WRITE_FIELDS[cls]))
    for cls in SRAM_READ_FIELDS
}
"""Every field that may hold an SRAM operand (read or written), per op class."""

_BOX_FIELDS: dict[type[Op], tuple[str, ...]] = {
    op_type: tuple(field for field, _ in rows)
    for op_type, rows in DRAM_REF_FIELDS.items() if op_type is not HostTransfer}
_BOX_FIELDS.update((op_type, ()) for op_type in SRAM_FIELDS if op_type not in _BOX_FIELDS
                   and op_type not in (HostOp, HostTransfer))
"""Per op class other than the host's, its DRAM box fields (none for SRAM-only ops)."""


def sram_high_water(ops: Iterable[Op]) -> dict[str, int]:
    """Per SRAM space, the highest byte address any of ``ops`` touches."""
    peak: dict[str, int] = {}
    for op in ops:
        for name in _table_row(SRAM_FIELDS, op):
            ref = getattr(op, name)
            if type(ref) is SramRef and ref.end > peak.get(ref.space, 0):
                peak[ref.space] = ref.end
    return peak
