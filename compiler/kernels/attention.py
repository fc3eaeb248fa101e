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

Many small items of one step each (Swin's 49x49 windows) go in groups where their
DMA latencies bound them (:mod:`compiler.kernels.attention_items`): a group's Q, K, V,
mask and output move in one command each and its softmax is one pass over all its
rows, while each item keeps its own two matmuls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from archsim.config.names import sram_space
from archsim.errors import CapacityError
from compiler import graph as g
from compiler.emit import Arena
from compiler.graph import Value
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.kernels.attention_decode import decode_plan, lower_decode_attention
from compiler.kernels.attention_items import group_size, latency_bound, lead_box
from compiler.kernels.attention_layout import logical_shape
from compiler.kernels.attention_step import FlashStep
from compiler.kernels.common import Context, TileSteps, pipeline, unravel
from compiler.plan import Kernel

F32 = DType.f32


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
               int8_kv: bool = False, items: int = 1) -> int:
    """Scratchpad bytes of ``sets`` buffer sets; ``items``: items of one step each a
    step holds (``tq`` counts all their query rows, K and V are per item)."""
    per_step = (tk * d * item * 2 + tk * dv * item) * items + (tq * tk * 4 if masked else 0)
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
    arrays = ctx.config.core.matrix.arrays if ctx.options.multi_array else 1
    group = _group(ctx, node, q_shape, k_shape, tq, tk, d, dv, masked, arrays)
    sets = _deeper(ctx, sets, tq, tk, sq, sk, d, dv, item, masked, spec.kv_scales, arrays,
                   group)
    tq *= group
    bias = None
    patterns = _causal_patterns(spec, mask, sq, sk, tq, tk, sets)
    for d_offset, slot in patterns.items():
        name = f"{ctx.view(out).tensor}_causal_tile{slot}"
        ctx.em.tensor(name, (tq, tk), F32, "in")
        ctx.constants[name] = CausalBias(tq, tk, d_offset)
    if spec.causal and not patterns:
        bias_name = f"{ctx.view(out).tensor}_causal_bias"
        ctx.em.tensor(bias_name, (sq, sk), F32, "in")
        ctx.constants[bias_name] = CausalBias(sq, sk, spec.causal_offset)
        bias = bias_name
    batch = math.prod(batch_shape)
    tiles = [(bi, q0) for bi in range(0, batch, group) for q0 in range(0, sq, tq)]
    cores = min(ctx.cores, len(tiles))
    kv_dtype = node.inputs[1].dtype if spec.kv_scales else None
    bufs = [_allocate(ctx, c, tq, tk, d, dv, q.dtype, sets, masked, kv_dtype, group)
            for c in range(cores)]
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    tile_counts, step_counts, item_counts = [0] * cores, [0] * cores, [0] * cores
    deep = sets > ctx.sets
    previous: list[FlashStep | None] = [None] * cores
    loaded: list[set[int]] = [set() for _ in range(cores)]
    for t, (bi, q0) in enumerate(tiles):
        core = t % cores
        ts = tile_counts[core] % sets
        tile_counts[core] += 1
        q1 = min(q0 + tq, sq)
        index = unravel(bi, batch_shape)
        kv_index = _kv_index(index, q_shape, k_shape)
        lead = lead_box(bi, group, batch_shape) if group > 1 else \
            tuple((i, i + 1) for i in index)
        kv_lead = lead if group > 1 else tuple((i, i + 1) for i in kv_index)
        first_item = item_counts[core]
        item_counts[core] += group
        last_key = q1 - 1 + spec.causal_offset if spec.causal else sk
        k_tiles = [k0 for k0 in range(0, sk, tk) if k0 <= last_key]
        for s, k0 in enumerate(k_tiles):
            k1 = min(k0 + tk, sk)
            ss = step_counts[core] % sets
            step_counts[core] += 1
            needs_mask = mask is not None or (spec.causal and k1 - 1 > q0 + spec.causal_offset)
            # an item of one small step takes one array, the next item the next one: split
            # over all of them, each part would pay the weight load, fill and drain for a
            # few rows (Swin's 49-row windows: four 13-row parts of 510 cycles on tpu-v4)
            used = [(first_item + j) % arrays for j in range(arrays)] if group > 1 else \
                [(tile_counts[core] - 1) % arrays] if deep else range(arrays)
            job = FlashStep(ctx, node, core, bufs[core], ts, ss, lead, kv_lead,
                            (q0, q1), (k0, k1), s == 0, s == len(k_tiles) - 1,
                            needs_mask, mask, bias, used)
            if needs_mask and patterns:
                slot = patterns[q0 + spec.causal_offset - k0]
                job.pattern = (f"{ctx.view(out).tensor}_causal_tile{slot}", slot,
                               slot not in loaded[core])
                loaded[core].add(slot)
            if previous[core] is not None and sets > 1:  # its loads are issued first
                previous[core].next = job
            if deep:
                job.ahead, job.pending = max(1, min(sets - 1, -(-(arrays - 1) // group))), []
            previous[core] = job
            per_core[core].append(TileSteps(job.load, job.compute, job.finish))
    if deep:
        per_core = [_finish_late(steps) for steps in per_core]
    pipeline(per_core, sets - 1)


def _finish_late(steps: list[TileSteps]) -> list[TileSteps]:
    """Each step's finish (its output's division by the row sums, cast and store) issued
    after the next step's softmax: an item of one step finishes right after its P @ V,
    and on the in-order vector queue the next softmax would wait for that matmul."""
    def noop() -> None:
        return None

    out = []
    for i, step in enumerate(steps):
        before = steps[i - 1].store if i else noop

        def compute(step: TileSteps = step, before=before) -> None:
            step.compute()
            before()
        out.append(TileSteps(step.load, compute, noop))
    if steps:
        out.append(TileSteps(noop, steps[-1].store, noop))
    return out


def _deeper(ctx: Context, sets: int, tq: int, tk: int, sq: int, sk: int, d: int, dv: int,
            item: int, masked: bool, kv_scales: bool, arrays: int, group: int = 1) -> int:
    """More buffer sets for items of one small step each, fewer query rows than the
    core's arrays are tall together (Swin's 49x49 windows): such an item's chain (load,
    Q K^T, softmax, P V, store; two DRAM latencies and two matmuls' fill and drain) is
    several times longer than the busiest engine's share of it, so two sets leave the
    arrays and the vector unit waiting; up to ``DEEP_SETS``, as many as fit in the
    scratchpad."""
    if sets < 2 or sq > tq or sk > tk or sq >= arrays * ctx.config.core.matrix.rows:
        return sets
    wanted = DEEP_SETS
    while wanted > sets and _tile_bytes(tq * group, tk, d, dv, item, wanted, masked,
                                         kv_scales, group) > ctx.capacity:
        wanted -= 1
    return wanted


def _group(ctx: Context, node, q_shape: tuple[int, ...], k_shape: tuple[int, ...], tq: int,
           tk: int, d: int, dv: int, masked: bool, arrays: int) -> int:
    """Items of one small step each a step holds (:mod:`compiler.kernels.attention_items`):
    for the deep mode's items (:func:`_deeper`) whose DMA latencies outweigh their
    matmuls, whose heads match (no grouped-query sharing), with no causal tiles or
    quantized cache, as many as :func:`~compiler.kernels.attention_items.group_size`
    allows with ``GROUP_SETS`` buffer sets in the scratchpad; 1 otherwise."""
    spec: g.Attention = node.spec
    sq, sk = q_shape[-2], k_shape[-2]
    q = node.inputs[0]
    if (ctx.sets < 2 or sq > tq or sk > tk or sq >= arrays * ctx.config.core.matrix.rows
            or spec.causal or spec.kv_scales or q_shape[:-2] != k_shape[:-2]
            or node.out.dtype is not q.dtype):
        return 1
    if not latency_bound(ctx.config, sq, sk, d, dv, q.dtype, 4 if masked else 3):
        return 1

    def fits(group: int) -> bool:
        return _tile_bytes(tq * group, tk, d, dv, q.dtype.itemsize, GROUP_SETS, masked,
                           False, group) <= ctx.capacity

    return group_size(q_shape[:-2], ctx.cores, fits)


DEEP_SETS = 8
"""Buffer sets for attention items of one step (see :func:`_deeper`)."""
GROUP_SETS = 3
"""Buffer sets a group of such items (:func:`_group`) must leave room for at least."""


def _causal_patterns(spec: g.Attention, mask: Value | None, sq: int, sk: int, tq: int,
                     tk: int, slots: int) -> dict[int, int]:
    """Causal masking from tiles kept in the scratchpad: a tile's mask depends only on
    ``d = q0 + offset - k0`` (key j of the tile hidden from query i when j - i > d),
    so each distinct ``d`` among the tiles the diagonal crosses is loaded once per core
    into one of the ``slots`` mask buffers and read by every tile that has it, instead of
    a [Tq, Tk] slice of a whole [Sq, Sk] bias per tile (as many bytes as the tile's K
    and V again, at Tq = Tk = 4 D). {d: slot}, or {} (the bias is read per tile) when
    the attention is not causal, has an explicit mask, or has more distinct tiles than
    slots."""
    if not spec.causal or mask is not None:
        return {}
    found: dict[int, int] = {}
    for q0 in range(0, sq, tq):
        last_key = min(q0 + tq, sq) - 1 + spec.causal_offset
        for k0 in range(0, min(sk, last_key + 1), tk):
            if min(k0 + tk, sk) - 1 > q0 + spec.causal_offset:
                found.setdefault(q0 + spec.causal_offset - k0, len(found))
    return found if len(found) <= slots else {}


def _kv_index(index: tuple[int, ...], q_shape: tuple[int, ...],
              k_shape: tuple[int, ...]) -> tuple[int, ...]:
    if not index:
        return index
    heads_q, heads_k = q_shape[-3], k_shape[-3]
    return index[:-1] + (index[-1] // (heads_q // heads_k),)


def _allocate(ctx: Context, core: int, tq: int, tk: int, d: int, dv: int, dtype: DType,
              sets: int, masked: bool, kv_dtype: DType | None, items: int = 1
              ) -> dict[str, list[SramRef]]:
    """Per-core buffers; ``kv_dtype``: the stored dtype of a quantized cache (int8,
    fp8) whose raw tiles get their own buffers; ``items``: items a step holds, each
    with its own K and V tiles."""
    arena = Arena(sram_space(core), ctx.capacity)
    shapes: dict[str, tuple[tuple[int, ...], DType]] = {
        "q": ((tq, d), dtype), "k": ((items * tk, d), dtype),
        "kt": ((items * d, tk), dtype), "v": ((items * tk, dv), dtype),
        "s": ((tq, tk), F32), "p": ((tq, tk), F32),
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


