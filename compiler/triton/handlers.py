"""One lowering per recorded operation kind (the table :data:`HANDLERS`)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from typing import TYPE_CHECKING

from compiler.ir.dtypes import DType
from compiler.ir.operands import Scalar, SramRef
from compiler.ir.ops import (Binary, BinaryKind, Cast, Load, MatMul, Reduce, ReduceKind,
                             Select, Store, Transpose, Unary, UnaryKind, VCopy)
from compiler.triton.addressing import Access, Gather, padding
from compiler.triton.record import PLAIN
from compiler.triton.trace import Const, TraceOp

if TYPE_CHECKING:
    from compiler.triton.lower import _ProgramLowering as P

LN2 = math.log(2.0)
_BINARY = {"add": BinaryKind.add, "sub": BinaryKind.sub, "mul": BinaryKind.mul,
           "div": BinaryKind.div, "max": BinaryKind.max, "min": BinaryKind.min,
           "lt": BinaryKind.lt, "le": BinaryKind.le, "gt": BinaryKind.gt,
           "ge": BinaryKind.ge, "eq": BinaryKind.eq, "ne": BinaryKind.ne,
           "and": BinaryKind.logical_and, "or": BinaryKind.logical_or}
_UNARY = {"exp": UnaryKind.exp, "log": UnaryKind.log, "sqrt": UnaryKind.sqrt,
          "rsqrt": UnaryKind.rsqrt, "abs": UnaryKind.abs, "neg": UnaryKind.neg,
          "sin": UnaryKind.sin, "cos": UnaryKind.cos, "erf": UnaryKind.erf}
_REDUCE = {"sum": ReduceKind.sum, "max": ReduceKind.max, "min": ReduceKind.min}


def load(p: P, index: int, op: TraceOp) -> None:
    perm, out = p.plan.transposed.get(index, (None, op.out))
    shape = op.shape if perm is None else tuple(op.shape[a] for a in perm)
    tile = p.new(out, shape, op.dtype)
    access = op.attrs["access"]
    fill = Scalar(op.attrs["fill"])
    pads = None if access is None else padding(access)
    if pads is None:  # the whole tile, before the loads overwrite what they read
        p.emit(p.vpu, Binary(BinaryKind.add, fill, Scalar(0.0), tile))
    if access is None:
        return
    p.o.read.add(access.pointer)
    for part in _parts(access):
        if len(part.box) == 1 and part.strides[0] == 0 and part.numel > 1:
            _repeated(p, part, tile)
            continue
        for dram, view in p.dram_pieces(part, tile, perm):
            p.emit(p.o.em.dma(p.core, "load"), Load(dram, view))
    for box in pads or ():  # only the unread part: the loads need not wait for it
        p.emit(p.vpu, Binary(BinaryKind.add, fill, Scalar(0.0), p.sub_view(tile, box, perm)))


def _repeated(p: P, part: Access, tile: SramRef) -> None:
    """One element read once and broadcast over a 1-D run (``table + offs // PAGE``)."""
    lo, hi = part.box[0]
    first = Access(part.pointer, part.block, ((lo, lo + 1),), part.origin, (0,))
    for dram, view in p.dram_pieces(first, tile, None):
        p.emit(p.o.em.dma(p.core, "load"), Load(dram, view))
    size = tile.dtype.itemsize
    p.emit(p.vpu, VCopy(SramRef(tile.space, tile.offset + lo * size, (1,), tile.dtype),
                        SramRef(tile.space, tile.offset + (lo + 1) * size, (hi - lo - 1,),
                                tile.dtype)))


def store(p: P, index: int, op: TraceOp) -> None:
    access = op.attrs["access"]
    if access is None:
        return
    value = op.args[0]
    tile = p.dense(value, op.dtype)
    p.o.written.add(access.pointer)
    for part in _parts(access):
        for dram, view in p.dram_pieces(part, tile, None):
            p.emit(p.o.em.dma(p.core, "store"), Store(view, dram))


def _parts(access: Access | Gather) -> tuple[Access, ...]:
    """The boxes of an access: one, or a gather's (one DMA descriptor per run)."""
    return access.parts if isinstance(access, Gather) else (access,)


def opaque(p: P, index: int, op: TraceOp) -> None:
    """An operation with no vector lowering whose result a store needs: its value was
    resolved at launch (the trace ran on the data), so the program carries it as a
    constant (a shape-only trace stops before, :meth:`Recorder.finish`)."""
    value = op.attrs["value"]
    name = op.attrs["op"]
    if value is None or op.dtype is None:
        p.refuse(f"{PLAIN.get(name, f'the Triton operation `{name}`')} of loaded values")
    p.fill_const(Const(np.asarray(value), op.dtype), p.new(op.out, op.shape, op.dtype))


def dot(p: P, index: int, op: TraceOp) -> None:
    a_arg, b_arg, d = op.args
    a, b = p.dense(a_arg), p.dense(b_arg)
    if a.dtype != b.dtype:
        p.refuse(f"tl.dot of {a.dtype} and {b.dtype} (cast both to one dtype)")
    _check_dot_dtypes(p, a.dtype, op.dtype)
    fold = p.plan.accumulate.get(index)
    if fold is not None:
        acc_vid, out = fold
        acc = p.dense(acc_vid)
        _matmuls(p, a, b, acc, True)
        p.alias(out, acc_vid, acc, op.shape)
        return
    if isinstance(d, Const) and d.uniform and d.value == 0.0:
        _matmuls(p, a, b, p.new(op.out, op.shape, op.dtype), False)
        return
    acc = p.new(op.out, op.shape, op.dtype)
    p.emit(p.vpu, VCopy(p.dense(d, op.dtype), acc))
    _matmuls(p, a, b, acc, True)


def _check_dot_dtypes(p: P, inputs: DType, out: DType) -> None:
    """int8 inputs accumulate in i32 (as Triton types them; any array multiplies them,
    a float one widening them on the way in); float inputs in the arrays' f32."""
    if inputs.is_int8:
        if out is not DType.i32:
            p.refuse(f"tl.dot of {inputs} into {out} (int8 products accumulate in i32)")
        return
    accumulator = p.o.config.core.matrix.accumulator_dtype
    if accumulator != "f32":
        p.refuse(f"tl.dot of {inputs} on {accumulator}-accumulating (integer) matrix "
                 f"arrays (they multiply int8 only)")
    if out.value != accumulator:
        p.refuse(f"tl.dot of {inputs} into {out} (the matrix arrays accumulate floats in "
                 f"f32; use out_dtype=tl.float32)")


def _matmuls(p: P, a: SramRef, b: SramRef, out: SramRef, accumulate: bool) -> None:
    """One MatMul, or one per batch entry of a 3-D ``tl.dot``."""
    if len(a.shape) == 2:
        p.emit(p.mxu(), MatMul(a, b, out, accumulate))
        return
    batch = a.shape[0]
    for i in range(batch):
        p.emit(p.mxu(), MatMul(_entry(a, i), _entry(b, i), _entry(out, i), accumulate))


def _entry(ref: SramRef, i: int) -> SramRef:
    size = math.prod(ref.shape[1:])
    return SramRef(ref.space, ref.offset + i * size * ref.dtype.itemsize, ref.shape[1:],
                   ref.dtype)


def binary(p: P, index: int, op: TraceOp) -> None:
    kind = op.attrs["op"]
    a, b = op.args
    identity = {"add": (0.0, 0.0), "sub": (None, 0.0), "mul": (1.0, 1.0), "div": (None, 1.0)}
    left, right = identity.get(kind, (None, None))
    for keep, other, neutral in ((b, a, left), (a, b, right)):
        if neutral is not None and isinstance(other, Const) and other.uniform and \
                other.value == neutral and not isinstance(keep, Const) and \
                p.logical[keep] == (op.shape or (1,)) and p.refs[keep].dtype == op.dtype:
            p.alias(op.out, keep, p.refs[keep], op.shape)
            return
    if kind not in _BINARY:
        p.refuse(f"binary operation {kind}")
    operand_dtype = _operand_dtype(p, op)
    if kind in ("and", "or") and operand_dtype is not DType.bool:
        p.refuse(f"bitwise {kind} on {operand_dtype} data")
    dst = p.new(op.out, op.shape, op.dtype)
    p.emit(p.vpu, Binary(_BINARY[kind], p.vector_operand(a, operand_dtype),
                         p.vector_operand(b, operand_dtype), dst))


def _operand_dtype(p: P, op: TraceOp) -> DType:
    for arg in op.args:
        if not isinstance(arg, Const):
            return p.refs[arg].dtype
    return op.dtype


def unary(p: P, index: int, op: TraceOp) -> None:
    kind = op.attrs["op"]
    src = p.dense(op.args[0])
    dst = p.new(op.out, op.shape, op.dtype)
    if kind == "exp2":
        p.emit(p.vpu, Binary(BinaryKind.mul, src, Scalar(LN2), dst))
        p.emit(p.vpu, Unary(UnaryKind.exp, dst, dst))
    elif kind == "log2":
        p.emit(p.vpu, Unary(UnaryKind.log, src, dst))
        p.emit(p.vpu, Binary(BinaryKind.mul, dst, Scalar(1.0 / LN2), dst))
    else:
        p.emit(p.vpu, Unary(_UNARY[kind], src, dst))


def cast(p: P, index: int, op: TraceOp) -> None:
    src = p.dense(op.args[0])
    if src.dtype == op.dtype:
        p.alias(op.out, op.args[0], src, op.shape)
        return
    p.emit(p.vpu, Cast(src, p.new(op.out, op.shape, op.dtype)))


def reshape(p: P, index: int, op: TraceOp) -> None:
    src = p.dense(op.args[0])
    shape = op.shape or (1,)
    p.alias(op.out, op.args[0], SramRef(src.space, src.offset, shape, src.dtype), shape)


def broadcast(p: P, index: int, op: TraceOp) -> None:
    """Lazy: vector operands broadcast; anything else materializes it (:meth:`dense`)."""
    vid = op.args[0]
    p.alias(op.out, vid, p.refs[vid], op.shape)


def trans(p: P, index: int, op: TraceOp) -> None:
    src = p.dense(op.args[0])
    p.emit(p.vpu, Transpose(src, p.new(op.out, op.shape, op.dtype), op.attrs["perm"]))


def select(p: P, index: int, op: TraceOp) -> None:
    cond, a, b = op.args
    if isinstance(cond, Const) and cond.uniform:
        chosen = a if cond.value else b
        if isinstance(chosen, Const):
            dst = p.new(op.out, op.shape, op.dtype)
            p.emit(p.vpu, Binary(BinaryKind.add, Scalar(chosen.value), Scalar(0.0), dst))
        else:
            p.alias(op.out, chosen, p.refs[chosen], op.shape)
        return
    cond_ref = p.vector_operand(cond, DType.bool)
    if isinstance(cond_ref, Scalar):
        cond_ref = p.dense(cond, DType.bool)
    dst = p.new(op.out, op.shape, op.dtype)
    p.emit(p.vpu, Select(cond_ref, p.vector_operand(a, op.dtype),
                         p.vector_operand(b, op.dtype), dst))


def fma(p: P, index: int, op: TraceOp) -> None:
    x, y, z = op.args
    dst = p.new(op.out, op.shape, op.dtype)
    p.emit(p.vpu, Binary(BinaryKind.mul, p.vector_operand(x, op.dtype),
                         p.vector_operand(y, op.dtype), dst))
    p.emit(p.vpu, Binary(BinaryKind.add, dst, p.vector_operand(z, op.dtype), dst))


def clamp(p: P, index: int, op: TraceOp) -> None:
    x, lo, hi = op.args
    dst = p.new(op.out, op.shape, op.dtype)
    p.emit(p.vpu, Binary(BinaryKind.max, p.vector_operand(x, op.dtype),
                         p.vector_operand(lo, op.dtype), dst))
    p.emit(p.vpu, Binary(BinaryKind.min, dst, p.vector_operand(hi, op.dtype), dst))


def reduce(p: P, index: int, op: TraceOp) -> None:
    src = p.dense(op.args[0])
    axis = op.attrs["axis"]
    if axis is None:
        src = SramRef(src.space, src.offset, (math.prod(src.shape),), src.dtype)
        axis = 0
    if src.dtype != op.dtype:
        wide = p.alloc(src.shape, op.dtype)
        p.pending_free.append(wide[1])
        p.emit(p.vpu, Cast(src, wide[0]))
        src = wide[0]
    kept = src.shape[:axis] + (1,) + src.shape[axis + 1:]
    dst = p.new(op.out, kept, op.dtype)
    p.emit(p.vpu, Reduce(_REDUCE[op.attrs["reduce"]], src, dst, axis))
    shape = op.shape or (1,)
    if shape != kept:
        p.refs[op.out] = SramRef(dst.space, dst.offset, shape, dst.dtype)
        p.logical[op.out] = shape


_SCAN = {"sum": BinaryKind.add, "prod": BinaryKind.mul}


def scan(p: P, index: int, op: TraceOp) -> None:
    """``tl.cumsum``/``tl.cumprod``: a log-step (Hillis-Steele) scan along the axis, as
    torch's cumsum lowers (:mod:`compiler.lowerings.cumulative`): step ``s`` combines
    each element with the one ``s`` before it (after it, reversed), between two tiles,
    so the last step writes the result's."""
    src = p.dense(op.args[0])
    if src.dtype != op.dtype:
        wide = p.alloc(src.shape, op.dtype)
        p.pending_free.append(wide[1])
        p.emit(p.vpu, Cast(src, wide[0]))
        src = wide[0]
    shape = src.shape
    axis = op.attrs["axis"] % len(shape)
    n = shape[axis]
    out = p.new(op.out, op.shape, op.dtype)
    out = SramRef(out.space, out.offset, shape, out.dtype)
    steps = max(0, (n - 1).bit_length())
    if steps == 0:
        p.emit(p.vpu, VCopy(src, out))
        return
    spare = p.alloc(shape, op.dtype)
    p.pending_free.append(spare[1])
    kind, reverse = _SCAN[op.attrs["scan"]], op.attrs["reverse"]

    def part(tile: SramRef, lo: int, hi: int) -> SramRef:
        box = tuple((lo, hi) if d == axis else (0, size) for d, size in enumerate(shape))
        return p.sub_view(tile, box, None)

    x = src
    for j in range(steps):
        s = 1 << j
        dst = out if (steps - 1 - j) % 2 == 0 else spare[0]
        if reverse:  # x[i] op x[i + s]; the last s are done
            p.emit(p.vpu, Binary(kind, part(x, 0, n - s), part(x, s, n), part(dst, 0, n - s)))
            p.emit(p.vpu, VCopy(part(x, n - s, n), part(dst, n - s, n)))
        else:
            p.emit(p.vpu, Binary(kind, part(x, s, n), part(x, 0, n - s), part(dst, s, n)))
            p.emit(p.vpu, VCopy(part(x, 0, s), part(dst, 0, s)))
        x = dst


HANDLERS: dict[str, Callable[[P, int, TraceOp], None]] = {
    "load": load, "store": store, "dot": dot, "binary": binary, "unary": unary,
    "cast": cast, "reshape": reshape, "broadcast": broadcast, "trans": trans,
    "select": select, "fma": fma, "clamp": clamp, "reduce": reduce, "scan": scan,
    "opaque": opaque,
}
