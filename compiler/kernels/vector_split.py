"""A reduction over leading axes, tiled along them: partial results a core, combined.

A vector tile keeps a reduction's axes whole (:mod:`compiler.kernels.vector`), so a
reduction over leading axes cuts the dims it keeps, and a small kept innermost dim
gives DMA runs shorter than the DRAM granule: ``vector_norm(v, dim=(0, 1))`` of
``[768, 48, 128]`` bf16 on atom took ``[768, 48, 8]`` tiles, 16-byte runs that DRAM
charges as 32. Here the tiles cut the outermost reduced axis instead and keep every
kept dim whole, so each tile reads whole rows. Each tile reduces its part into a
partial result (in the result's dtype, as a multi-axis reduction's intermediates are),
added into a running accumulator of its core (float32 for sum and mean; the result's
dtype for max and min, which are exact); each core stores its accumulator to a DRAM
scratch tensor ``[cores, n]``; core 0 loads them, reduces them (a mean divides by the
count), casts the result to its dtype and runs the group's nodes that follow the
reduction on it. Sums differ from one pass over the whole axis only in their order
and in rounding each tile's partial to the result's dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from archsim.config.names import sram_space, vpu_engine
from archsim.errors import CapacityError
from compiler import graph as g
from compiler.emit import ALIGN_BYTES, Arena, DramView
from compiler.graph import Node
from compiler.ir.dtypes import DType
from compiler.ir.operands import Scalar, SramRef
from compiler.ir.ops import Binary, BinaryKind, Cast, Load, Reduce, ReduceKind, Store, VCopy
from compiler.kernels.common import Box, Context, TileSteps, box_shape, pipeline
from compiler.kernels.transfers import store_box, sub
from compiler.kernels.vector import (
    GroupLayout, accesses_of, emit_compute, emit_loads, emit_reduce, emit_stores, layout,
    own_box, tile_bytes, value_box)
from compiler.kernels.vector_tiles import (
    CLEARLY_CHEAPER, MIN_TILE_BYTES, WASTEFUL, Access, DmaCost, Shape, WideRuns, balanced,
    choose_tile, dma_cycles, row_cycles, split_dim, tiles_of)
from compiler.plan import Group, Kernel, aligned

PARTIAL: dict[ReduceKind, tuple[ReduceKind, BinaryKind]] = {
    ReduceKind.sum: (ReduceKind.sum, BinaryKind.add),
    ReduceKind.mean: (ReduceKind.sum, BinaryKind.add),
    ReduceKind.max: (ReduceKind.max, BinaryKind.max),
    ReduceKind.min: (ReduceKind.min, BinaryKind.min),
}
"""Per reduction: what a tile's partial is, and how partials combine."""

AFTER_SPECS: tuple[type[g.Spec], ...] = (g.Unary, g.Binary, g.Select, g.Cast)
"""Nodes that may follow the reduction in its kernel (on its result's shape)."""


@dataclass(frozen=True)
class SplitReduce:
    """A group's one reduction and the nodes around it."""

    node: Node
    axes: tuple[int, ...]
    """The dims of the space it reduces (longer than 1)."""
    tiles: Group
    """The nodes before it and it: what each tile computes."""
    before: Group
    """The nodes before it alone (computed and stored tile by tile)."""
    after: Group
    """The nodes reading its result: run once, on core 0, on the combined result."""

    @property
    def accumulator(self) -> DType:
        kind = self.node.spec.kind
        return DType.f32 if kind in (ReduceKind.sum, ReduceKind.mean) else self.node.out.dtype


@dataclass(frozen=True)
class SplitPlan:
    split: SplitReduce
    tile: Shape
    sets: int


def split_reduce_of(group: Group) -> SplitReduce | None:
    """The group as a reduction tiled along its axes, or None when it is not one: one
    sum, mean, max or min of floats over the whole space, every other node either
    before it or computing from its result and values broadcast along its axes."""
    reduces = [n for n in group.nodes if isinstance(n.spec, g.Reduce)]
    if len(reduces) != 1:
        return None
    node = reduces[0]
    x, space = node.inputs[0], group.shape
    if node.spec.kind not in PARTIAL or not x.dtype.is_float or \
            aligned(x.shape, len(space)) != space:
        return None
    shift = len(space) - len(x.shape)
    axes = tuple(sorted(a + shift for a in node.spec.axes if x.shape[a] > 1))
    if not axes or group.whole_axes != set(axes):
        return None
    later = {node.out.id}
    before, after = [], []
    for n in group.nodes:
        if n is node:
            continue
        if any(v.id in later for v in n.value_inputs()):
            after.append(n)
            later |= {v.id for v in n.outputs}
        else:
            before.append(n)
    for n in after:
        if not isinstance(n.spec, AFTER_SPECS):
            return None
        for v in n.value_inputs() + n.outputs:
            if v.id in group.members and v.id not in later:
                return None  # it reads a value made tile by tile
            if any(aligned(v.shape, len(space))[a] != 1 for a in axes):
                return None
    return SplitReduce(node, axes, _group(before + [node], space, set(axes)),
                       _group(before, space, set()), _group(after, space, set()))


def _group(nodes: list[Node], space: Shape, whole: set[int]) -> Group:
    return Group(nodes=nodes, shape=space, members={v.id for n in nodes for v in n.outputs},
                 whole_axes=whole)


def _final_box(split: SplitReduce, space: Shape) -> Box:
    """The box of the space the result covers (reduced dims one long)."""
    return tuple((0, 1) if d in split.axes else (0, n) for d, n in enumerate(space))


def _result_size(split: SplitReduce, space: Shape) -> int:
    return math.prod(box_shape(value_box(split.node.out, _final_box(split, space))))


@dataclass(frozen=True)
class _Core:
    """A core's buffers beside its tiles': its accumulator, and a float32 copy of a
    partial when the accumulator is wider than the result."""

    tiles: GroupLayout
    acc: SramRef
    widened: SramRef | None


@dataclass(frozen=True)
class _Combine:
    """Core 0's buffers for the combine: the cores' accumulators, their reduction, the
    result and the buffers of the nodes after it."""

    parts: SramRef
    total: SramRef
    result: SramRef
    after: GroupLayout


def _core_buffers(ctx: Context, split: SplitReduce, tile: Shape, sets: int, arena: Arena
                  ) -> _Core:
    n, acc_dtype, out = _result_size(split, split.tiles.shape), split.accumulator, \
        split.node.out
    return _Core(layout(ctx, split.tiles, tile, arena, sets, set()),
                 arena.alloc((1, n), acc_dtype, f"{out.name}.acc"),
                 arena.alloc((1, n), acc_dtype, f"{out.name}.partial")
                 if acc_dtype != out.dtype else None)


def _combine_buffers(ctx: Context, split: SplitReduce, arena: Arena, cores: int) -> _Combine:
    space, out = split.tiles.shape, split.node.out
    n, acc_dtype, final = _result_size(split, space), split.accumulator, \
        _final_box(split, space)
    return _Combine(arena.alloc((cores, n), acc_dtype, f"{out.name}.parts"),
                    arena.alloc((1, n), acc_dtype, f"{out.name}.total"),
                    arena.alloc(box_shape(value_box(out, final)), out.dtype, out.name),
                    layout(ctx, split.after, box_shape(final), arena, 1, {out.id}))


def _extra_bytes(ctx: Context, split: SplitReduce) -> int:
    """Scratchpad bytes core 0 needs beside its tiles' buffers (each buffer aligned)."""
    trial = Arena(sram_space(0), 1 << 62)
    n, acc_dtype = _result_size(split, split.tiles.shape), split.accumulator
    trial.alloc((1, n), acc_dtype, "acc")
    trial.alloc((1, n), acc_dtype, "partial")
    _combine_buffers(ctx, split, trial, ctx.cores)
    return trial.top + 6 * ALIGN_BYTES


def planned_split(ctx: Context, group: Group, tile: Shape | None, wide: WideRuns | None,
                  sets: int, target: int, accesses: list[Access], cost: DmaCost,
                  planned: tuple[float, float] | None = None) -> SplitPlan | None:
    """The reduction tiled along its axes, when ``tile`` (the planned one) moves
    wasteful DMA runs (:data:`WASTEFUL`) and these tiles' commands cost clearly less
    (:data:`CLEARLY_CHEAPER`), partials' round trip counted, and no less than ``wide``'s
    when that keeps its buffer sets (a one-set tile cannot overlap loads and compute,
    which the DMA cost does not see); or when there is no planned tile (the reduced
    axes do not fit the scratchpad whole: ``x.sum()`` of a large ``x``), if it fits.
    ``planned``: :func:`dma_cycles` of ``tile``, when the caller has it."""
    split = split_reduce_of(group)
    if split is None:
        return None
    space = group.shape
    cycles = math.inf
    if tile is not None:
        cycles, ideal = planned or dma_cycles(space, tile, accesses, cost)
        if cycles <= WASTEFUL * ideal:
            return None
    budget = (ctx.capacity - _extra_bytes(ctx, split)) // sets

    def bytes_of(t: Shape) -> int:
        return tile_bytes(ctx, split.tiles, t, set())

    whole = set(range(len(space))) - set(split.axes)
    try:
        chosen = choose_tile(space, whole, budget, bytes_of, split.node.source, target,
                             split.axes)
    except CapacityError:
        return None
    own = accesses_of(ctx, split.tiles)
    dim = split_dim(space, chosen, split.axes)
    chosen = balanced(space, chosen, dim, ctx.cores,
                      lambda t: MIN_TILE_BYTES <= bytes_of(t) <= budget,
                      row_cycles(chosen, dim, own, cost), cost.tile_cycles)
    split_cycles = dma_cycles(space, chosen, own, cost)[0] + 2 * cost.tile_cycles
    if split_cycles >= CLEARLY_CHEAPER * cycles:
        return None
    if wide is not None and wide.sets == sets and \
            dma_cycles(space, wide.tile, accesses, cost)[0] <= split_cycles:
        return None
    return SplitPlan(split, chosen, sets)


def lower_split_reduce(ctx: Context, kernel: Kernel, plan: SplitPlan) -> None:
    split, tile, sets = plan.split, plan.tile, plan.sets
    space, node, source = split.tiles.shape, split.node, kernel.name
    boxes = tiles_of(space, tile)
    cores = min(ctx.cores, len(boxes))
    n = _result_size(split, space)
    partials = f"{node.out.name}_partials"
    ctx.em.tensor(partials, (cores, n), split.accumulator, "temp")
    view = DramView(partials, (cores, n), (cores, n), split.accumulator)
    top = 0
    if kernel.group is not None and kernel.group.weights_only:
        # a weight preparation runs ahead of the network: its buffers at the top of the
        # scratchpad, as compiler.kernels.vector places them
        trial = Arena(sram_space(0), ctx.capacity)
        _core_buffers(ctx, split, tile, sets, trial)
        _combine_buffers(ctx, split, trial, cores)
        top = max(0, (ctx.capacity - trial.top) // ALIGN_BYTES * ALIGN_BYTES)
    arenas = [Arena(sram_space(c), ctx.capacity) for c in range(cores)]
    for arena in arenas:
        arena.top = top
    bufs = [_core_buffers(ctx, split, tile, sets, arena) for arena in arenas]
    combine = _combine_buffers(ctx, split, arenas[0], cores)
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    counts = [-(-(len(boxes) - c) // cores) for c in range(cores)]
    for i, box in enumerate(boxes):
        core = i % cores
        k = len(per_core[core])
        per_core[core].append(_tile_steps(ctx, split, box, core, bufs[core], k % sets,
                                          k == 0, k == counts[core] - 1, view, source))
    pipeline(per_core, sets - 1)
    _combine(ctx, split, combine, view, cores, source)


def _tile_steps(ctx: Context, split: SplitReduce, box: Box, core: int, bufs: _Core,
                k: int, first: bool, last: bool, view: DramView, source: str) -> TileSteps:
    tiles, scratch = bufs.tiles.buffers[k], bufs.tiles.scratch[k]
    node = split.node

    def compute() -> None:
        emit_compute(ctx, split.before, box, core, tiles, scratch, source)
        shape = box_shape(value_box(node.out, box))
        partial = sub(tiles[node.out.id], shape)
        emit_reduce(ctx, node, box, vpu_engine(core), tiles, scratch, partial, source,
                    PARTIAL[node.spec.kind][0])
        _accumulate(ctx, split, core, bufs, sub(partial, bufs.acc.shape), first, source)

    def store() -> None:
        emit_stores(ctx, split.before, box, core, tiles, source)
        if last:
            for ref, offset in ctx.em.dram_pieces(view, ((core, core + 1), (0, view.shape[1]))):
                ctx.em.emit(ctx.em.dma(core, "store"),
                            Store(sub(bufs.acc, ref.shape, offset), ref), source)

    return TileSteps(
        load=lambda: emit_loads(ctx, split.tiles, box, core, tiles, scratch, {}, source),
        compute=compute, store=store)


def _accumulate(ctx: Context, split: SplitReduce, core: int, bufs: _Core,
                partial: SramRef, first: bool, source: str) -> None:
    """Add a tile's partial into its core's accumulator (the first one starts it)."""
    emit, vpu = ctx.em.emit, vpu_engine(core)
    combine = PARTIAL[split.node.spec.kind][1]
    if bufs.widened is not None:
        target = bufs.acc if first else bufs.widened
        emit(vpu, Cast(partial, target), source)
        partial = target
    if first:
        if bufs.widened is None:
            emit(vpu, VCopy(partial, bufs.acc), source)
        return
    emit(vpu, Binary(combine, bufs.acc, partial, bufs.acc), source)


def _combine(ctx: Context, split: SplitReduce, bufs: _Combine, view: DramView, cores: int,
             source: str) -> None:
    """Core 0: the cores' accumulators into the result, then the nodes after it."""
    em, vpu, node = ctx.em, vpu_engine(0), split.node
    for ref, offset in em.dram_pieces(view, ((0, cores), (0, view.shape[1]))):
        em.emit(em.dma(0, "load"), Load(ref, sub(bufs.parts, ref.shape, offset)), source)
    em.emit(vpu, Reduce(PARTIAL[node.spec.kind][0], bufs.parts, bufs.total, 0), source)
    if node.spec.kind is ReduceKind.mean:
        count = math.prod(split.tiles.shape[a] for a in split.axes)
        em.emit(vpu, Binary(BinaryKind.div, bufs.total, Scalar(float(count)), bufs.total),
                source)
    result = sub(bufs.result, bufs.total.shape)
    em.emit(vpu, Cast(bufs.total, result) if bufs.total.dtype != result.dtype
            else VCopy(bufs.total, result), source)
    final = _final_box(split, split.tiles.shape)
    after = dict(bufs.after.buffers[0])
    after[node.out.id] = bufs.result
    scratch = bufs.after.scratch[0]
    emit_loads(ctx, split.after, final, 0, after, scratch, {node.out.id: bufs.result}, source)
    emit_compute(ctx, split.after, final, 0, after, scratch, source)
    if ctx.materialized(node.out):
        store_box(ctx, node.out, own_box(node.out, final), bufs.result, 0, source)
    emit_stores(ctx, split.after, final, 0, after, source)
