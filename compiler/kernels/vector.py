"""The vector kernel: a fused group of elementwise/reduce nodes, tile by tile.

A tile is a box of the group's iteration space with reduced axes whole. Each value of
the group gets one SRAM buffer per buffer set; external inputs are loaded (through
views, permutes and slices), nodes run on the vector engine, and values needed outside
the kernel are stored. The emitters also serve matmul/conv epilogues (epilogue.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from archsim.config.names import sram_space, vpu_engine
from archsim.errors import CapacityError, LoweringError
from compiler import graph as g
from compiler.emit import ALIGN_BYTES, Arena
from compiler.graph import Node, Value
from compiler.ir.operands import Scalar, SramRef
from compiler.ir.ops import Binary, Cast, Load, Reduce, ReduceKind, Select, Transpose, Unary, \
    VCopy
from compiler.kernels.common import Box, Context, TileSteps, box_shape, pipeline
from compiler.kernels.rotate_half import emit_rotate_half
from compiler.kernels.transfers import load_box, store_box, sub
from compiler.kernels.vector_tiles import (  # noqa: F401 (re-exported)
    MIN_TILE_BYTES, Access, DmaCost, choose_tile, dma_cycles, granule_aligned, plan_tile, tiles_of,
    wide_runs)
from compiler.plan import Group, Kernel, aligned



def value_box(value: Value, space_box: Box) -> Box:
    """The part of a value (aligned to the iteration space) a tile touches."""
    shape = aligned(value.shape, len(space_box))
    return tuple((0, 1) if n == 1 else r for n, r in zip(shape, space_box))


def own_box(value: Value, space_box: Box) -> Box:
    """``value_box`` in the value's own rank."""
    if not value.shape:
        return ((0, 1),)
    box = value_box(value, space_box)
    return box[len(box) - len(value.shape):]


@dataclass
class GroupLayout:
    """Per buffer set: value id -> SRAM buffer at its largest tile shape."""

    buffers: list[dict[int, SramRef]]
    scratch: list[dict[int, SramRef]]


def group_values(group: Group) -> tuple[list[Value], list[Value]]:
    """(external inputs, produced values) of a group, in first-use order."""
    external: dict[int, Value] = {}
    for node in group.nodes:
        for v in node.value_inputs():
            if v.id not in group.members and v.id not in external:
                external[v.id] = v
    produced = [v for node in group.nodes for v in node.outputs]
    return list(external.values()), produced


def buffer_values(ctx: Context, group: Group, preloaded: set[int]) -> list[Value]:
    external, produced = group_values(group)
    leaves = [v for v in external if v.id not in ctx.scalars and v.id not in preloaded
              and not _leaf_source(group, v)]
    return leaves + produced


def _leaf_source(group: Group, value: Value) -> bool:
    """True if the value is only read by permute/slice leaves (loaded in their shape)."""
    users = [n for n in group.nodes if value in n.value_inputs()]
    return bool(users) and all(isinstance(n.spec, (g.Permute, g.Slice)) for n in users)


def tile_bytes(ctx: Context, group: Group, tile: tuple[int, ...], preloaded: set[int]) -> int:
    box = tuple((0, n) for n in tile)
    total = 0
    for v in buffer_values(ctx, group, preloaded):
        total += _padded(_numel(box_shape(value_box(v, box))) * v.dtype.itemsize)
    for node in group.nodes:
        shape = _scratch_shape(node, box)
        if shape is not None:
            total += _padded(_numel(shape) * node.inputs[0].dtype.itemsize)
    return total


def bytes_per_element(ctx: Context, group: Group, preloaded: set[int]) -> int:
    """SRAM bytes a group needs per element of its iteration space (upper bound: values
    broadcast along some axes are counted as if they were not)."""
    total = sum(v.dtype.itemsize for v in buffer_values(ctx, group, preloaded))
    unit = tuple((0, 1) for _ in group.shape)
    for node in group.nodes:
        if _scratch_shape(node, unit) is not None:
            total += node.inputs[0].dtype.itemsize
    return total


def _scratch_shape(node: Node, box: Box) -> tuple[int, ...] | None:
    """Shape of the extra buffer a node needs (permute/slice source, reduce partials)."""
    if isinstance(node.spec, (g.Permute, g.Slice)):
        return box_shape(value_box(node.out, box))
    if isinstance(node.spec, g.Reduce) and len(node.spec.axes) > 1:
        axes, shape = _reduce_axes(node, box)
        if len(axes) < 2:
            return None
        return (2 * _numel(shape) // shape[axes[0]],)
    return None


def _reduce_axes(node: Node, box: Box) -> tuple[list[int], tuple[int, ...]]:
    """The axes (of the space) a reduce node's tile reduces one after the other, and
    its input's tile shape. A multi-axis reduction passes its partial results between
    two halves of a scratch buffer, each as large as the first partial (the input
    without its first reduced axis: the later ones are smaller); a buffer as large as
    the input (what it had) kept wav2vec2's weight norm in tiles too narrow for whole
    DRAM runs."""
    spec: g.Reduce = node.spec
    x = node.inputs[0]
    shape = box_shape(value_box(x, box))
    shift = len(box) - len(x.shape)
    axes = [a + shift for a in spec.axes if shape[a + shift] > 1] or [spec.axes[-1] + shift]
    return axes, shape


def _padded(n: int) -> int:
    return -(-n // 64) * 64 + 64


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def layout(ctx: Context, group: Group, tile: tuple[int, ...], arena: Arena, sets: int,
           preloaded: set[int]) -> GroupLayout:
    box = tuple((0, n) for n in tile)
    buffers, scratch = [], []
    for s in range(sets):
        bufs: dict[int, SramRef] = {}
        for v in buffer_values(ctx, group, preloaded):
            bufs[v.id] = arena.alloc(box_shape(value_box(v, box)), v.dtype, v.name)
        extra: dict[int, SramRef] = {}
        for node in group.nodes:
            shape = _scratch_shape(node, box)
            if shape is not None:
                extra[node.out.id] = arena.alloc(shape, node.inputs[0].dtype,
                                                 f"{node.out.name}.scratch")
        buffers.append(bufs)
        scratch.append(extra)
    return GroupLayout(buffers, scratch)


# ---------------------------------------------------------------- per-tile emission


def emit_loads(ctx: Context, group: Group, box: Box, core: int, bufs: dict[int, SramRef],
               scratch: dict[int, SramRef], preloaded: dict[int, SramRef], source: str,
               kind: str = "any") -> None:
    """Load the group's operands for ``box``; ``kind`` picks the DMA engines
    (:func:`load_box`): a matmul tile's epilogue takes the load engines, so its operands
    do not queue behind the previous tile's store."""
    external, _ = group_values(group)
    for v in external:
        if v.id in ctx.scalars or v.id in preloaded or _leaf_source(group, v):
            continue
        load_box(ctx, v, own_box(v, box), bufs[v.id], core, source, kind)
    for node in group.nodes:
        if isinstance(node.spec, g.Permute):
            _load_permuted(ctx, node, box, core, scratch[node.out.id], source)
        elif isinstance(node.spec, g.Slice):
            _load_slice(ctx, node, box, core, bufs, scratch[node.out.id], source)


def _permuted_in_box(node: Node, box: Box) -> Box:
    """The box of a permute's input that its output's part of ``box`` reads."""
    perm = node.spec.perm
    out_box = own_box(node.out, box)
    in_box: list[tuple[int, int]] = [(0, 0)] * len(perm)
    for i, p in enumerate(perm):
        in_box[p] = out_box[i]
    return tuple(in_box)


def _load_permuted(ctx: Context, node: Node, box: Box, core: int, tmp: SramRef,
                   source: str) -> None:
    load_box(ctx, node.inputs[0], _permuted_in_box(node, box), tmp, core, source)


def _load_slice(ctx: Context, node: Node, box: Box, core: int, bufs: dict[int, SramRef],
                tmp: SramRef, source: str) -> None:
    spec: g.Slice = node.spec
    out_box = own_box(node.out, box)
    lo, hi = out_box[spec.dim]
    start = spec.start + lo * spec.step
    in_box = list(out_box)
    src = node.inputs[0]
    if spec.step == 1:
        in_box[spec.dim] = (start, start + hi - lo)
        load_box(ctx, src, tuple(in_box), tmp, core, source)
        return
    view = ctx.view(src)
    if view.shape != view.base_shape:
        raise LoweringError(f"{node.source}: strided slice of a reshaped view")
    steps = tuple(spec.step if d == spec.dim else 1 for d in range(len(out_box)))
    in_box[spec.dim] = (start, start + (hi - lo))
    for ref, offset in ctx.em.dram_pieces(view, tuple(in_box), steps):
        ctx.em.emit(ctx.em.dma(core), Load(ref, sub(tmp, ref.shape, offset)), source)


def operand(ctx: Context, x: object, box: Box, bufs: dict[int, SramRef]) -> SramRef | Scalar:
    if isinstance(x, Value):
        if x.id in ctx.scalars:
            return Scalar(ctx.scalars[x.id])
        return sub(bufs[x.id], box_shape(value_box(x, box)))
    return Scalar(float(x))


Order = dict[int, tuple[tuple[Value | float, ...], bool]]  # see epilogue.pass_order


def emit_compute(ctx: Context, group: Group, box: Box, core: int, bufs: dict[int, SramRef],
                 scratch: dict[int, SramRef], source: str, order: Order | None = None) -> None:
    """The group's ops on ``box``; without an ``order`` each passes over the scratchpad."""
    vpu, em = vpu_engine(core), ctx.em
    for node in group.nodes:
        spec = node.spec
        out = sub(bufs[node.out.id], box_shape(value_box(node.out, box)))
        src = node.source or source
        (first, *rest), chained = order[node.out.id] if order else (node.inputs, False)
        if isinstance(spec, g.Unary):
            em.emit(vpu, Unary(spec.kind, operand(ctx, first, box, bufs), out, chained), src)
        elif isinstance(spec, g.Binary):
            a, b = operand(ctx, first, box, bufs), operand(ctx, rest[0], box, bufs)
            em.emit(vpu, Binary(spec.kind, a, b, out, chained), src)
        elif isinstance(spec, g.Select):
            cond, a, b = (operand(ctx, x, box, bufs) for x in node.inputs)
            em.emit(vpu, Select(cond, a, b, out), src)
        elif isinstance(spec, g.Cast):
            em.emit(vpu, Cast(operand(ctx, node.inputs[0], box, bufs), out, chained), src)
        elif isinstance(spec, g.Broadcast):
            em.emit(vpu, VCopy(operand(ctx, node.inputs[0], box, bufs), out), src)
        elif isinstance(spec, g.Permute):
            in_shape = box_shape(own_box(node.out, box))
            src_shape = tuple(in_shape[spec.perm.index(d)] for d in range(len(spec.perm)))
            em.emit(vpu, Transpose(sub(scratch[node.out.id], src_shape),
                                   sub(out, in_shape), spec.perm), src)
        elif isinstance(spec, g.Slice):
            shape = box_shape(own_box(node.out, box))
            em.emit(vpu, VCopy(sub(scratch[node.out.id], shape), sub(out, shape)), src)
        elif isinstance(spec, g.RotateHalf):
            emit_rotate_half(em, operand(ctx, node.inputs[0], box, bufs), out,
                             node.out.shape[-1], vpu, src)
        elif isinstance(spec, g.Reduce):
            emit_reduce(ctx, node, box, vpu, bufs, scratch, out, src)
        else:
            raise LoweringError(f"{node.source}: {type(spec).__name__} is not a vector op")


def emit_reduce(ctx: Context, node: Node, box: Box, vpu: str, bufs: dict[int, SramRef],
                scratch: dict[int, SramRef], out: SramRef, source: str,
                kind: ReduceKind | None = None) -> None:
    """A reduce node's tile, axis by axis, as ``kind`` (default: the node's)."""
    spec: g.Reduce = node.spec
    kind = kind or spec.kind
    cur = operand(ctx, node.inputs[0], box, bufs)
    axes, whole = _reduce_axes(node, box)
    shape = list(whole)
    half = _numel(whole) // whole[axes[0]]
    for i, axis in enumerate(axes):
        shape[axis] = 1
        if i == len(axes) - 1:
            dst = out
        else:
            dst = sub(scratch[node.out.id], tuple(shape), 0 if i % 2 == 0 else half)
        ctx.em.emit(vpu, Reduce(kind, cur, dst, axis), source)
        cur = dst


def emit_stores(ctx: Context, group: Group, box: Box, core: int, bufs: dict[int, SramRef],
                source: str, kind: str = "any") -> None:
    for node in group.nodes:
        for v in node.outputs:
            if ctx.materialized(v):
                store_box(ctx, v, own_box(v, box), sub(bufs[v.id], box_shape(value_box(v, box))),
                          core, source, kind)


# ---------------------------------------------------------------- the kernel


def lower_vector_kernel(ctx: Context, kernel: Kernel) -> None:
    group = kernel.group
    if group is None:
        raise LoweringError(f"{kernel.name}: vector kernel without a group")
    space = group.shape
    sets = ctx.sets
    budget = ctx.capacity // sets
    def bytes_of(t: tuple[int, ...]) -> int:
        return tile_bytes(ctx, group, t, set())

    total = bytes_of(space)
    target = max(MIN_TILE_BYTES, total // (2 * ctx.cores)) if ctx.cores > 1 or sets > 1 \
        else budget
    accesses, cost = accesses_of(ctx, group), DmaCost.of(ctx.config, ctx.cores)
    too_long: CapacityError | None = None
    try:
        tile: tuple[int, ...] | None = plan_tile(space, group.whole_axes, budget, bytes_of,
                                                 kernel.name, target, ctx.cores, accesses, cost)
    except CapacityError as exc:
        tile, too_long = None, exc  # reduced axes too long to keep whole: tiles along them
    wide = planned = None
    if group.whole_axes and tile is not None:
        tile = granule_aligned(space, tile, accesses, cost)
        planned = dma_cycles(space, tile, accesses, cost)  # the planned tile's DMA, once
        wide = wide_runs(space, tile, sets, ctx.capacity, bytes_of, ctx.cores, accesses,
                         cost, planned)
    if group.whole_axes:
        # vector_split builds on this module's emitters, hence imported here
        from compiler.kernels.vector_split import lower_split_reduce, planned_split
        split = planned_split(ctx, group, tile, wide, sets, target, accesses, cost, planned)
        if split is not None:
            ctx.choices[kernel.name] = (
                f"vector tiles {list(split.tile)} along the reduced axes, partial results "
                f"a core combined on core 0")
            lower_split_reduce(ctx, kernel, split)
            return
    if too_long is not None:
        raise too_long
    if wide is not None:
        tile, sets = wide.tile, wide.sets
        ctx.choices[kernel.name] = (
            f"vector tiles {list(tile)}: dim {wide.dim} cut {tile[wide.dim]} long for "
            f"whole DRAM runs ({sets} buffer set{'s' if sets > 1 else ''})")
    boxes = tiles_of(space, tile)
    cores = min(ctx.cores, len(boxes))
    layouts = []
    top = _top_of(ctx, group, tile, sets) if group.weights_only else 0
    for c in range(cores):
        arena = Arena(sram_space(c), ctx.capacity)
        arena.top = top
        layouts.append(layout(ctx, group, tile, arena, sets, set()))
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    for i, box in enumerate(boxes):
        core = i % cores
        k = len(per_core[core]) % sets
        bufs, scratch = layouts[core].buffers[k], layouts[core].scratch[k]
        per_core[core].append(_steps(ctx, group, box, core, bufs, scratch, kernel.name))
    pipeline(per_core, sets - 1)


def _top_of(ctx: Context, group: Group, tile: tuple[int, ...], sets: int) -> int:
    """Where a kernel of weight preparations (a norm's weight cast to f32) puts its
    buffers: at the top of the scratchpad. They run ahead of the network, and at byte 0
    the first real kernel's first loads waited for them to be copied out (770 cycles of
    a LayerNorm on tpu-v4)."""
    trial = Arena(sram_space(0), ctx.capacity)
    layout(ctx, group, tile, trial, sets, set())
    return max(0, (ctx.capacity - trial.top) // ALIGN_BYTES * ALIGN_BYTES)


def accesses_of(ctx: Context, group: Group) -> list[Access]:
    """What the group's tiles load and store through DRAM views (slices aside)."""
    rank = len(group.shape)

    def own_dim(value: Value) -> Callable[[int], int | None]:
        def dim(d: int) -> int | None:
            vd = d - (rank - len(value.shape))
            return vd if vd >= 0 and value.shape[vd] > 1 else None
        return dim

    def own(value: Value) -> Access:
        return Access(ctx.view(value), lambda box: own_box(value, box), own_dim(value))

    external, _ = group_values(group)
    out = [own(v) for v in external if v.id not in ctx.scalars and not _leaf_source(group, v)]
    for node in group.nodes:
        if isinstance(node.spec, g.Permute):
            perm, out_dim = node.spec.perm, own_dim(node.out)
            out.append(Access(ctx.view(node.inputs[0]),
                              lambda box, node=node: _permuted_in_box(node, box),
                              lambda d, perm=perm, out_dim=out_dim:
                              None if out_dim(d) is None else perm[out_dim(d)]))
        out += [own(v) for v in node.outputs if ctx.materialized(v)]
    return out


def _steps(ctx: Context, group: Group, box: Box, core: int, bufs: dict[int, SramRef],
           scratch: dict[int, SramRef], source: str) -> TileSteps:
    return TileSteps(
        load=lambda: emit_loads(ctx, group, box, core, bufs, scratch, {}, source),
        compute=lambda: emit_compute(ctx, group, box, core, bufs, scratch, source),
        store=lambda: emit_stores(ctx, group, box, core, bufs, source),
    )


