"""Where attention's heads live: inputs stored [B, H, S, D] or [B, S, H, D], and the rows
of a query buffer that hold several heads (grouped-query items); and the online softmax's
update, which the flash and decode steps share."""

from __future__ import annotations

from archsim.config.names import vpu_engine
from compiler.graph import Value
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from collections.abc import Callable

from compiler.ir.ops import Binary, BinaryKind, Cast, Op, Reduce, ReduceKind, Unary, UnaryKind
from compiler.kernels.common import Context
from compiler.kernels.vector import store_box, sub

Box = tuple[tuple[int, int], ...]


def logical_shape(value: Value, heads_after_seq: bool) -> tuple[int, ...]:
    """An attention input's [..., H, S, D] shape (stored [B, S, H, D] when
    ``heads_after_seq``)."""
    shape = value.shape
    return (shape[0], shape[2], shape[1], shape[3]) if heads_after_seq else shape


def stored_box(box: Box, heads_after_seq: bool) -> Box:
    """A [..., H, S, D] box in the input's stored layout (a single head, so the
    elements keep their order)."""
    return (box[0], box[2], box[1], box[3]) if heads_after_seq else box


def head_segments(kv_index: tuple[int, ...], group: int, sq: int
                  ) -> list[tuple[tuple[int, ...], int]]:
    """The query heads of K/V head ``kv_index`` (its last entry): (the head's index, its
    first row in a buffer holding the ``group`` heads' ``sq`` rows one after another)."""
    lead, kv_head = kv_index[:-1], kv_index[-1]
    return [(lead + (kv_head * group + j,), j * sq) for j in range(group)]


def store_rows(ctx: Context, node, core: int, result: SramRef, cast_buf: SramRef,
               segments: list[tuple[tuple[int, ...], int]], sq: int, source: str) -> None:
    """``result`` [rows, Dv] (f32; cast into ``cast_buf`` for another output dtype)
    stored head by head."""
    out = node.out
    dv = out.shape[-1]
    if out.dtype is not DType.f32:
        ctx.em.emit(vpu_engine(core), Cast(result, cast_buf), source)
        result = cast_buf
    for index, row in segments:
        box = tuple((i, i + 1) for i in index) + ((0, sq), (0, dv))
        store_box(ctx, out, stored_box(box, node.spec.out_heads_after_seq),
                  sub(result, (sq, dv), row * dv), core, source, "store")


def online_softmax_update(vec: Callable[[Op], None], s: SramRef, p: SramRef, axis: int,
                          m: SramRef, mn: SramRef, l_sum: SramRef, rm: SramRef,
                          c: SramRef, rs: SramRef) -> None:
    """A score tile ``s`` into the running softmax (keys along ``axis``): its maxima
    ``rm``, the new running maxima ``mn = max(m, rm)``, ``p = exp(s - mn)`` (``p`` may be
    ``s``), the factor ``c = exp(m - mn)`` the old sums shrink by, and
    ``l_sum = l_sum * c + sum(p)``. The caller rescales its output sums by ``c``."""
    vec(Reduce(ReduceKind.max, s, rm, axis))
    vec(Binary(BinaryKind.max, m, rm, mn))
    vec(Binary(BinaryKind.sub, s, mn, p))
    vec(Unary(UnaryKind.exp, p, p))
    vec(Binary(BinaryKind.sub, m, mn, c))
    vec(Unary(UnaryKind.exp, c, c))
    vec(Reduce(ReduceKind.sum, p, rs, axis))
    vec(Binary(BinaryKind.mul, l_sum, c, l_sum))
    vec(Binary(BinaryKind.add, l_sum, rs, l_sum))
