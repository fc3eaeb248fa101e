"""Flash-attention kernel: the score matrix is never materialized.

Per (batch, query tile) on a core: load Q once and scale it (a [Tq, D] pass instead of
one over every [Tq, Tk] score tile); for each key tile (skipping tiles a
causal mask hides entirely) load K (transposed on the vector engine) and V, compute
``S = (Q * scale) @ K^T`` on the matrix engine, apply the mask, and update the running
row max ``m``, row sum ``l`` and accumulator ``acc`` (online softmax):

    m' = max(m, rowmax(S));  P = exp(S - m');  c = exp(m - m')
    l = l * c + rowsum(P);   acc = acc * c + P @ V

then store ``acc / l``. An int8 or fp8 KV cache (``kv_scales``) moves at one byte an
element: its K^T and V tiles go to the arrays as stored (widened in their input path, as
weight-only int8 weights are) and the per-key scales are applied to the score columns instead,
``S = (Q @ K_int^T) * k_scale`` and ``P @ V = (P * v_scale) @ V_int``: a [Tq, Tk] pass
each on the vector engine rather than dequantizing [Tk, D] tiles. Only ``[Tq, Tk]`` score tiles live in SRAM. Each matmul is
split by query rows over the core's systolic arrays, and the next key tile's
``Q @ K^T`` is issued before this one's ``P @ V``, so it runs while the vector engine
does this tile's softmax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from archsim.config.names import mxu_engine, sram_space, vpu_engine
from archsim.errors import CapacityError
from compiler import graph as g
from compiler.emit import Arena
from compiler.graph import Value
from compiler.ir.dtypes import DType
from compiler.ir.operands import Scalar, SramRef
from compiler.ir.ops import (
    Binary,
    BinaryKind,
    Cast,
    MatMul,
    Reduce,
    ReduceKind,
    Select,
    Transpose,
    Unary,
    UnaryKind,
    VCopy,
)
from compiler.kernels.attention_decode import decode_plan, lower_decode_attention
from compiler.kernels.attention_layout import logical_shape, stored_box
from compiler.kernels.common import Context, TileSteps, pipeline, unravel
from compiler.kernels.matmul import load_transposed
from compiler.kernels.vector import load_box, store_box, sub, value_box
from compiler.plan import Kernel

F32 = DType.f32
_LOWEST = float(np.finfo(np.float32).min)
"""The running max's floor under an explicit mask: a row whose first key tile is all
masked (left padding, a sliding window) starts from it, not -inf, so its scores give
exp(-inf) = 0 instead of NaN; a causal mask always shows query i key 0."""


@dataclass(frozen=True)
class CausalBias:
    """A [Sq, Sk] additive causal mask (0 where key j <= query i + offset, -inf
    elsewhere), materialized only for functional runs."""

    sq: int
    sk: int
    offset: int = 0

    def array(self) -> np.ndarray:
        i = np.arange(self.sq)[:, None]
        j = np.arange(self.sk)[None, :]
        return np.where(j > i + self.offset, -np.inf, 0.0).astype(np.float32)


def _tile_bytes(tq: int, tk: int, d: int, dv: int, item: int, sets: int, masked: bool,
               int8_kv: bool = False) -> int:
    per_step = tk * d * item * 2 + tk * dv * item + (tq * tk * 4 if masked else 0)
    if int8_kv:  # int8 K (as loaded and transposed), V, the scales and their f32 rows
        per_step += tk * (2 * d + dv) + 2 * tk * (item + 4)
    scores = tq * tk * 4 * 2 + tq * tk * item + tq * dv * 4
    per_tile = tq * d * item + tq * dv * 4 + tq * dv * item + 6 * tq * 4
    return sets * (per_step + scores + per_tile) + 64 * 40


def lower_attention_kernel(ctx: Context, kernel: Kernel) -> None:
    node = kernel.anchor
    spec: g.Attention = node.spec
    q_shape, k_shape, v_shape = (logical_shape(x, stored) for x, stored in
                                 zip(node.inputs[:3], spec.heads_after_seq))
    mask: Value | None = g.attention_mask(node)
    q = node.inputs[0]
    out = node.out
    sq, d = q_shape[-2:]
    sk, dv = v_shape[-2:]
    batch_shape = q_shape[:-2]
    item = q.dtype.itemsize
    sets = ctx.sets
    masked = spec.causal or mask is not None
    plan = decode_plan(ctx, node, q_shape, k_shape, v_shape, masked)
    if plan is not None:
        lower_decode_attention(ctx, kernel, plan, (q_shape, k_shape, v_shape))
        return
    sizes = (512, 256, 128, 64, 32, 16, 8, 4, 2, 1)
    fitting = [(min(a, sq), min(b, sk)) for a in sizes for b in sizes
               if _tile_bytes(min(a, sq), min(b, sk), d, dv, item, sets, masked,
                              spec.kv_scales) <= ctx.capacity]
    if not fitting:
        raise CapacityError(f"{node.source}: no attention tile fits {ctx.capacity} B")
    tq, tk = max(fitting, key=lambda t: (t[0] * t[1], t[0]))
    bias = None
    if spec.causal:
        bias_name = f"{ctx.view(out).tensor}_causal_bias"
        ctx.em.tensor(bias_name, (sq, sk), F32, "in")
        ctx.constants[bias_name] = CausalBias(sq, sk, spec.causal_offset)
        bias = bias_name
    batch = math.prod(batch_shape)
    tiles = [(bi, q0) for bi in range(batch) for q0 in range(0, sq, tq)]
    cores = min(ctx.cores, len(tiles))
    kv_dtype = node.inputs[1].dtype if spec.kv_scales else None
    bufs = [_allocate(ctx, c, tq, tk, d, dv, q.dtype, sets, masked, kv_dtype)
            for c in range(cores)]
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    tile_counts, step_counts = [0] * cores, [0] * cores
    arrays = ctx.config.core.matrix.arrays if ctx.options.multi_array else 1
    previous: list[_Step | None] = [None] * cores
    for t, (bi, q0) in enumerate(tiles):
        core = t % cores
        ts = tile_counts[core] % sets
        tile_counts[core] += 1
        q1 = min(q0 + tq, sq)
        index = unravel(bi, batch_shape)
        kv_index = _kv_index(index, q_shape, k_shape)
        last_key = q1 - 1 + spec.causal_offset if spec.causal else sk
        k_tiles = [k0 for k0 in range(0, sk, tk) if k0 <= last_key]
        for s, k0 in enumerate(k_tiles):
            k1 = min(k0 + tk, sk)
            ss = step_counts[core] % sets
            step_counts[core] += 1
            needs_mask = mask is not None or (spec.causal and k1 - 1 > q0 + spec.causal_offset)
            job = _Step(ctx, node, core, bufs[core], ts, ss, index, kv_index, (q0, q1),
                        (k0, k1), s == 0, s == len(k_tiles) - 1, needs_mask, mask, bias,
                        arrays)
            if previous[core] is not None and sets > 1:  # its loads are issued first
                previous[core].next = job
            previous[core] = job
            per_core[core].append(TileSteps(job.load, job.compute, job.finish))
    pipeline(per_core, sets - 1)


def _kv_index(index: tuple[int, ...], q_shape: tuple[int, ...],
              k_shape: tuple[int, ...]) -> tuple[int, ...]:
    if not index:
        return index
    heads_q, heads_k = q_shape[-3], k_shape[-3]
    return index[:-1] + (index[-1] // (heads_q // heads_k),)


def _allocate(ctx: Context, core: int, tq: int, tk: int, d: int, dv: int, dtype: DType,
              sets: int, masked: bool, kv_dtype: DType | None
              ) -> dict[str, list[SramRef]]:
    """Per-core buffers; ``kv_dtype``: the stored dtype of a quantized cache (int8,
    fp8) whose raw tiles get their own buffers."""
    arena = Arena(sram_space(core), ctx.capacity)
    shapes: dict[str, tuple[tuple[int, ...], DType]] = {
        "q": ((tq, d), dtype), "k": ((tk, d), dtype), "kt": ((d, tk), dtype),
        "v": ((tk, dv), dtype), "s": ((tq, tk), F32), "p": ((tq, tk), F32),
        "pc": ((tq, tk), dtype), "pv": ((tq, dv), F32), "acc": ((tq, dv), F32),
        "o": ((tq, dv), dtype), "m": ((tq, 1), F32), "mn": ((tq, 1), F32),
        "rm": ((tq, 1), F32), "l": ((tq, 1), F32), "c": ((tq, 1), F32),
        "rs": ((tq, 1), F32),
    }
    if masked:
        shapes["mask"] = ((tq, tk), F32)
    if kv_dtype is not None:
        shapes.update(ki=((tk, d), kv_dtype), kti=((d, tk), kv_dtype),
                      vi=((tk, dv), kv_dtype), ks=((tk, 1), dtype), vs=((tk, 1), dtype),
                      ksf=((1, tk), F32), vsf=((1, tk), F32))
    return {name: [arena.alloc(shape, dt, f"attention {name}") for _ in range(sets)]
            for name, (shape, dt) in shapes.items()}


class _Step:
    """One key tile of one query tile: load, compute and (last step) finish."""

    def __init__(self, ctx: Context, node, core: int, bufs: dict[str, list[SramRef]],
                 ts: int, ss: int, index: tuple[int, ...], kv_index: tuple[int, ...],
                 rows: tuple[int, int], keys: tuple[int, int], first: bool, last: bool,
                 needs_mask: bool, mask: Value | None, bias: str | None, arrays: int) -> None:
        self.ctx, self.node, self.core = ctx, node, core
        self.bufs, self.ts, self.ss = bufs, ts, ss
        self.index, self.kv_index = index, kv_index
        self.rows, self.keys = rows, keys
        self.first, self.last = first, last
        self.needs_mask, self.mask, self.bias = needs_mask, mask, bias
        self.nq, self.nk = rows[1] - rows[0], keys[1] - keys[0]
        self.source = node.source
        self.vpu = vpu_engine(core)
        share = -(-self.nq // arrays)
        self.parts = [(mxu_engine(core, a), r, min(r + share, self.nq))
                      for a, r in enumerate(range(0, self.nq, share))]
        """(array, first row, end row): each matmul split by query rows."""
        self.next: _Step | None = None
        self.qk_issued = False

    def buf(self, name: str, shape: tuple[int, ...], per_tile: bool = False) -> SramRef:
        return sub(self.bufs[name][self.ts if per_tile else self.ss], shape)

    def vec(self, op) -> None:
        self.ctx.em.emit(self.vpu, op, self.source)

    def load(self) -> None:
        ctx, node = self.ctx, self.node
        q, k, v = node.inputs[:3]
        stored = node.spec.heads_after_seq
        d, dv = q.shape[-1], v.shape[-1]
        if self.first:
            box = tuple((i, i + 1) for i in self.index) + (self.rows, (0, d))
            qbuf = self.buf("q", (self.nq, d), True)
            load_box(ctx, q, stored_box(box, stored[0]), qbuf, self.core, self.source,
                     "load")
            self.vec(Binary(BinaryKind.mul, qbuf, Scalar(node.spec.scale), qbuf))
        kv_box = tuple((i, i + 1) for i in self.kv_index) + (self.keys, (0, d))
        kt = self.buf("kt", (d, self.nk))
        if node.spec.kv_scales:
            self._load_int8_kv(kv_box)
        elif stored[1]:  # heads inside rows: load, then transpose on the vector engine
            kbuf = self.buf("k", (self.nk, d))
            load_box(ctx, k, stored_box(kv_box, stored[1]), kbuf, self.core, self.source,
                     "load")
            self.vec(Transpose(kbuf, kt, (1, 0)))
        else:  # the DMA writes K^T directly
            load_transposed(ctx, k, kv_box, kt, self.core, self.source)
        v_box = tuple((i, i + 1) for i in self.kv_index) + (self.keys, (0, dv))
        if not node.spec.kv_scales:
            load_box(ctx, v, stored_box(v_box, stored[2]), self.buf("v", (self.nk, dv)),
                     self.core, self.source, "load")
        if not self.needs_mask:
            return
        mbuf = self.bufs["mask"][self.ss]
        if self.bias is not None:
            from compiler.emit import DramView
            sq, sk = logical_shape(node.inputs[0], stored[0])[-2], logical_shape(k, stored[1])[-2]
            view = DramView(self.bias, (sq, sk), (sq, sk), F32)
            for ref, off in ctx.em.dram_pieces(view, (self.rows, self.keys)):
                from compiler.ir.ops import Load
                ctx.em.emit(ctx.em.dma(self.core, "load"), Load(ref, sub(mbuf, ref.shape, off)),
                            self.source)
            return
        space_box = tuple((i, i + 1) for i in self.index) + (self.rows, self.keys)
        mask = self.mask
        box = value_box(mask, space_box)
        shape = tuple(hi - lo for lo, hi in box)
        own = box[len(box) - len(mask.shape):]
        target = SramRef(mbuf.space, mbuf.offset, shape, mask.dtype)
        load_box(ctx, mask, own, target, self.core, self.source, "load")

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
            self.vec(Transpose(raw, kt, (1, 0)))
        else:
            load_transposed(ctx, node.inputs[1], k_box, kt, self.core, self.source)
        v_box = k_box[:-1] + ((0, dv),)
        load_box(ctx, node.inputs[2], stored_box(v_box, stored[2]), self.buf("vi", (nk, dv)),
                 self.core, self.source, "load")
        rows = tuple((i, i + 1) for i in self.kv_index) + (self.keys, (0, 1))
        for name, scale in (("k", node.inputs[-2]), ("v", node.inputs[-1])):
            column = self.buf(f"{name}s", (nk, 1))
            load_box(ctx, scale, rows, column, self.core, self.source, "load")
            self.vec(Cast(column, self.buf(f"{name}sf", (nk, 1))))

    def _scale_row(self, name: str) -> SramRef:
        """Per-key scales (f32) as a [1, Tk] row, broadcast over the query rows."""
        return self.buf(f"{name}sf", (1, self.nk))

    def _mask_ref(self) -> SramRef:
        if self.bias is not None:
            return self.buf("mask", (self.nq, self.nk))
        mask = self.mask
        space_box = tuple((i, i + 1) for i in self.index) + (self.rows, self.keys)
        box = value_box(mask, space_box)
        shape = tuple(hi - lo for lo, hi in box)[-2:]
        mbuf = self.bufs["mask"][self.ss]
        return SramRef(mbuf.space, mbuf.offset, shape, mask.dtype)

    def compute(self) -> None:
        v = self.node.inputs[2]
        dv = v.shape[-1]
        nq, nk = self.nq, self.nk
        s = self.buf("s", (nq, nk))
        self.issue_qk()
        if self.node.spec.kv_scales:  # S = (Q @ K_int^T) * k_scale, column by column
            self.vec(Binary(BinaryKind.mul, s, self._scale_row("k"), s))
        if self.needs_mask:
            mask = self._mask_ref()
            if mask.dtype is DType.bool:
                self.vec(Select(mask, s, Scalar(float("-inf")), s))
            else:
                self.vec(Binary(BinaryKind.add, s, mask, s))
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
        self.vec(Reduce(ReduceKind.max, s, rm, 1))
        self.vec(Binary(BinaryKind.max, m, rm, mn))
        self.vec(Binary(BinaryKind.sub, s, mn, p))
        self.vec(Unary(UnaryKind.exp, p, p))
        self.vec(Binary(BinaryKind.sub, m, mn, c))
        self.vec(Unary(UnaryKind.exp, c, c))
        self.vec(Reduce(ReduceKind.sum, p, rs, 1))
        self.vec(Binary(BinaryKind.mul, l_sum, c, l_sum))
        self.vec(Binary(BinaryKind.add, l_sum, rs, l_sum))
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
        d, nq, nk = self.node.inputs[0].shape[-1], self.nq, self.nk
        kt = self.buf("kti" if self.node.spec.kv_scales else "kt", (d, nk))
        q, s = self.buf("q", (nq, d), True), self.buf("s", (nq, nk))
        for mxu, r0, r1 in self.parts:
            self.ctx.em.emit(mxu, MatMul(sub(q, (r1 - r0, d), r0 * d), kt,
                                         sub(s, (r1 - r0, nk), r0 * nk)), self.source)

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
        if self.next is not None:  # the next tile's scores run during this softmax
            self.next.issue_qk()
        v = self.buf("vi" if self.node.spec.kv_scales else "v", (nk, dv))
        for mxu, r0, r1 in self.parts:
            self.ctx.em.emit(mxu, MatMul(sub(lhs, (r1 - r0, nk), r0 * nk), v,
                                         sub(dst, (r1 - r0, dv), r0 * dv)), self.source)

    def finish(self) -> None:
        if not self.last:
            return
        out = self.node.out
        dv = out.shape[-1]
        acc = self.buf("acc", (self.nq, dv), True)
        l_sum = self.buf("l", (self.nq, 1), True)
        self.vec(Binary(BinaryKind.div, acc, l_sum, acc))
        result = acc
        if out.dtype is not F32:
            result = self.buf("o", (self.nq, dv), True)
            self.vec(Cast(acc, result))
        box = tuple((i, i + 1) for i in self.index) + (self.rows, (0, dv))
        store_box(self.ctx, out, stored_box(box, self.node.spec.out_heads_after_seq), result,
                  self.core, self.source, "store")
