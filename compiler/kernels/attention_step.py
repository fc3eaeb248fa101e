"""One key tile of one query tile of the flash-attention kernel
(:mod:`compiler.kernels.attention`): its loads, its online-softmax update and, on the
last key tile, the normalized output's store."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from archsim.config.names import mxu_engine, vpu_engine
from compiler.emit import DramView
from compiler.graph import Value
from compiler.ir.dtypes import DType
from compiler.ir.operands import Scalar, SramRef
from compiler.ir.ops import (
    Binary,
    BinaryKind,
    Cast,
    Load,
    MatMul,
    Reduce,
    ReduceKind,
    Select,
    Transpose,
    Unary,
    UnaryKind,
    VCopy,
)
from compiler.kernels.attention_items import item_tile, transposed_load
from compiler.kernels.attention_layout import logical_shape, online_softmax_update, stored_box
from compiler.kernels.common import Box, Context
from compiler.kernels.matmul import load_transposed
from compiler.kernels.vector import load_box, store_box, sub, value_box

F32 = DType.f32
_LOWEST = float(np.finfo(np.float32).min)
"""The running max's floor under an explicit mask: a row whose first key tile is all
masked (left padding, a sliding window) starts from it, not -inf, so its scores give
exp(-inf) = 0 instead of NaN; a causal mask always shows query i key 0."""
_TINY = float(np.finfo(np.float32).tiny)
"""The row sum's floor under an explicit mask: a row it hides whole sums to 0."""


class FlashStep:
    """One key tile of one query tile: load, compute and (last step) finish. A step
    may hold several items of one step each (:mod:`compiler.kernels.attention_items`):
    ``lead`` is then their box of the lead dims, ``rows`` and ``keys`` each one's."""

    def __init__(self, ctx: Context, node, core: int, bufs: dict[str, list[SramRef]],
                 ts: int, ss: int, lead: Box, kv_lead: Box,
                 rows: tuple[int, int], keys: tuple[int, int], first: bool, last: bool,
                 needs_mask: bool, mask: Value | None, bias: str | None,
                 arrays: Sequence[int]) -> None:
        self.ctx, self.node, self.core = ctx, node, core
        self.bufs, self.ts, self.ss = bufs, ts, ss
        self.lead, self.kv_lead = lead, kv_lead
        self.rows, self.keys = rows, keys
        self.first, self.last = first, last
        self.needs_mask, self.mask, self.bias = needs_mask, mask, bias
        self.items = math.prod(hi - lo for lo, hi in lead)
        self.item_rows = rows[1] - rows[0]
        self.nq, self.nk = self.items * self.item_rows, keys[1] - keys[0]
        self.source = node.source
        self.vpu = vpu_engine(core)
        if self.items > 1:  # item j on the j-th of ``arrays`` (round)
            self.parts = [(mxu_engine(core, arrays[j % len(arrays)]), j * self.item_rows,
                           (j + 1) * self.item_rows, j) for j in range(self.items)]
        else:
            share = -(-self.nq // len(arrays))
            self.parts = [(mxu_engine(core, a), r, min(r + share, self.nq), 0)
                          for a, r in zip(arrays, range(0, self.nq, share))]
        """(array, first row, end row, item): each item's matmuls on an array, or one
        item's split by query rows over ``arrays``."""
        self.next: FlashStep | None = None
        self.ahead = 1
        """Steps after this one whose scores it issues during its softmax: the next one,
        or, for items of one small step each on several arrays, as many as there are
        other arrays (their loads are out already: at most the buffer sets but one). On
        one array more would queue ahead of this step's P @ V. A group of items issues
        them before its softmax, not after: it waits for all the group's scores."""
        self.pending: list | None = None
        """Vector work on this step's loaded tiles (Q's scaling, K's transpose) held back
        to be issued with its Q @ K^T, when set (items of one small step each): issued
        with the loads, sets - 1 steps early, it would hold the in-order vector queue
        until they land, ahead of the softmax of the steps before (Swin's 49x49 windows
        waited a DRAM latency per window). Otherwise it goes with the loads: a long
        item's next Q @ K^T is issued during this softmax and must not wait for it."""
        self.qk_issued = False
        self.pattern: tuple[str, int, bool] | None = None
        """A causal tile kept in the scratchpad: (its DRAM constant, its mask slot,
        whether this step loads it: the first on its core to use it)."""

    def buf(self, name: str, shape: tuple[int, ...], per_tile: bool = False) -> SramRef:
        return sub(self.bufs[name][self.ts if per_tile else self.ss], shape)

    def vec(self, op) -> None:
        self.ctx.em.emit(self.vpu, op, self.source)

    def prep(self, op) -> None:
        """Vector work on loaded tiles: now, or with the scores (:attr:`pending`)."""
        if self.pending is None:
            self.vec(op)
        else:
            self.pending.append(op)

    def load(self) -> None:
        ctx, node = self.ctx, self.node
        q, k, v = node.inputs[:3]
        stored = node.spec.heads_after_seq
        d, dv = q.shape[-1], v.shape[-1]
        if self.first:
            box = self.lead + (self.rows, (0, d))
            qbuf = self.buf("q", (self.nq, d), True)
            load_box(ctx, q, stored_box(box, stored[0]), qbuf, self.core, self.source,
                     "load")
            self.prep(Binary(BinaryKind.mul, qbuf, Scalar(node.spec.scale), qbuf))
        kv_box = self.kv_lead + (self.keys, (0, d))
        items = self.items
        kt = self.buf("kt", (items * d, self.nk))
        one = None if stored[1] or items == 1 else transposed_load(ctx, k, kv_box, kt, items)
        if node.spec.kv_scales:
            self._load_int8_kv(kv_box)
        elif one is not None:  # the DMA writes each item's K^T
            ctx.em.emit(ctx.em.dma(self.core, "load"), one, self.source)
        elif stored[1] or items > 1:  # load as stored, transpose on the vector engine
            kbuf = self.buf("k", (items * self.nk, d))
            load_box(ctx, k, stored_box(kv_box, stored[1]), kbuf, self.core, self.source,
                     "load")
            self.prep(self._transpose_k(kbuf, kt))
        else:  # the DMA writes K^T directly
            load_transposed(ctx, k, kv_box, kt, self.core, self.source)
        v_box = self.kv_lead + (self.keys, (0, dv))
        if not node.spec.kv_scales:
            load_box(ctx, v, stored_box(v_box, stored[2]),
                     self.buf("v", (items * self.nk, dv)), self.core, self.source, "load")
        if not self.needs_mask:
            return
        if self.pattern is not None:
            self._load_pattern()
            return
        mbuf = self.bufs["mask"][self.ss]
        if self.bias is not None:
            sq, sk = logical_shape(node.inputs[0], stored[0])[-2], logical_shape(k, stored[1])[-2]
            view = DramView(self.bias, (sq, sk), (sq, sk), F32)
            for ref, off in ctx.em.dram_pieces(view, (self.rows, self.keys)):
                ctx.em.emit(ctx.em.dma(self.core, "load"), Load(ref, sub(mbuf, ref.shape, off)),
                            self.source)
            return
        space_box = self.lead + (self.rows, self.keys)
        mask = self.mask
        box = value_box(mask, space_box)
        shape = tuple(hi - lo for lo, hi in box)
        own = box[len(box) - len(mask.shape):]
        target = SramRef(mbuf.space, mbuf.offset, shape, mask.dtype)
        load_box(ctx, mask, own, target, self.core, self.source, "load")

    def _transpose_k(self, kbuf: SramRef, kt: SramRef) -> Transpose:
        """K (as stored) into ``kt`` [items, D, Tk]: one vector op for the group, a
        stored [B, S, H, D] box read as [B, Tk, H, D]."""
        if self.items == 1:
            return Transpose(kbuf, kt, (1, 0))
        d = kbuf.shape[-1]
        if not self.node.spec.heads_after_seq[1]:
            src = SramRef(kbuf.space, kbuf.offset, (self.items, self.nk, d), kbuf.dtype)
            dst = SramRef(kt.space, kt.offset, (self.items, d, self.nk), kt.dtype)
            return Transpose(src, dst, (0, 2, 1))
        nb, nh = (hi - lo for lo, hi in self.kv_lead[-2:])
        src = SramRef(kbuf.space, kbuf.offset, (nb, self.nk, nh, d), kbuf.dtype)
        dst = SramRef(kt.space, kt.offset, (nb, nh, d, self.nk), kt.dtype)
        return Transpose(src, dst, (0, 2, 3, 1))

    def _load_int8_kv(self, k_box: tuple[tuple[int, int], ...]) -> None:
        """An int8 cache's tiles: K^T (by the DMA, or loaded and transposed on the
        vector engine when heads sit inside rows) and V as int8, and each key's K and V
        scale widened to an f32 row [1, Tk] for the score columns."""
        ctx, node, nk = self.ctx, self.node, self.nk
        stored = node.spec.heads_after_seq
        d, dv = node.inputs[0].shape[-1], node.inputs[2].shape[-1]
        kt = self.buf("kti", (d, nk))
        if stored[1]:
            raw = self.buf("ki", (nk, d))
            load_box(ctx, node.inputs[1], stored_box(k_box, stored[1]), raw, self.core,
                     self.source, "load")
            self.prep(Transpose(raw, kt, (1, 0)))
        else:
            load_transposed(ctx, node.inputs[1], k_box, kt, self.core, self.source)
        v_box = k_box[:-1] + ((0, dv),)
        load_box(ctx, node.inputs[2], stored_box(v_box, stored[2]), self.buf("vi", (nk, dv)),
                 self.core, self.source, "load")
        rows = self.kv_lead + (self.keys, (0, 1))
        for name, scale in (("k", node.inputs[-2]), ("v", node.inputs[-1])):
            column = self.buf(f"{name}s", (nk, 1))
            load_box(ctx, scale, rows, column, self.core, self.source, "load")
            self.prep(Cast(column, self.buf(f"{name}sf", (nk, 1))))

    def _scale_row(self, name: str) -> SramRef:
        """Per-key scales (f32) as a [1, Tk] row, broadcast over the query rows."""
        return self.buf(f"{name}sf", (1, self.nk))

    def _load_pattern(self) -> None:
        name, slot, first = self.pattern
        if not first:
            return
        dst = self.bufs["mask"][slot]
        view = DramView(name, dst.shape, dst.shape, F32)
        for ref, off in self.ctx.em.dram_pieces(view, tuple((0, n) for n in dst.shape)):
            self.ctx.em.emit(self.ctx.em.dma(self.core, "load"),
                             Load(ref, sub(dst, ref.shape, off)), self.source)

    def _mask_ref(self) -> SramRef:
        if self.pattern is not None:  # the top-left [nq, nk] of the resident tile
            slot = self.bufs["mask"][self.pattern[1]]
            width = slot.shape[1]
            return SramRef(slot.space, slot.offset, (self.nq, self.nk), F32,
                           None if self.nk == width else (width, 1))
        if self.bias is not None:
            return self.buf("mask", (self.nq, self.nk))
        mask = self.mask
        space_box = self.lead + (self.rows, self.keys)
        box = value_box(mask, space_box)
        shape = tuple(hi - lo for lo, hi in box)
        if self.items == 1:
            shape = shape[-2:]
        mbuf = self.bufs["mask"][self.ss]
        return SramRef(mbuf.space, mbuf.offset, shape, mask.dtype)

    def compute(self) -> None:
        v = self.node.inputs[2]
        dv = v.shape[-1]
        nq, nk = self.nq, self.nk
        s = self.buf("s", (nq, nk))
        self.issue_qk()
        if self.items > 1:  # the next groups' scores (and their Q's scaling) before this
            self._issue_ahead()  # softmax: after it, the arrays would wait for it whole
        if self.node.spec.kv_scales:  # S = (Q @ K_int^T) * k_scale, column by column
            self.vec(Binary(BinaryKind.mul, s, self._scale_row("k"), s))
        if self.needs_mask:
            mask = self._mask_ref()
            if self.items > 1:  # the group's scores by item, the mask broadcast over them
                lead = tuple(hi - lo for lo, hi in self.lead)
                s = SramRef(s.space, s.offset, lead + (self.item_rows, nk), s.dtype)
            if mask.dtype is DType.bool:
                self.vec(Select(mask, s, Scalar(float("-inf")), s))
            else:
                if mask.dtype is not s.dtype:  # a 16-bit mask: added in f32, as torch does
                    wide = self.buf("p", mask.shape)  # free until the softmax
                    self.vec(Cast(mask, wide))
                    mask = wide
                self.vec(Binary(BinaryKind.add, s, mask, s))
            s = self.buf("s", (nq, nk))
        m = self.buf("m", (nq, 1), True)
        mn = self.buf("mn", (nq, 1), True)
        l_sum = self.buf("l", (nq, 1), True)
        acc = self.buf("acc", (nq, dv), True)
        p = self.buf("p", (nq, nk))
        if self.first:
            self.vec(Reduce(ReduceKind.max, s, m, 1))
            if self.mask is not None:  # a row this tile hides whole: exp(-inf - -inf)
                self.vec(Binary(BinaryKind.max, m, Scalar(_LOWEST), m))
            self.vec(Binary(BinaryKind.sub, s, m, p))
            self.vec(Unary(UnaryKind.exp, p, p))
            self.vec(Reduce(ReduceKind.sum, p, l_sum, 1))
            self._pv(p, acc, nq, nk, dv, v.dtype)
            return
        rm, c, rs = self.buf("rm", (nq, 1)), self.buf("c", (nq, 1)), self.buf("rs", (nq, 1))
        online_softmax_update(self.vec, s, p, 1, m, mn, l_sum, rm, c, rs)
        self.vec(Binary(BinaryKind.mul, acc, c, acc))
        pv = self.buf("pv", (nq, dv))
        self._pv(p, pv, nq, nk, dv, v.dtype)
        self.vec(Binary(BinaryKind.add, acc, pv, acc))
        self.vec(VCopy(mn, m))

    def issue_qk(self) -> None:
        """``S = Q @ K^T`` for this key tile, once (the step before may issue it early)."""
        if self.qk_issued:
            return
        self.qk_issued = True
        for op in self.pending or ():
            self.vec(op)
        d, nq, nk = self.node.inputs[0].shape[-1], self.nq, self.nk
        kt = self.buf("kti" if self.node.spec.kv_scales else "kt", (self.items * d, nk))
        q, s = self.buf("q", (nq, d), True), self.buf("s", (nq, nk))
        stored = self.node.spec.heads_after_seq[0]
        for mxu, r0, r1, j in self.parts:
            if self.items > 1:
                a = item_tile(q, self.lead, j, self.item_rows, d, stored)
            else:
                a = sub(q, (r1 - r0, d), r0 * d)
            self.ctx.em.emit(mxu, MatMul(a, sub(kt, (d, nk), j * d * nk),
                                         sub(s, (r1 - r0, nk), r0 * nk)), self.source)

    def _issue_ahead(self) -> None:
        """The next :attr:`ahead` steps' scores, to run during this softmax."""
        step, ahead = self.next, self.ahead
        while step is not None and ahead > 0:
            step.issue_qk()
            step, ahead = step.next, ahead - 1

    def _pv(self, p: SramRef, dst: SramRef, nq: int, nk: int, dv: int, dtype: DType) -> None:
        lhs = p
        if self.node.spec.kv_scales:  # (P * v_scale) @ V_int, into the spent score tile
            lhs = self.buf("s", (nq, nk))
            self.vec(Binary(BinaryKind.mul, p, self._scale_row("v"), lhs))
            dtype = self.node.inputs[0].dtype  # V_int is widened to the query's dtype
        if dtype is not F32:
            cast = self.buf("pc", (nq, nk))
            self.vec(Cast(lhs, cast))
            lhs = cast
        self._issue_ahead()
        v = self.buf("vi" if self.node.spec.kv_scales else "v", (self.items * nk, dv))
        stored = self.node.spec.heads_after_seq[2]
        for mxu, r0, r1, j in self.parts:
            vj = item_tile(v, self.kv_lead, j, nk, dv, stored)
            self.ctx.em.emit(mxu, MatMul(sub(lhs, (r1 - r0, nk), r0 * nk), vj,
                                         sub(dst, (r1 - r0, dv), r0 * dv)), self.source)

    def finish(self) -> None:
        if not self.last:
            return
        out = self.node.out
        dv = out.shape[-1]
        acc = self.buf("acc", (self.nq, dv), True)
        l_sum = self.buf("l", (self.nq, 1), True)
        if self.mask is not None:  # a row the mask hides whole summed no key: its zero
            # output (torch's safe softmax) over the smallest normal, not 0 / 0
            self.vec(Binary(BinaryKind.max, l_sum, Scalar(_TINY), l_sum))
        self.vec(Binary(BinaryKind.div, acc, l_sum, acc))
        result = acc
        stored = self.node.spec.out_heads_after_seq
        heads = self.lead[-1][1] - self.lead[-1][0]
        if stored and self.items > 1 and heads > 1:
            result = self._heads_after_rows(acc, dv, heads, out.dtype)
        elif out.dtype is not F32:
            result = self.buf("o", (self.nq, dv), True)
            self.vec(Cast(acc, result))
        box = self.lead + (self.rows, (0, dv))
        store_box(self.ctx, out, stored_box(box, stored), result, self.core, self.source,
                  "store")

    def _heads_after_rows(self, acc: SramRef, dv: int, heads: int, dtype: DType) -> SramRef:
        """The group's item-major output [B, H, Sq, Dv] written (cast to ``dtype``) in
        the stored order [B, Sq, H, Dv] by one vector op, so one DMA stores it."""
        rows, outer = self.item_rows, self.items // heads
        o = self.buf("o", (self.nq, dv), True)
        o = SramRef(o.space, o.offset, o.shape, dtype)
        src = SramRef(acc.space, acc.offset, (outer, heads, rows, dv), acc.dtype)
        dst = SramRef(o.space, o.offset, (outer, heads, rows, dv), dtype,
                      (rows * heads * dv, dv, heads * dv, 1))
        self.vec(Cast(src, dst) if dtype is not F32 else VCopy(src, dst))
        return o
