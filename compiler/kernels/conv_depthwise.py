"""A depthwise convolution (one filter per channel: MobileNet's, ConvNeXt's) on the vector
unit. As matmuls each channel is a group of its own with K = N = 1, one array fold per
channel and tap; on the vector unit every tap is one multiply and one add over a tile of
all its channels at the lanes' rate:

    acc[c, y, x] += w[c, i, j] * window[c, y * sh + i * dh, x * sw + j * dw]

A tile is ``ty`` output rows of ``ct`` channels of one image. Its zero-padded window
``[ct, rows, cols]`` is built in SRAM as the implicit GEMM builds its (border strips
zeroed, the interior by one strided DMA, from an NHWC image through a permuted view);
each tap's operand is a strided view of it and the tap's weights a ``[ct, 1, 1]`` view of
the weights as stored, broadcast over the pixels. The accumulator is channels first
``[ct, pixels]``, so the shared finisher stores it (NCHW, or NHWC through a view)."""

from __future__ import annotations

from dataclasses import dataclass

from archsim.config.model import ceil_div
from archsim.config.names import sram_space, vpu_engine
from compiler import graph as g
from compiler.cost import COMMAND_TOLERANCE, DRAM_EFFICIENCY, Cost, load_bandwidth, vector_rate
from compiler.emit import Arena
from compiler.ir.operands import DramRef, Scalar, Slice, SramRef
from compiler.ir.ops import Binary, BinaryKind, Cast, Load
from compiler.kernels.common import Context, TileSteps, pipeline
from compiler.kernels.conv_geometry import (
    epilogue_bytes, finisher, image_load, tile_buffers,
)
from compiler.kernels.conv_per_tap import valid_range
from compiler.kernels.matmul import accumulator_dtype
from compiler.kernels.vector import sub
from compiler.plan import Kernel


def is_depthwise(node: g.Node) -> bool:
    """One input channel and one filter per group, every channel its own group."""
    spec, w = node.spec, node.inputs[1]
    return spec.groups > 1 and w.shape[1] == 1 and w.shape[0] == spec.groups


@dataclass(frozen=True)
class DepthwiseTiling:
    channels: int
    """Channels a tile (``ct``)."""
    out_rows: int
    """Output rows a tile (``ty``)."""
    cost: Cost


def _window(ty: int, ow: int, kernel: tuple[int, int], stride: tuple[int, int],
            dilation: tuple[int, int]) -> tuple[int, int]:
    """Input rows and columns a tile of ``ty`` output rows reads (padded coordinates)."""
    return ((ty - 1) * stride[0] + (kernel[0] - 1) * dilation[0] + 1,
            (ow - 1) * stride[1] + (kernel[1] - 1) * dilation[1] + 1)


def _shapes(node: g.Node) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    spec = node.spec
    return (spec.image_shape(node.inputs[0], spec.channels_last_in),
            spec.image_shape(node.out, spec.channels_last_out))


def _sram(ct: int, rows: int, cols: int, ty: int, ow: int, taps: int, item: int,
          out_item: int, cast: bool, epi: int, sets: int, tile: bool) -> int:
    """Scratchpad one core needs for these tiles."""
    pixels = ty * ow
    return sets * (ct * rows * cols * item + ct * taps * item +
                   ct * pixels * (4 * (2 + tile) + (out_item if cast else 0) + epi) +
                   64 * 16) + 8192


def choose_depthwise_tiling(ctx: Context, kernel: Kernel) -> DepthwiseTiling | None:
    """The tiling with the lowest estimate that fits the scratchpad."""
    node, config = kernel.anchor, ctx.config
    spec, (x, w), out = node.spec, node.inputs, node.out
    (batch, channels, _, _), (_, _, oh, ow) = _shapes(node)
    kh, kw = w.shape[2:]
    item, acc_item = x.dtype.itemsize, accumulator_dtype(x.dtype).itemsize
    cast = out.dtype is not accumulator_dtype(x.dtype)
    widen = x.dtype is not accumulator_dtype(x.dtype)
    epi = epilogue_bytes(ctx, kernel, out)
    group = kernel.group is not None and spec.channels_last_out
    lanes, vlat = vector_rate(config, acc_item), config.core.vector.pipeline_latency_cycles
    setup = config.core.dma.setup_latency_cycles + config.dram.latency_cycles + \
        config.noc.latency_cycles
    options = []
    for ct in sorted({min(channels, c) for c in (16, 32, 64, 128, 256, 512, channels)}):
        for ty in sorted({ceil_div(oh, k) for k in range(1, oh + 1)}):
            rows, cols = _window(ty, ow, (kh, kw), tuple(spec.stride), tuple(spec.dilation))
            if _sram(ct, rows, cols, ty, ow, kh * kw, item + 4 * widen, out.dtype.itemsize,
                     cast, epi, ctx.sets, group) > ctx.capacity:
                continue
            tiles = batch * ceil_div(channels, ct) * ceil_div(oh, ty)
            cores = min(ctx.cores, tiles)
            per_core = ceil_div(tiles, cores)
            loads = ct * rows * cols * item + ct * kh * kw * item
            stores = ct * ty * ow * (out.dtype.itemsize + epi)
            epi_ops = len(kernel.group.nodes) if kernel.group is not None else 0
            # per tap a multiply and an add (the first tap's add is none: the fills
            # of the border take its place), then the cast and the epilogue
            vpu = (2 * kh * kw + cast + epi_ops) * (vlat + ct * ty * ow / lanes) + 4 * vlat
            if widen:  # the window widened to f32 once
                vpu += 2 * vlat + ct * rows * cols / lanes
            load_bw = min(load_bandwidth(config),
                          config.dram_sustained_bytes_per_cycle * DRAM_EFFICIENCY / cores)
            cost = Cost(vpu_cycles=per_core * vpu,
                        dma_cycles=per_core * (loads / load_bw + 2 * setup / max(
                            1, config.core.dma.engines - 1) +
                            stores / config.core.dma.bandwidth_bytes_per_cycle),
                        dram_bytes=tiles * (loads + stores),
                        serial_cycles=2 * setup + loads / load_bw + vpu / max(1, per_core))
            options.append((cost.estimate(config), tiles, DepthwiseTiling(ct, ty, cost)))
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
    rows, cols = _window(ty, ow, (kh, kw), (sh, sw), (dh, dw))
    acc_dtype = accumulator_dtype(x.dtype)
    cast = out.dtype is not acc_dtype
    widen = x.dtype is not acc_dtype
    tiles = [(n, c0, y0) for n in range(batch) for c0 in range(0, channels, ct)
             for y0 in range(0, oh, ty)]
    cores = min(ctx.cores, len(tiles))
    sets = ctx.sets
    bufs = []
    for c in range(cores):
        arena = Arena(sram_space(c), ctx.capacity)
        alloc = arena.alloc
        bufs.append({
            "x": [alloc((ct, rows, cols), x.dtype, "depthwise window") for _ in range(sets)],
            "w": [alloc((ct, kh * kw), x.dtype, "depthwise weights") for _ in range(sets)],
            # a 16-bit image is widened once per tile: the products accumulate in f32
            "xf": [alloc((ct, rows, cols), acc_dtype, "depthwise window, widened")
                   for _ in range(sets)] if widen else [],
            "wf": [alloc((ct, kh * kw), acc_dtype, "depthwise weights, widened")
                   for _ in range(sets)] if widen else [],
            "tmp": [alloc((ct, ty * ow), acc_dtype, "depthwise product")
                    for _ in range(sets)],
            "acc": [alloc((ct, ty * ow), acc_dtype, "conv accumulator") for _ in range(sets)],
            **tile_buffers(ctx, kernel, arena, ct, ty, ow, cast),
        })
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    counts = [0] * cores
    vpu_of = [vpu_engine(c) for c in range(cores)]
    for t, (n, c0, y0) in enumerate(tiles):
        core = t % cores
        q = counts[core] % sets
        counts[core] += 1
        cc = (c0, min(c0 + ct, channels))
        nc, (r0, r1) = cc[1] - cc[0], (y0, min(y0 + ty, oh))
        nrows = r1 - r0
        b = bufs[core]

        def load(core=core, b=b, q=q, n=n, cc=cc, nc=nc, r0=r0, nrows=nrows) -> None:
            wbuf = sub(b["w"][q], (nc, 1, kh, kw))
            ctx.em.emit(ctx.em.dma(core, "load"), Load(
                _weights(ctx, w, cc), wbuf), source)
            window = sub(b["x"][q], (nc, rows, cols))
            top = r0 * sh - ph  # input row of the window's first row
            ya, yb = valid_range(0, (nrows - 1) * sh + (kh - 1) * dh + 1, top, 1, height)
            xa, xb = valid_range(0, cols, -pw, 1, width)
            strides = (rows * cols, cols, 1)
            used = (nrows - 1) * sh + (kh - 1) * dh + 1
            for first, shape in ((0, (nc, ya, cols)), (yb * cols, (nc, used - yb, cols)),
                                 (ya * cols, (nc, yb - ya, xa)),
                                 (ya * cols + xb, (nc, yb - ya, cols - xb))):
                if 0 not in shape:  # the border the padding covers
                    strip = SramRef(window.space, window.offset + first * window.dtype.itemsize,
                                    shape, window.dtype, strides)
                    ctx.em.emit(vpu_of[core], Binary(BinaryKind.add, Scalar(0.0),
                                                     Scalar(0.0), strip), source)
            if yb > ya and xb > xa:
                inside = SramRef(window.space, window.offset +
                                 (ya * cols + xa) * window.dtype.itemsize,
                                 (1, nc, yb - ya, xb - xa), window.dtype,
                                 (nc * rows * cols, rows * cols, cols, 1))
                ctx.em.emit(ctx.em.dma(core, "load"), image_load(
                    ctx, x, spec.channels_last_in, (n, n + 1), cc,
                    Slice(top + ya, top + yb), Slice(xa - pw, xb - pw), inside), source)
            if widen:
                ctx.em.emit(vpu_of[core], Cast(window, sub(b["xf"][q], window.shape)), source)
                ctx.em.emit(vpu_of[core], Cast(sub(b["w"][q], (nc, kh * kw)),
                                               sub(b["wf"][q], (nc, kh * kw))), source)

        def compute(core=core, b=b, q=q, nc=nc, nrows=nrows) -> None:
            window = b["xf" if widen else "x"][q]
            item = window.dtype.itemsize
            acc = sub(b["acc"][q], (nc, nrows, ow))
            tmp = sub(b["tmp"][q], (nc, nrows, ow))
            wbuf = b["wf" if widen else "w"][q]
            for i in range(kh):
                for j in range(kw):
                    tap = SramRef(window.space,
                                  window.offset + (i * dh * cols + j * dw) * item,
                                  (nc, nrows, ow), window.dtype,
                                  (rows * cols, sh * cols, sw))
                    weight = SramRef(wbuf.space, wbuf.offset + (i * kw + j) * item,
                                     (nc, 1, 1), wbuf.dtype, (kh * kw, 1, 1))
                    first = i == 0 and j == 0
                    ctx.em.emit(vpu_of[core], Binary(BinaryKind.mul, tap, weight,
                                                     acc if first else tmp), source)
                    if not first:
                        ctx.em.emit(vpu_of[core], Binary(BinaryKind.add, acc, tmp, acc),
                                    source)

        box = ((n, n + 1), cc, (r0, r1), (0, ow))
        store = finisher(ctx, kernel, core, b, q, box, (nc, nrows * ow), cast)
        per_core[core].append(TileSteps(load, compute, store))
    pipeline(per_core, sets - 1)


def _weights(ctx: Context, w: g.Value, cc: tuple[int, int]) -> DramRef:
    """The weights of channels ``cc`` as stored, ``[c, 1, kh, kw]``."""
    kh, kw = w.shape[2:]
    return DramRef(ctx.view(w).tensor, (Slice(*cc), Slice(0, 1), Slice(0, kh), Slice(0, kw)))
