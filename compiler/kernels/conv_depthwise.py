"""A depthwise convolution (one filter per channel: MobileNet's, ConvNeXt's) on the vector
unit. As matmuls each channel is a group of its own with K = N = 1, one array fold per
channel and tap; on the vector unit every tap is one multiply-add (``MulAdd``, the sum
kept in registers over the taps) over a tile of all its channels at the lanes' rate:

    acc[c, y, x] += w[c, i, j] * window[c, y * sh + i * dh, x * sw + j * dw]

A tile is ``ty`` output rows of ``ct`` channels of one image. Its zero-padded window
``[ct, rows, cols]`` is built in SRAM as the implicit GEMM builds its (border strips
zeroed, the interior by one strided DMA, from an NHWC image through a permuted view);
each tap's operand is a strided view of it and the tap's weights a ``[ct, 1, 1]`` view of
the weights as stored, broadcast over the pixels. The accumulator is channels first
``[ct, pixels]``, so the shared finisher stores it (NCHW, or NHWC through a view)."""

from __future__ import annotations

from dataclasses import dataclass

from archsim.config.model import NpuConfig, VectorConfig, ceil_div
from archsim.config.names import sram_space, vpu_engine
from archsim.errors import CapacityError
from compiler import graph as g
from compiler.cost import COMMAND_TOLERANCE, DRAM_EFFICIENCY, Cost
from compiler.emit import Arena
from compiler.ir.operands import DramRef, Slice, SramRef, numel
from compiler.ir.ops import Binary, BinaryKind, Cast, Load, MulAdd
from compiler.kernels.common import Context, TileSteps, box_shape, pipeline
from compiler.kernels.conv_geometry import (
    conv_tiles, finisher, image_load, padded_window, stored_ref, tile_buffers, valid_range,
    window_size,
)
from compiler.kernels.epilogue import pass_order
from compiler.kernels.matmul import accumulator_dtype
from compiler.kernels.vector import buffer_values, group_values, sub, value_box
from compiler.plan import Kernel


def is_depthwise(node: g.Node) -> bool:
    """One input channel and one filter per group, every channel its own group (a
    one-channel convolution with one filter too)."""
    spec, w = node.spec, node.inputs[1]
    return w.shape[1] == 1 and w.shape[0] == spec.groups


@dataclass(frozen=True)
class DepthwiseTiling:
    channels: int
    """Channels a tile (``ct``)."""
    out_rows: int
    """Output rows a tile (``ty``)."""
    cost: Cost


def _shapes(node: g.Node) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    spec = node.spec
    return (spec.image_shape(node.inputs[0], spec.channels_last_in),
            spec.image_shape(node.out, spec.channels_last_out))


def _buffers(ctx: Context, kernel: Kernel, ct: int, ty: int, core: int) -> dict:
    """Core ``core``'s buffers for tiles of ``ct`` channels and ``ty`` output rows, every
    buffer set; raises CapacityError when they do not fit its scratchpad (the chooser
    tries them, so a tiling it takes is one the lowering can allocate)."""
    node, sets = kernel.anchor, ctx.sets
    spec, (x, w), out = node.spec, node.inputs, node.out
    (_, _, oh, ow) = _shapes(node)[1]
    kh, kw = w.shape[2:]
    rows, cols = window_size((kh, kw), tuple(spec.stride), tuple(spec.dilation), ty, ow)
    acc = accumulator_dtype(x.dtype)
    widen = x.dtype is not acc
    arena = Arena(sram_space(core), ctx.capacity)
    alloc = arena.alloc
    return {
        "x": [alloc((ct, rows, cols), x.dtype, "depthwise window") for _ in range(sets)],
        "w": [alloc((ct, kh * kw), x.dtype, "depthwise weights") for _ in range(sets)],
        # a 16-bit image is widened once per tile: the products accumulate in f32
        "xf": [alloc((ct, rows, cols), acc, "depthwise window, widened")
               for _ in range(sets)] if widen else [],
        "wf": [alloc((ct, kh * kw), acc, "depthwise weights, widened")
               for _ in range(sets)] if widen else [],
        "acc": [alloc((ct, ty * ow), acc, "conv accumulator") for _ in range(sets)],
        **tile_buffers(ctx, kernel, arena, ct, ty, ow, out.dtype is not acc),
    }


def _candidates(channels: int, out_rows: int) -> tuple[list[int], list[int]]:
    """Tile sizes the chooser tries: channels a tile (16 to 512 by powers of two, or all
    of them) and output rows a tile (the image's rows split evenly into 1, 2, ...)."""
    return (sorted({min(channels, c) for c in (16, 32, 64, 128, 256, 512, channels)}),
            sorted({ceil_div(out_rows, k) for k in range(1, out_rows + 1)}))


def _pass(vector: VectorConfig, elements: int, nbytes: int, cost: int) -> int:
    """Cycles of one vector command over ``elements`` moving ``nbytes`` through the
    scratchpad: the vector engine's timing (``archsim.vector``), its lanes or its
    scratchpad bandwidth, whichever is slower, after its pipeline latency."""
    compute = ceil_div(elements, vector.lanes) * cost
    if vector.sram_bandwidth_bytes_per_cycle:
        compute = max(compute, ceil_div(nbytes, vector.sram_bandwidth_bytes_per_cycle))
    return vector.pipeline_latency_cycles + compute


def _stream(config: NpuConfig) -> float:
    """Bytes per cycle one transfer moves: a DMA engine's rate, or its core's NoC link's
    or scratchpad port's if lower."""
    return min(config.core.dma.bandwidth_bytes_per_cycle,
               config.noc.link_bandwidth_bytes_per_cycle,
               config.core.scratchpad.port_bandwidth_bytes_per_cycle)


def _latency(config: NpuConfig) -> int:
    """Cycles before a transfer's first byte: DMA setup, DRAM and NoC latency."""
    return config.core.dma.setup_latency_cycles + config.dram.latency_cycles + \
        config.noc.latency_cycles


def _inside(node: g.Node, y0: int, nrows: int, cols: int
            ) -> tuple[int, tuple[int, int], tuple[int, int]]:
    """For the tile of ``nrows`` output rows from ``y0``: the window rows it reads, and
    the window's rows and columns ``[a, b)`` inside the image (the rest is padding)."""
    spec, (_, _, height, width) = node.spec, _shapes(node)[0]
    kh = node.inputs[1].shape[2]
    (sh, _), (dh, _), (ph, pw) = spec.stride, spec.dilation, spec.padding
    used = (nrows - 1) * sh + (kh - 1) * dh + 1
    return (used, valid_range(0, used, y0 * sh - ph, 1, height),
            valid_range(0, cols, -pw, 1, width))


@dataclass(frozen=True)
class _Work:
    """One tile's commands, as :func:`lower_conv_depthwise` emits them."""

    compute: int
    """Vector cycles before the epilogue: the border's fills, the widening casts, a
    multiply for the first tap, a chained multiply-add for each other, the cast of the
    result."""
    epilogue: int
    """Vector cycles of the epilogue: a channels-last copy of the tile if the output is
    NHWC, then one pass per fused op."""
    ready: float
    """Cycles from the multiplies' start until the epilogue's operands are in (0: it
    has none): the finisher's loads are issued after the multiplies, but a DMA engine
    runs ahead of the vector unit, so they start beside the window's and their latency
    passes with it; the epilogue waits for their bytes only. (Counting their latency
    too overestimated a one-tile layer with DRAM 2,000 cycles away by 27% once the taps
    became multiply-adds.)"""
    loads: int
    """Bytes the tile's loads bring: its weights, its window's interior, the
    epilogue's operands."""
    stores: int
    """Bytes the tile's stores write."""


def _tile_work(ctx: Context, kernel: Kernel, nc: int, y0: int, ty: int) -> _Work:
    """The commands of the tile of channels ``nc`` and output rows from ``y0`` (a tile
    of ``ty`` rows, fewer at the bottom)."""
    node, vector = kernel.anchor, ctx.config.core.vector
    spec, (x, w), out, group = node.spec, node.inputs, node.out, kernel.group
    oh, ow = _shapes(node)[1][2:]
    kh, kw = w.shape[2:]
    acc = accumulator_dtype(x.dtype)
    item, acc_item, out_item = x.dtype.itemsize, acc.itemsize, out.dtype.itemsize
    costs = vector.costs
    rows, cols = window_size((kh, kw), tuple(spec.stride), tuple(spec.dilation), ty, ow)
    nrows = min(ty, oh - y0)
    used, (ya, yb), (xa, xb) = _inside(node, y0, nrows, cols)
    strips = (ya * cols, (used - yb) * cols, (yb - ya) * xa, (yb - ya) * (cols - xb))
    compute = sum(_pass(vector, nc * s, nc * s * item, costs.elementwise)
                  for s in strips if s)
    loads = nc * (kh * kw + (yb - ya) * (xb - xa)) * item
    if x.dtype is not acc:  # the window and the weights widened once
        compute += _pass(vector, nc * rows * cols, nc * rows * cols * (item + acc_item),
                         costs.cast)
        compute += _pass(vector, nc * kh * kw, nc * kh * kw * (item + acc_item), costs.cast)
    n = nc * nrows * ow
    # the first tap's multiply starts the pass; each other tap's multiply-add continues
    # it, the sum in registers, reading its pixels and weights
    compute += _pass(vector, n, (2 * n + nc) * acc_item, costs.elementwise)
    compute += (kh * kw - 1) * _pass(vector, n, (n + nc) * acc_item, costs.elementwise)
    cast = out.dtype is not acc
    if cast:
        compute += _pass(vector, n, n * (acc_item + out_item), costs.cast)
    if group is None:
        return _Work(compute, 0, 0.0, loads, n * out_item)
    epilogue = _pass(vector, n, 2 * n * acc_item, costs.copy) if spec.channels_last_out \
        else 0
    stores = n * out_item if ctx.materialized(out) else 0
    box = ((0, 1), (0, nrows), (0, ow), (0, nc)) if spec.channels_last_out else \
        ((0, 1), (0, nc), (0, nrows), (0, ow))
    produced = {v.id for v in group_values(group)[1]}
    operands = 0
    for v in buffer_values(ctx, group, {out.id}):
        size = numel(box_shape(value_box(v, box))) * v.dtype.itemsize
        if v.id not in produced:
            operands += size
        elif ctx.materialized(v):
            stores += size
    order = pass_order(group, out, cast)
    for member in group.nodes:
        inputs, chained = order[member.out.id]
        # a pass reads its inputs and writes its result; a chained one only its other,
        # small, operands (the tile stays in registers)
        moved = sum(numel(box_shape(value_box(v, box))) * v.dtype.itemsize
                    for v in inputs[chained:]
                    if isinstance(v, g.Value) and v.id not in ctx.scalars)
        epilogue += _pass(vector, n, moved + (0 if chained else n * member.out.dtype.itemsize),
                          costs.elementwise)
    ready = operands / _stream(ctx.config)
    return _Work(compute, epilogue, ready, loads + operands, stores)


def _estimate(ctx: Context, kernel: Kernel, ct: int, ty: int) -> Cost:
    """The tiles' cost. Tile ``t`` runs on core ``t % cores`` and each core runs its
    tiles as a pipeline (a tile's loads while the one before computes, its store
    after), so the first core, which has the most tiles, takes its busiest stage's sum
    plus one tile's other stages (the first load before any compute, the last compute
    and store after them). The cores share DRAM: all tiles' bytes at the sustained
    rate, then the last compute. Latencies: the first load's and the last store's."""
    node, config = kernel.anchor, ctx.config
    (batch, channels, _, _), (_, _, oh, _) = _shapes(node)
    chunks, row_tiles = ceil_div(channels, ct), ceil_div(oh, ty)
    stream, latency = _stream(config), _latency(config)
    last = channels - (chunks - 1) * ct  # channels of the last chunk, ct of the others
    kinds = {nc: [_tile_work(ctx, kernel, nc, y0, ty) for y0 in range(0, oh, ty)]
             for nc in {ct, last}}
    tiles = batch * chunks * row_tiles
    cores = min(ctx.cores, tiles)
    busy = stage = load = store = 0.0  # the first core's sums
    for t in range(0, tiles, cores):
        chunk = t // row_tiles % chunks
        work = kinds[ct if chunk < chunks - 1 else last][t % row_tiles]
        busy += work.compute + work.epilogue
        stage += max(work.compute, work.ready) + work.epilogue
        load += work.loads / stream
        store += work.stores / stream
    count = ceil_div(tiles, cores)
    chunk_bytes = {nc: sum(w.loads + w.stores for w in row) for nc, row in kinds.items()}
    dram_bytes = batch * ((chunks - 1) * chunk_bytes[ct] + chunk_bytes[last])
    dram = dram_bytes / (config.dram_sustained_bytes_per_cycle * DRAM_EFFICIENCY)
    queues = [load, store] if config.core.dma.engines > 1 else [load + store]
    one = (stage + load + store) / count  # the first core's mean tile
    total = 2 * latency + max(*(s + one - s / count for s in (stage, *queues)),
                              dram + stage / count)
    busiest = max(busy, dram, *queues)
    return Cost(vpu_cycles=busy, dma_cycles=max(queues), dram_bytes=dram_bytes,
                serial_cycles=total - busiest)


def choose_depthwise_tiling(ctx: Context, kernel: Kernel) -> DepthwiseTiling | None:
    """The tiling with the lowest estimate whose buffers fit the scratchpad (within
    ``COMMAND_TOLERANCE`` of it, the one with the fewest tiles)."""
    (batch, channels, _, _), (_, _, oh, _) = _shapes(kernel.anchor)
    options = []
    channel_tiles, row_tiles = _candidates(channels, oh)
    for ct in channel_tiles:
        for ty in row_tiles:
            try:
                _buffers(ctx, kernel, ct, ty, 0)
            except CapacityError:
                continue
            tiles = batch * ceil_div(channels, ct) * ceil_div(oh, ty)
            cost = _estimate(ctx, kernel, ct, ty)
            options.append((cost.estimate(ctx.config), tiles, DepthwiseTiling(ct, ty, cost)))
    if not options:
        return None
    fastest = min(o[0] for o in options)
    near = [o for o in options if o[0] <= fastest * (1 + COMMAND_TOLERANCE)]
    return min(near, key=lambda o: (o[1], o[0]))[2]


def lower_conv_depthwise(ctx: Context, kernel: Kernel, tiling: DepthwiseTiling) -> None:
    node = kernel.anchor
    spec: g.Conv2d = node.spec
    (x, w), out, source = node.inputs, node.out, node.source
    (batch, channels, height, width), (_, _, oh, ow) = _shapes(node)
    kh, kw = w.shape[2:]
    (sh, sw), (dh, dw), (ph, pw) = spec.stride, spec.dilation, spec.padding
    ct, ty = tiling.channels, tiling.out_rows
    rows, cols = window_size((kh, kw), (sh, sw), (dh, dw), ty, ow)
    acc_dtype = accumulator_dtype(x.dtype)
    cast = out.dtype is not acc_dtype
    widen = x.dtype is not acc_dtype
    # a tile's channels are its output channels (one group: each channel its own filter)
    tiles = [((n, n + 1), 0, c0, y0, 0) for n in range(batch)
             for c0 in range(0, channels, ct) for y0 in range(0, oh, ty)]
    cores = min(ctx.cores, len(tiles))
    sets = ctx.sets
    bufs = [_buffers(ctx, kernel, ct, ty, c) for c in range(cores)]
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    vpu_of = [vpu_engine(c) for c in range(cores)]
    for tile in conv_tiles(tiles, cores, sets, 1, channels, ct, (oh, ow), (ty, ow)):
        core, q, n, cc, (r0, r1) = tile.core, tile.q, tile.images[0], tile.oo, tile.rows
        nc, nrows, b = tile.no, r1 - r0, bufs[core]

        def load(core=core, b=b, q=q, n=n, cc=cc, nc=nc, r0=r0, nrows=nrows) -> None:
            wbuf = sub(b["w"][q], (nc, 1, kh, kw))
            ctx.em.emit(ctx.em.dma(core, "load"), Load(
                _weights(ctx, w, cc), wbuf), source)
            used = window_size((kh, kw), (sh, sw), (dh, dw), nrows, ow)[0]  # rows it reads
            window = b["x"][q]
            placed = padded_window(ctx, core, SramRef(window.space, window.offset,
                                                      (nc, used, cols), window.dtype,
                                                      (rows * cols, cols, 1)),
                                   (r0 * sh, 0), (ph, pw), (height, width), 0.0, source)
            if placed is not None:
                inside, in_rows, in_cols = placed
                ctx.em.emit(ctx.em.dma(core, "load"), image_load(
                    ctx, x, spec.channels_last_in, (n, n + 1), cc, in_rows, in_cols, inside),
                    source)

        def compute(core=core, b=b, q=q, nc=nc, nrows=nrows) -> None:
            if widen:  # here, not in load: the vector unit would wait there for the DMA
                window = sub(b["x"][q], (nc, rows, cols))
                ctx.em.emit(vpu_of[core], Cast(window, sub(b["xf"][q], window.shape)), source)
                ctx.em.emit(vpu_of[core], Cast(sub(b["w"][q], (nc, kh * kw)),
                                               sub(b["wf"][q], (nc, kh * kw))), source)
            window = b["xf" if widen else "x"][q]
            item = window.dtype.itemsize
            acc = sub(b["acc"][q], (nc, nrows, ow))
            wbuf = b["wf" if widen else "w"][q]
            for i in range(kh):
                for j in range(kw):
                    tap = SramRef(window.space,
                                  window.offset + (i * dh * cols + j * dw) * item,
                                  (nc, nrows, ow), window.dtype,
                                  (rows * cols, sh * cols, sw))
                    weight = SramRef(wbuf.space, wbuf.offset + (i * kw + j) * item,
                                     (nc, 1, 1), wbuf.dtype, (kh * kw, 1, 1))
                    op = Binary(BinaryKind.mul, tap, weight, acc) if i == j == 0 else \
                        MulAdd(acc, tap, weight, acc, chained=True)
                    ctx.em.emit(vpu_of[core], op, source)

        box = (tile.images, cc, tile.rows, tile.cols)
        store = finisher(ctx, kernel, core, b, q, box, (nc, nrows * ow), cast)
        per_core[core].append(TileSteps(load, compute, store))
    pipeline(per_core, sets - 1)


def _weights(ctx: Context, w: g.Value, cc: tuple[int, int]) -> DramRef:
    """The weights of channels ``cc`` as stored, ``[c, 1, kh, kw]``."""
    kh, kw = w.shape[2:]
    return stored_ref(ctx, w, (Slice(*cc), Slice(0, 1), Slice(0, kh), Slice(0, kw)))
