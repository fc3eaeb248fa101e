"""One key tile of decode-shaped attention (:mod:`compiler.kernels.attention_decode`):
its loads, ``S^T = K Q^T`` and ``P V`` with a key chunk per array, the online softmax
over the key axis, and the output (or, for split-K, the split's partials)."""

from __future__ import annotations

from archsim.config.names import mxu_engine, vpu_engine
from compiler.ir.dtypes import DType
from compiler.ir.operands import Scalar, SramRef
from compiler.ir.ops import Binary, BinaryKind, Cast, MatMul, Reduce, ReduceKind, Unary, \
    UnaryKind, VCopy
from compiler.kernels.attention_combine import Partials
from compiler.kernels.attention_layout import (
    head_segments,
    online_softmax_update,
    store_rows,
    stored_box,
)
from compiler.kernels.common import Context, ceil_div
from compiler.kernels.vector import load_box, sub

F32 = DType.f32


def key_chunks(keys: int, arrays: int, fold: int) -> list[tuple[int, int]]:
    """``keys`` cut into at most ``arrays`` chunks of whole ``fold``-key folds (the last
    may be partial), the folds shared out as evenly as they go."""
    folds = ceil_div(keys, fold)
    base, extra = divmod(folds, arrays)
    out, start = [], 0
    for a in range(arrays):
        n = base + (1 if a < extra else 0)
        if n == 0:
            break
        end = min(keys, start + n * fold)
        out.append((start, end))
        start = end
    return out


def transposed(ref: SramRef, rows: int, cols: int) -> SramRef:
    """A dense [rows, cols] buffer read as its [cols, rows] transpose (a strided view
    the arrays read directly)."""
    if cols == 1 or rows == 1:
        return SramRef(ref.space, ref.offset, (cols, rows), ref.dtype)
    return SramRef(ref.space, ref.offset, (cols, rows), ref.dtype, (1, cols))


class DecodeStep:
    """One key tile of one item (or of one split of it): load, compute, finish."""

    def __init__(self, ctx: Context, node, core: int, bufs: dict[str, list[SramRef]],
                 ts: int, ss: int, plan, kv_index: tuple[int, ...],
                 keys: tuple[int, int], first: bool, last: bool, arrays: int,
                 partials: Partials | None, unit: tuple[int, int]) -> None:
        self.ctx, self.node, self.core, self.bufs = ctx, node, core, bufs
        self.ts, self.ss, self.plan = ts, ss, plan
        self.kv_index, self.keys = kv_index, keys
        self.first, self.last = first, last
        self.partials, self.unit = partials, unit
        self.nk = keys[1] - keys[0]
        self.source = node.source
        self.vpu = vpu_engine(core)
        fold = ctx.config.core.matrix.rows
        self.parts = [(mxu_engine(core, a), c0, c1)
                      for a, (c0, c1) in enumerate(key_chunks(self.nk, arrays, fold))]
        self.next: DecodeStep | None = None
        """The next tile on this core (issues its ``Q K^T`` early, emits our tail)."""
        self.prev: DecodeStep | None = None
        """The previous tile on this core, whose tail this one emits."""
        self.qk_issued = False
        self.partial_sums: list[SramRef] = []
        """The arrays' partial ``P V`` not yet added into the accumulator."""

    v_name = "v"
    """The buffer ``P V`` reads V from."""

    def buf(self, name: str, shape: tuple[int, ...], per_tile: bool = False) -> SramRef:
        return sub(self.bufs[name][self.ts if per_tile else self.ss], shape)

    def vec(self, op) -> None:
        self.ctx.em.emit(self.vpu, op, self.source)

    def head_segments(self) -> list[tuple[tuple[int, ...], int]]:
        return head_segments(self.kv_index, self.plan.group, self.plan.rows // self.plan.group)

    def load(self) -> None:
        ctx, node, spec = self.ctx, self.node, self.node.spec
        q = node.inputs[0]
        stored = spec.heads_after_seq
        d = q.shape[-1]
        rows = self.plan.rows
        if self.first:
            qbuf = self.buf("q", (rows, d), True)
            sq = rows // self.plan.group
            for index, row in self.head_segments():
                box = tuple((i, i + 1) for i in index) + ((0, sq), (0, d))
                load_box(ctx, q, stored_box(box, stored[0]), sub(qbuf, (sq, d), row * d),
                         self.core, self.source, "load")
        self.load_kv(tuple((i, i + 1) for i in self.kv_index))

    def load_kv(self, lead: tuple[tuple[int, int], ...]) -> None:
        """This tile's K and V, as stored."""
        k, v = self.node.inputs[1:3]
        stored = self.node.spec.heads_after_seq
        d, dv = k.shape[-1], v.shape[-1]
        load_box(self.ctx, k, stored_box(lead + (self.keys, (0, d)), stored[1]),
                 self.buf("k", (self.nk, d)), self.core, self.source, "load")
        load_box(self.ctx, v, stored_box(lead + (self.keys, (0, dv)), stored[2]),
                 self.buf("v", (self.nk, dv)), self.core, self.source, "load")

    def issue_qk(self) -> None:
        """``S^T = K Q^T``, a key chunk per array (once; the step before may issue it
        early, so it runs during that step's softmax)."""
        if self.qk_issued:
            return
        self.qk_issued = True
        d, rows = self.node.inputs[0].shape[-1], self.plan.rows
        k, s = self.buf("k", (self.nk, d)), self.buf("s", (self.nk, rows))
        q_t = transposed(self.buf("q", (rows, d), True), rows, d)
        for mxu, c0, c1 in self.parts:
            self.ctx.em.emit(mxu, MatMul(sub(k, (c1 - c0, d), c0 * d), q_t,
                                         sub(s, (c1 - c0, rows), c0 * rows)), self.source)

    def compute(self) -> None:
        """The online softmax over this tile's keys, then ``P V``. The previous tile's
        tail (its partial sums, and its output if it ended an item) is emitted after
        this softmax: the vector engine runs in order, and that tail waits for the
        previous ``P V``, which would keep this softmax, and so this ``P V``, waiting."""
        dv, rows, nk = self.node.inputs[2].shape[-1], self.plan.rows, self.nk
        s = self.buf("s", (nk, rows))
        self.issue_qk()
        self.scale_scores(s)
        m, l_sum = self.buf("m", (1, rows), True), self.buf("l", (1, rows), True)
        acc = self.buf("acc", (rows, dv), True)
        if self.first:
            self.vec(Reduce(ReduceKind.max, s, m, 0))
            self.vec(Binary(BinaryKind.sub, s, m, s))
            self.vec(Unary(UnaryKind.exp, s, s))
            self.vec(Reduce(ReduceKind.sum, s, l_sum, 0))
            self._previous_tail()
            self._pv(s, acc, add_to=False)
            return
        rm, mn = self.buf("rm", (1, rows)), self.buf("mn", (1, rows))
        c, rs = self.buf("c", (1, rows)), self.buf("rs", (1, rows))
        online_softmax_update(self.vec, s, s, 0, m, mn, l_sum, rm, c, rs)
        self._previous_tail()  # its sums into acc come before acc is rescaled
        self.vec(Binary(BinaryKind.mul, acc, sub(c, (rows, 1)), acc))  # [1, M] as [M, 1]
        self._pv(s, acc, add_to=True)
        self.vec(VCopy(mn, m))

    def _previous_tail(self) -> None:
        if self.prev is not None:
            self.prev.emit_tail()
            self.prev = None

    def scale_scores(self, s: SramRef) -> None:
        """The scores times the softmax scale (a quantized cache: and its K scales).
        Done here, on the scores, rather than on the queries after their load: the
        vector engine runs in order, and an op waiting for a load issued steps ahead
        (``Q K^T`` is issued during the previous tile's softmax) would hold it up."""
        self.vec(Binary(BinaryKind.mul, s, Scalar(self.node.spec.scale), s))

    def scale_probs(self, p: SramRef) -> None:
        """What P needs before ``P V`` (a quantized cache: its V scales)."""

    def _pv(self, p: SramRef, acc: SramRef, add_to: bool) -> None:
        """``acc (+)= P V``: each array multiplies its key chunk, the partials summed."""
        v_in = self.node.inputs[2]
        dv, rows, nk = v_in.shape[-1], self.plan.rows, self.nk
        self.scale_probs(p)
        lhs = p
        if v_in.dtype is not F32:
            lhs = self.buf("pc", (nk, rows))
            self.vec(Cast(p, lhs))
        if self.next is not None:
            self.next.issue_qk()
        v = self.buf(self.v_name, (nk, dv))
        pv = self.bufs["pv"][self.ss]
        for a, (mxu, c0, c1) in enumerate(self.parts):
            dst = acc if a == 0 and not add_to else sub(pv, (rows, dv), a * rows * dv)
            if dst is not acc:
                self.partial_sums.append(dst)
            self.ctx.em.emit(mxu, MatMul(_p_chunk(lhs, rows, c0, c1),
                                         sub(v, (c1 - c0, dv), c0 * dv), dst), self.source)

    def finish(self) -> None:
        """The tail now if no later tile on this core emits it."""
        if self.next is None:
            self.emit_tail()

    def emit_tail(self) -> None:
        """The arrays' partial ``P V`` summed into the accumulator; on an item's last tile
        the output normalized and stored (or the split's partials stored)."""
        dv, rows = self.node.inputs[2].shape[-1], self.plan.rows
        acc = self.buf("acc", (rows, dv), True)
        for partial in self.partial_sums:
            self.vec(Binary(BinaryKind.add, acc, partial, acc))
        if not self.last:
            return
        m, l_sum = self.buf("m", (1, rows), True), self.buf("l", (1, rows), True)
        if self.partials is not None:
            self.partials.store(self.ctx, self.core, self.unit, acc, m, l_sum, self.source)
            return
        self.vec(Binary(BinaryKind.div, acc, sub(l_sum, (rows, 1)), acc))
        store_rows(self.ctx, self.node, self.core, acc, self.buf("o", (rows, dv), True),
                   self.head_segments(), rows // self.plan.group, self.source)


def _p_chunk(p: SramRef, rows: int, c0: int, c1: int) -> SramRef:
    """Keys ``c0:c1`` of P^T [Tk, M] read as P [M, c1 - c0] (a strided view)."""
    offset = p.offset + c0 * rows * p.dtype.itemsize
    if rows == 1:
        return SramRef(p.space, offset, (1, c1 - c0), p.dtype)
    return SramRef(p.space, offset, (rows, c1 - c0), p.dtype, (1, rows))
