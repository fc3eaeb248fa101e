"""Data-movement kernels: cat (each part copied into its slot) and constant padding
(border strips filled from a vector-engine fill, interior copied), DRAM -> SRAM -> DRAM."""

from __future__ import annotations

from compiler import graph as g
from compiler.emit import Arena
from compiler.graph import Value
from compiler.ir.operands import Scalar
from compiler.ir.ops import Binary, BinaryKind
from compiler.kernels.common import Box, Context, box_shape
from compiler.kernels.vector import choose_tile, load_box, store_box, sub, tiles_of
from compiler.plan import Kernel


def _copy(ctx: Context, src: Value, dst: Value, offset: tuple[int, ...], source: str,
          first_core: int = 0) -> int:
    """Copy all of ``src`` into ``dst`` at ``offset`` (per dim), tiled; returns tiles."""
    sets = ctx.sets
    budget = ctx.capacity // sets
    item = src.dtype.itemsize
    tile = choose_tile(src.shape, set(), budget,
                       lambda t: _numel(t) * item, source)
    boxes = tiles_of(src.shape, tile)
    cores = min(ctx.cores, len(boxes))
    bufs = []
    for c in range(cores):
        arena = Arena(f"sram{c}", ctx.capacity)
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
    node = kernel.anchor
    spec: g.Pad = node.spec
    x, out = node.inputs[0], node.out
    top, bottom, left, right = spec.pads
    lead = out.shape[:-2]
    h, w = out.shape[-2:]
    lead_box = tuple((0, n) for n in lead)
    strips = [((0, top), (0, w)), ((h - bottom, h), (0, w)),
              ((top, h - bottom), (0, left)), ((top, h - bottom), (w - right, w))]
    strips = [s for s in strips if s[0][1] > s[0][0] and s[1][1] > s[1][0]]
    item = out.dtype.itemsize
    strip_elems = max((_numel(box_shape(s)) for s in strips), default=1)
    fill_tile = choose_tile(lead + (1,), set(), ctx.capacity // 4,
                            lambda t: _numel(t) * strip_elems * item, node.source)
    arena = Arena("sram0", ctx.capacity)
    fill = arena.alloc(fill_tile[:-1] + (strip_elems,), out.dtype, "pad fill")
    ctx.em.emit("core0.vpu", Binary(BinaryKind.add, Scalar(spec.value), Scalar(0.0), fill),
                node.source)
    for lead_tile in tiles_of(lead, fill_tile[:-1]):
        for rows, cols in strips:
            box = lead_tile + (rows, cols)
            store_box(ctx, out, box, sub(fill, box_shape(box)), 0, node.source)
    _copy(ctx, x, out, (0,) * len(lead) + (top, left), node.source, 1 % ctx.cores)
