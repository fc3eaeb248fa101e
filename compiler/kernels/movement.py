"""Data-movement kernels: cat (each part copied into its slot), constant padding
(border strips filled from a vector-engine fill, interior copied) and row gathers
(indices loaded, rows fetched by an indexed DMA), DRAM -> SRAM -> DRAM."""

from __future__ import annotations

from archsim.config.names import sram_space, vpu_engine
from archsim.errors import CapacityError, LoweringError
from compiler import graph as g
from compiler.emit import ALIGN_BYTES, Arena
from compiler.graph import Value
from compiler.ir.operands import DramRef, Scalar, Slice
from compiler.ir.ops import Binary, BinaryKind, Gather
from compiler.kernels.common import Box, Context, box_shape, ceil_div
from compiler.kernels.vector import (
    MIN_TILE_BYTES,
    choose_tile,
    load_box,
    store_box,
    sub,
    tiles_of,
)
from compiler.plan import Kernel


def _copy(ctx: Context, src: Value, dst: Value, offset: tuple[int, ...], source: str,
          first_core: int = 0) -> int:
    """Copy all of ``src`` into ``dst`` at ``offset`` (per dim), tiled so that every
    core's DMA engines take part; returns tiles."""
    sets = ctx.sets
    item = src.dtype.itemsize
    # one core gains nothing from smaller tiles
    spread = max(MIN_TILE_BYTES, _numel(src.shape) * item // (2 * ctx.cores)) \
        if ctx.cores > 1 else None
    tile = choose_tile(src.shape, set(), ctx.capacity // sets,
                       lambda t: _numel(t) * item, source, spread)
    boxes = tiles_of(src.shape, tile)
    cores = min(ctx.cores, len(boxes))
    bufs = []
    for c in range(cores):
        arena = Arena(sram_space(c), ctx.capacity)
        bufs.append([arena.alloc(tile, src.dtype, source) for _ in range(sets)])
    for i, box in enumerate(boxes):
        core = (first_core + i) % cores
        buf = sub(bufs[core][(i // cores) % sets], box_shape(box))
        load_box(ctx, src, box, buf, core, source)
        shifted: Box = tuple((lo + o, hi + o) for (lo, hi), o in zip(box, offset))
        store_box(ctx, dst, shifted, buf, core, source)
    return len(boxes)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def lower_cat_kernel(ctx: Context, kernel: Kernel) -> None:
    node = kernel.anchor
    dim = node.spec.dim
    start = 0
    done = 0
    for part in node.inputs:
        offset = tuple(start if d == dim else 0 for d in range(len(part.shape)))
        done += _copy(ctx, part, node.out, offset, node.source, done)
        start += part.shape[dim]


def lower_pad_kernel(ctx: Context, kernel: Kernel) -> None:
    """Border strips are stored from a filled SRAM buffer, the interior is copied.
    The left and right strips are one narrow run per row (each rounded up to the DRAM
    access granularity), so the strips are cut along the leading dims and spread over
    every core's DMA engines rather than queued on one."""
    node = kernel.anchor
    spec: g.Pad = node.spec
    x, out = node.inputs[0], node.out
    top, bottom, left, right = spec.pads
    lead = out.shape[:-2]
    h, w = out.shape[-2:]
    strips = [((0, top), (0, w)), ((h - bottom, h), (0, w)),
              ((top, h - bottom), (0, left)), ((top, h - bottom), (w - right, w))]
    strips = [s for s in strips if s[0][1] > s[0][0] and s[1][1] > s[1][0]]
    item = out.dtype.itemsize
    strip_elems = max((_numel(box_shape(s)) for s in strips), default=1)
    # enough leading-dim tiles that every core gets some strips
    spread = _numel(lead) * strip_elems * item * len(strips) // ctx.cores
    fill_tile = choose_tile(lead + (1,), set(), ctx.capacity // 4,
                            lambda t: _numel(t) * strip_elems * item, node.source, spread)
    stores = [(lead_tile + (rows, cols)) for lead_tile in tiles_of(lead, fill_tile[:-1])
              for rows, cols in strips]
    cores = min(ctx.cores, len(stores))
    fills = []
    for core in range(cores):
        fill = Arena(sram_space(core), ctx.capacity).alloc(fill_tile[:-1] + (strip_elems,),
                                                        out.dtype, "pad fill")
        ctx.em.emit(vpu_engine(core),
                    Binary(BinaryKind.add, Scalar(spec.value), Scalar(0.0), fill), node.source)
        fills.append(fill)
    for i, box in enumerate(stores):
        store_box(ctx, out, box, sub(fills[i % cores], box_shape(box)), i % cores,
                  node.source)
    _copy(ctx, x, out, (0,) * len(lead) + (top, left), node.source, len(stores) % ctx.cores)


def _gather_tile(ctx: Context, count: int, cols: int, index_bytes: int, row_item: int,
                 source: str, spread: bool = True) -> tuple[int, int]:
    """``(indices, columns)`` per gather tile: all columns if one row fits a buffer
    set, and as many indices as fit, spread evenly over the cores if ``spread``."""
    budget = ctx.capacity // ctx.sets - 2 * ALIGN_BYTES  # index + row buffer, aligned
    if budget < index_bytes + row_item:
        raise CapacityError(f"{source}: a gather of one element needs "
                            f"{index_bytes + row_item} B of SRAM, budget {budget} B")
    col_tile = min(cols, (budget - index_bytes) // row_item)
    fits = budget // (index_bytes + col_tile * row_item)
    share = ceil_div(count, ctx.cores) if spread else count
    return min(share, fits), col_tile


def lower_gather_kernel(ctx: Context, kernel: Kernel) -> None:
    """Per tile of indices: load them (once), then per column tile gather the rows into
    the scratchpad and store them. Tiles go round robin over the cores, alternating
    buffer sets so a core's next gather overlaps its last store."""
    node = kernel.anchor
    table, indices = node.inputs
    out, source = node.out, node.source
    view = ctx.view(table)
    if view.base_shape != table.shape:
        raise LoweringError(f"{source}: gather table {table} is not a dense 2-D tensor")
    if node.spec.per_column:
        _gather_columns(ctx, node, view.tensor)
        return
    count, cols = out.shape
    rows = table.shape[0]
    row_tile, col_tile = _gather_tile(ctx, count, cols, indices.dtype.itemsize,
                                      table.dtype.itemsize, source)
    index_boxes = [(lo, min(lo + row_tile, count)) for lo in range(0, count, row_tile)]
    cores = min(ctx.cores, len(index_boxes))
    index_bufs, row_bufs = [], []
    for c in range(cores):
        arena = Arena(sram_space(c), ctx.capacity)
        index_bufs.append([arena.alloc((row_tile,), indices.dtype, source)
                           for _ in range(ctx.sets)])
        row_bufs.append([arena.alloc((row_tile, col_tile), table.dtype, source)
                         for _ in range(ctx.sets)])
    steps = [0] * cores
    for i, (lo, hi) in enumerate(index_boxes):
        core = i % cores
        index_buf = sub(index_bufs[core][(i // cores) % ctx.sets], (hi - lo,))
        load_box(ctx, indices, ((lo, hi),), index_buf, core, source, "load")
        for c0 in range(0, cols, col_tile):
            c1 = min(c0 + col_tile, cols)
            row_buf = sub(row_bufs[core][steps[core] % ctx.sets], (hi - lo, c1 - c0))
            steps[core] += 1
            box = DramRef(view.tensor, (Slice(0, rows), Slice(c0, c1)))
            ctx.em.emit(ctx.em.dma(core, "load"), Gather(box, index_buf, row_buf), source)
            store_box(ctx, out, ((lo, hi), (c0, c1)), row_buf, core, source, "store")


def _gather_columns(ctx: Context, node: g.Node, tensor: str) -> None:
    """torch.gather on dim 0: column j of the output gathers one-element rows of the
    table's column j, by column j of the index. Per (index tile, column): load that
    index column (a strided load), gather, store the column (a strided store). Every
    element is its own DRAM run, as an element gather is on real hardware."""
    table, indices = node.inputs
    out, source = node.out, node.source
    count, cols = out.shape
    rows = table.shape[0]
    row_tile, _ = _gather_tile(ctx, count, 1, indices.dtype.itemsize, table.dtype.itemsize,
                               source, spread=False)  # the columns spread over the cores
    work = [(lo, min(lo + row_tile, count), j)
            for lo in range(0, count, row_tile) for j in range(cols)]
    cores = min(ctx.cores, len(work))
    bufs = []
    for c in range(cores):
        arena = Arena(sram_space(c), ctx.capacity)
        bufs.append([(arena.alloc((row_tile, 1), indices.dtype, source),
                      arena.alloc((row_tile, 1), table.dtype, source))
                     for _ in range(ctx.sets)])
    for i, (lo, hi, j) in enumerate(work):
        core = i % cores
        index_buf, value_buf = bufs[core][(i // cores) % ctx.sets]
        box: Box = ((lo, hi), (j, j + 1))
        column = sub(index_buf, (hi - lo, 1))
        load_box(ctx, indices, box, column, core, source, "load")
        values = sub(value_buf, (hi - lo, 1))
        picked = DramRef(tensor, (Slice(0, rows), Slice(j, j + 1)))
        ctx.em.emit(ctx.em.dma(core, "load"),
                    Gather(picked, sub(column, (hi - lo,)), values), source)
        store_box(ctx, out, box, values, core, source, "store")
