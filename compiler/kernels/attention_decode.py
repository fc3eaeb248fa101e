"""Decode-shaped attention: a few query rows per K/V head, the KV cache streamed once.

A decode step's attention has one query row per head (``Sq`` small): the flash kernel's
``Q @ K^T`` and ``P @ V`` are then GEMVs, and split by query rows they run on one
array, which caps the KV stream at what one array takes in (a 128 x 128 tile of
weights every 128 cycles) and leaves the core's other arrays idle. This kernel maps it
as the KV stream it is:

- **one item per (batch, K/V head)**: all ``G`` query heads of a K/V head (grouped-query
  attention) and their ``Sq`` rows are the item's ``M = G * Sq`` query rows, so every
  cached K/V byte is read once per step, whatever the grouping;
- **keys streamed through all arrays**: each key tile is cut into fold-aligned chunks, one
  per array, and computed as ``S^T = K Q^T`` (the queries ``Q^T`` [D, M] stationary, the
  K chunk streamed in as stored, no transpose; the softmax scale applied to ``S^T``) and ``O += P V`` (the V chunk
  stationary), the arrays' partial ``P V`` summed on the vector engine; the softmax
  runs over the key axis of ``S^T`` [Tk, M] (online, as in the flash kernel);
- **buffers deep enough to cover the DRAM latency**: as many K/V tile sets as keep the
  bandwidth-delay product of a core's DRAM share in flight;
- **split-K over cores (flash-decoding)**: when the items do not keep every core busy
  (few sequences or heads per chip), each item's keys are split over cores; each split
  stores its unnormalized output, row max and row sum, and a combine step rescales and
  sums them: ``O = sum_i e^{m_i - m} acc_i / sum_i e^{m_i - m} l_i``.

Applies (see :func:`decode_plan`) without a mask or causal masking, to more keys than
one array fold; an int8/fp8 cache takes :mod:`compiler.kernels.attention_decode_quant`'s
step. The flash kernel (:mod:`compiler.kernels.attention`) takes everything else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from archsim.config.model import NpuConfig
from archsim.config.names import sram_space
from compiler.emit import Arena
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.kernels.attention_combine import Partials, combine_shapes, lower_combines
from compiler.kernels.attention_decode_quant import QuantizedDecodeStep, quantized_shapes
from compiler.kernels.attention_decode_step import DecodeStep, key_chunks
from compiler.kernels.common import Context, TileSteps, ceil_div, pipeline, unravel
from compiler.plan import Kernel

__all__ = ["DecodePlan", "decode_plan", "key_chunks", "lower_decode_attention"]

F32 = DType.f32

SLACK_BYTES = 64 * 40
"""Allocation slack per core (the arena's alignment)."""


@dataclass(frozen=True)
class DecodePlan:
    """How a decode-shaped attention is mapped (what :func:`decode_plan` chose)."""

    group: int
    """Query heads per K/V head."""
    rows: int
    """Query rows per item: ``group * Sq``."""
    items: int
    """(batch, K/V head) pairs."""
    splits: int
    """Key ranges per item, on different cores (1: no combine step)."""
    key_tile: int
    """Keys per step (cut into one chunk per array)."""
    sets: int
    """K/V tile sets in flight per core."""

    def describe(self) -> str:
        return (f"decode attention: {self.items} (batch, kv head) items of {self.rows} "
                f"query rows, keys in tiles of {self.key_tile} over the arrays, "
                f"{self.splits} split(s) per item, {self.sets} buffer sets")


def _cache_dtypes(node) -> tuple[DType, DType] | None:
    """A quantized cache's (value, scale) dtypes; None for a 16/32-bit one."""
    return (node.inputs[1].dtype, node.inputs[-2].dtype) if node.spec.kv_scales else None


def _set_bytes(tk: int, rows: int, d: int, dv: int, dtype: DType, arrays: int,
               splits: int, cache: tuple[DType, DType] | None) -> int:
    """One buffer set (:func:`_shapes`)."""
    shapes = _shapes(tk, rows, d, dv, dtype, arrays, splits, cache)
    return sum(math.prod(shape) * dt.itemsize for shape, dt in shapes.values())


def _shapes(tk: int, rows: int, d: int, dv: int, dtype: DType, arrays: int, splits: int,
            cache: tuple[DType, DType] | None) -> dict[str, tuple[tuple[int, ...], DType]]:
    """One buffer set: K and V tiles (as stored: :func:`quantized_shapes`), scores (f32,
    and cast), the arrays' partial P V, the item's query, accumulator, output and row
    statistics (and the combine step's)."""
    shapes = quantized_shapes(tk, rows, d, dv, *cache) if cache else {
        "k": ((tk, d), dtype), "v": ((tk, dv), dtype)}
    shapes |= {
        "s": ((tk, rows), F32),
        "pc": ((tk, rows), dtype), "pv": ((arrays, rows, dv), F32),
        "q": ((rows, d), dtype), "acc": ((rows, dv), F32), "o": ((rows, dv), dtype),
        "m": ((1, rows), F32), "mn": ((1, rows), F32), "rm": ((1, rows), F32),
        "l": ((1, rows), F32), "c": ((1, rows), F32), "rs": ((1, rows), F32),
    }
    if splits > 1:
        shapes.update(combine_shapes(splits, rows, dv, dtype))
    return shapes


def _latency_bytes(config: NpuConfig, cores: int) -> float:
    """Bytes a core must keep in flight to stream at its share of DRAM bandwidth: the
    bandwidth-delay product of one transfer's fixed latency."""
    latency = (config.core.dma.setup_latency_cycles + config.dram.latency_cycles
               + config.noc.latency_cycles)
    return config.dram_bytes_per_cycle / cores * latency


def _splits(items: int, keys: int, cores: int, min_keys: int) -> int:
    """Key splits per item that minimize the busiest core's keys (each split at least
    ``min_keys``, one array fold per array); ties go to fewer splits (no combine)."""
    best, best_load = 1, ceil_div(items, cores) * keys
    for s in range(2, cores + 1):
        if ceil_div(keys, s) < min_keys:
            break
        load = ceil_div(items * s, cores) * ceil_div(keys, s)
        if load < best_load:
            best, best_load = s, load
    return best


def decode_plan(ctx: Context, node, q_shape: tuple[int, ...], k_shape: tuple[int, ...],
                v_shape: tuple[int, ...], masked: bool) -> DecodePlan | None:
    """The decode mapping, or None when the flash kernel should run the node: with a
    mask, more query rows per K/V head than an array's columns, no more keys than one
    array fold (nothing to spread over the arrays: the flash kernel was as fast on
    BERT's 128-token heads and a one-token step, measured), no batch/head dims, or a
    quantized cache stored [B, S, H, D]."""
    spec = node.spec
    matrix = ctx.config.core.matrix
    if masked or len(q_shape) < 3 or (spec.kv_scales and spec.heads_after_seq[1]):
        return None
    sq, d = q_shape[-2:]
    sk, dv = v_shape[-2:]
    group = q_shape[-3] // k_shape[-3]
    rows = group * sq
    if rows > matrix.cols or sk <= matrix.rows:  # keys of one fold: nothing to spread
        return None
    items = math.prod(k_shape[:-2])
    cores = ctx.cores
    arrays = matrix.arrays if ctx.options.multi_array else 1
    dtype, cache = node.inputs[0].dtype, _cache_dtypes(node)
    item = node.inputs[1].dtype.itemsize
    splits = _splits(items, sk, cores, arrays * matrix.rows)
    keys = ceil_div(sk, splits)
    sets_floor = ctx.sets
    fixed = _set_bytes(0, rows, d, dv, dtype, arrays, splits, cache)
    per_key = _set_bytes(1, rows, d, dv, dtype, arrays, splits, cache) - fixed
    for sets in range(sets_floor, sets_floor + 6):
        room = (ctx.capacity - SLACK_BYTES) // sets
        most = (room - fixed) // per_key
        if most < 1:
            return None
        most = most if most < matrix.rows else most - most % matrix.rows
        tiles = ceil_div(keys, most)
        tk = ceil_div(keys, tiles)
        if sets_floor == 1 or sets >= 2 + math.ceil(
                _latency_bytes(ctx.config, cores) / (tk * (d + dv) * item)):
            return DecodePlan(group, rows, items, splits, tk, sets)
    return DecodePlan(group, rows, items, splits, tk, sets)


def lower_decode_attention(ctx: Context, kernel: Kernel, plan: DecodePlan,
                           shapes: tuple[tuple[int, ...], ...]) -> None:
    node = kernel.anchor
    q_shape, k_shape, v_shape = shapes
    sk = v_shape[-2]
    cores = ctx.cores
    arrays = ctx.config.core.matrix.arrays if ctx.options.multi_array else 1
    keys = ceil_div(sk, plan.splits)
    step_class = QuantizedDecodeStep if node.spec.kv_scales else DecodeStep
    units = [(i, s) for i in range(plan.items) for s in range(plan.splits)]
    used = min(cores, len(units))
    bufs = [_allocate(ctx, c, plan, q_shape[-1], v_shape[-1], node, arrays)
            for c in range(used)]
    ctx.choices[node.source] = plan.describe()
    partials = Partials.declare(ctx, node, plan.items, plan.splits, plan.rows,
                                v_shape[-1]) if plan.splits > 1 else None
    per_core: list[list[TileSteps]] = [[] for _ in range(used)]
    tiles, steps = [0] * used, [0] * used
    previous: list[DecodeStep | None] = [None] * used
    for u, (item, split) in enumerate(units):
        core = u % used
        ts = tiles[core] % plan.sets
        tiles[core] += 1
        kv_index = unravel(item, k_shape[:-2])
        lo, hi = split * keys, min(sk, (split + 1) * keys)
        starts = list(range(lo, hi, plan.key_tile))
        for n, k0 in enumerate(starts):
            ss = steps[core] % plan.sets
            steps[core] += 1
            job = step_class(ctx, node, core, bufs[core], ts, ss, plan, kv_index,
                              (k0, min(k0 + plan.key_tile, hi)), n == 0,
                              n == len(starts) - 1, arrays, partials, (item, split))
            if previous[core] is not None and plan.sets > 1:
                previous[core].next, job.prev = job, previous[core]
            previous[core] = job
            per_core[core].append(TileSteps(job.load, job.compute, job.finish))
    pipeline(per_core, plan.sets - 1)
    if partials is not None:  # after every split's stores (a load waits on those before it)
        lower_combines(ctx, node, partials, plan, bufs, k_shape[:-2])


def _allocate(ctx: Context, core: int, plan: DecodePlan, d: int, dv: int, node,
              arrays: int) -> dict[str, list[SramRef]]:
    arena = Arena(sram_space(core), ctx.capacity)
    shapes = _shapes(plan.key_tile, plan.rows, d, dv, node.inputs[0].dtype, arrays,
                     plan.splits, _cache_dtypes(node))
    return {name: [arena.alloc(shape, dt, f"decode attention {name}")
                   for _ in range(plan.sets)] for name, (shape, dt) in shapes.items()}


