"""How a patch embedding (:mod:`compiler.kernels.conv_patch`) is tiled: which
convolutions it takes, its tilings, and the one with the lowest estimated time."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, fields

from archsim.config.model import MatrixConfig, ceil_div
from archsim.errors import LoweringError
from archsim.matrix import back_to_back_saving, matmul_cycles
from compiler import graph as g
from compiler.cost import COMMAND_TOLERANCE, DRAM_EFFICIENCY, Cost, load_bandwidth, \
    loads_in_flight, split_sizes, tile_sizes, vector_rate
from compiler.ir.dtypes import DType
from compiler.kernels.common import Context
from compiler.kernels.conv_geometry import epilogue_bytes
from compiler.kernels.matmul import accumulator_dtype
from compiler.plan import Kernel


MIN_RUN_BYTES = 16
"""Shortest run of a patch row the DMA writes into SRAM (``kw`` elements from an NCHW
image, ``kw x C`` from an NHWC one). The simulator charges a DMA's SRAM side nothing
per run, so a 2x2 patch of a 2-byte NCHW image (4-byte runs: a transpose) would be
free here and is left to the implicit GEMM."""


def is_patch_embedding(node: g.Node) -> bool:
    """A convolution of one group whose stride is its kernel (of more than one tap),
    without padding or dilation, whose patch rows land in runs of at least
    :data:`MIN_RUN_BYTES`: its windows tile the image."""
    spec: g.Conv2d = node.spec
    x, w = node.inputs
    _, c, kh, kw = w.shape
    run = kw * x.dtype.itemsize * (c if spec.channels_last_in else 1)
    return spec.groups == 1 and tuple(spec.stride) == (kh, kw) and kh * kw > 1 and \
        tuple(spec.dilation) == (1, 1) and tuple(spec.padding) == (0, 0) and \
        tuple(spec.pads_end) == (0, 0) and run >= MIN_RUN_BYTES


@dataclass(frozen=True)
class PatchSizes:
    """A pixel block is ``out_rows`` output rows of ``images`` images (several only
    with whole images, pixels-major); a channel tile ``out_channels`` filters. The
    blocks are dealt to ``grid[0]`` rows of cores and the channel tiles to
    ``grid[1]`` columns (``grid[0] x grid[1]`` cores). Weights stream in chunks of
    ``chunk_rows`` kernel rows (of one channel, or whole channels); with ``kept`` a
    core keeps every weight tile it loads for its next blocks."""

    images: int
    out_rows: int
    out_channels: int
    pixels_major: bool
    grid: tuple[int, int]
    chunk_rows: int
    kept: bool

    def __post_init__(self) -> None:
        if self.images > 1 and not self.pixels_major:
            raise LoweringError(f"patch tiling of {self.images} images a block must run "
                                "pixels-major: a channels-major tile [o, pixels] holds "
                                "one image")


@dataclass(frozen=True)
class PatchTiling(PatchSizes):
    """Sizes with their estimate."""

    cost: Cost


@dataclass(frozen=True)
class PatchShape:
    """What the estimate and the lowering both need of the convolution."""

    batch: int
    channels: int
    filters: int
    kernel: tuple[int, int]
    out_size: tuple[int, int]
    nhwc: tuple[bool, bool]

    @property
    def k(self) -> int:
        return self.channels * self.kernel[0] * self.kernel[1]

    def chunks(self, rows: int) -> list[tuple[int, int]]:
        """K cut into chunks of at most ``rows`` kernel rows, each a box of the weights
        ``[O, C, kh, kw]``: ``(first, last)`` kernel row in K's order (NCHW: ``c kh +
        i``, a chunk within one channel or of whole channels; NHWC: ``i``, every
        channel)."""
        kh = self.kernel[0]
        units = kh if self.nhwc[0] else self.channels * kh
        out = []
        for u0 in range(0, units, rows):
            u1 = min(u0 + rows, units)
            if self.nhwc[0] or u0 // kh == (u1 - 1) // kh or (u0 % kh == 0 == u1 % kh):
                out.append((u0, u1))
                continue
            cuts = sorted({u0, u1, *range(-(-u0 // kh) * kh, u1, kh)})
            out += list(zip(cuts, cuts[1:]))
        return out

    def chunk_rows(self) -> list[int]:
        """Kernel rows per chunk worth trying: halves of a channel's rows down to one,
        and whole channels."""
        kh = self.kernel[0]
        options = {kh, 1}
        r = kh
        while r > 1:
            r = -(-r // 2)
            options.add(r)
        if not self.nhwc[0]:
            options |= {kh * m for m in range(1, self.channels + 1) if self.channels % m == 0}
        return sorted(options)


def patch_shape(node: g.Node) -> PatchShape:
    """The convolution's sizes, whichever order its image and output are stored in."""
    spec: g.Conv2d = node.spec
    (x, w), out = node.inputs, node.out
    batch, channels, _, _ = spec.image_shape(x, spec.channels_last_in)
    filters, _, kh, kw = w.shape
    _, _, oh, ow = spec.image_shape(out, spec.channels_last_out)
    return PatchShape(batch, channels, filters, (kh, kw), (oh, ow),
                  (spec.channels_last_in, spec.channels_last_out))


def finish_passes(shape: PatchShape, pixels_major: bool, cast: bool, epi_ops: int) -> int:
    """Vector passes over a finished tile: the transpose to the output's order (a
    pixels-major tile into NCHW; a channels-major one into NHWC only for an
    epilogue, else the store writes it through a view), the cast, the epilogue."""
    nhwc_out = shape.nhwc[1]
    turn = (not nhwc_out) if pixels_major else (nhwc_out and epi_ops > 0)
    return turn + cast + epi_ops


def choose_patch_tiling(ctx: Context, kernel: Kernel) -> PatchTiling | None:
    """The patch tiling with the lowest estimated time (``compiler.cost``) that fits
    the scratchpad; None when none fits."""
    shape = patch_shape(kernel.anchor)
    matrix = ctx.config.core.matrix
    oh = shape.out_size[0]
    heights = sorted({ceil_div(oh, parts) for parts in range(1, oh + 1)})
    widths = sorted(set(split_sizes(shape.filters, matrix.cols, ctx.cores)) |
                    {t for t in (matrix.cols // 2,) if 0 < t < shape.filters})
    options = []
    for ty, ot, pixels_major, r in itertools.product(heights, widths, (True, False),
                                                      shape.chunk_rows()):
        blocks_per_image, tiles = ceil_div(oh, ty), ceil_div(shape.filters, ot)
        for ni in (tile_sizes(shape.batch, 2) if ty == oh and pixels_major else [1]):
            blocks = ceil_div(shape.batch, ni) * blocks_per_image
            for columns in range(1, min(ctx.cores, tiles) + 1):
                for rows in sorted({1, min(blocks, ctx.cores // columns)}):
                    for kept in (False, True):
                        option = PatchSizes(ni, ty, ot, pixels_major, (rows, columns), r, kept)
                        found = _estimate(ctx, kernel, shape, option)
                        if found is not None:
                            options.append(found)
    if not options:
        return None
    fastest = min(o[0] for o in options)
    near = [o for o in options if o[0] <= fastest * (1 + COMMAND_TOLERANCE)]
    return min(near, key=lambda o: (o[1], o[0]))[2]


def _estimate(ctx: Context, kernel: Kernel, shape: PatchShape, option: PatchSizes
              ) -> tuple[float, int, PatchTiling] | None:
    """(estimated cycles, commands, tiling) of ``option``; None when its buffers do
    not fit the scratchpad."""
    config = ctx.config
    (x, _), out = kernel.anchor.inputs, kernel.anchor.out
    matrix, dma, vector = config.core.matrix, config.core.dma, config.core.vector
    arrays = matrix.arrays if ctx.options.multi_array else 1
    dtype, item, out_item, sets = x.dtype, x.dtype.itemsize, out.dtype.itemsize, ctx.sets
    cast = out.dtype is not accumulator_dtype(dtype)
    epi = epilogue_bytes(ctx, kernel, out)
    epi_ops = len(kernel.group.nodes) if kernel.group else 0
    (kh, kw), (oh, ow), k, nhwc_in = shape.kernel, shape.out_size, shape.k, shape.nhwc[0]
    ni, ty, ot, (rows, columns) = option.images, option.out_rows, option.out_channels, \
        option.grid
    pix = ni * ty * ow
    blocks = ceil_div(shape.batch, ni) * ceil_div(oh, ty)
    tiles = ceil_div(shape.filters, ot)
    mine_p, mine_w = ceil_div(blocks, rows), ceil_div(tiles, columns)
    chunks = shape.chunks(option.chunk_rows)
    unit = k // (kh if nhwc_in else shape.channels * kh)  # K elements a kernel row
    kc = max(u1 - u0 for u0, u1 in chunks) * unit
    ring = sets * min(arrays, mine_w)
    p_bytes = pix * k * item
    passes = finish_passes(shape, option.pixels_major, cast, epi_ops)
    finish = pix * ot * (4 * (option.pixels_major and not shape.nhwc[1]) +
                         (out_item if cast else 0) + epi +
                         4 * (shape.nhwc[1] and epi_ops > 0 and not option.pixels_major))
    need = sets * p_bytes + (mine_w * len(chunks) if option.kept else ring) * ot * kc * item + \
        nhwc_in * ring * ot * kc * item + sets * mine_w * pix * ot * 4 + sets * finish + 8192
    if need > ctx.capacity:
        return None
    setup = dma.setup_latency_cycles + config.dram.latency_cycles + config.noc.latency_cycles
    granule = config.dram.access_granularity_bytes
    # one DRAM run per input row a block reads (from NCHW, per channel too)
    run = ow * kw * item * (shape.channels if nhwc_in else 1)
    p_dram = ni * ty * kh * ceil_div(run, granule) * granule * (1 if nhwc_in else shape.channels)
    w_bytes = ot * k * item

    # a core loads its blocks once and a weight tile once, or once per block
    p_loads, w_loads = mine_p, mine_w * (1 if option.kept else mine_p)
    # over the grid: every block once per core column; each tile once per core row
    # that keeps it, else once per block
    dram = columns * blocks * p_dram + (rows if option.kept else blocks) * tiles * w_bytes + \
        shape.batch * shape.filters * oh * ow * out_item
    cores = rows * columns
    load_bw = min(load_bandwidth(config),
                  config.dram_sustained_bytes_per_cycle * DRAM_EFFICIENCY / cores)
    out_bytes = pix * ot * (out_item + epi)
    p_parts = 1 if ni > 1 else min(ty, max(1, dma.engines - 1))  # a block's DMAs
    commands = p_loads * p_parts + w_loads * len(chunks) * (1 + nhwc_in)
    # loads on the load engines, their latencies overlapping in flight; the stores on
    # the engine kept for them (:meth:`~compiler.emit.Emitter.dma`), beside the loads
    # when there are two engines or more
    # (the first block's and chunk's loads are serial, below: what the others add)
    first_loads = setup + (p_dram / p_parts + ot * kc * item) / load_bw
    loading = max(0.0, (p_loads * p_dram + w_loads * w_bytes) / load_bw +
                  commands * setup / loads_in_flight(config) - first_loads)
    storing = mine_p * mine_w * out_bytes / dma.bandwidth_bytes_per_cycle
    dma_cycles = max(loading, storing) if dma.engines > 1 else loading + storing
    # a tile's chunks accumulate back to back on one array; a core's tiles share its
    # arrays
    mm = _chunked_matmul(matrix, dtype, pix, ot, option.pixels_major,
                         tuple((u1 - u0) * unit for u0, u1 in chunks))
    vlat, acc_rate = vector.pipeline_latency_cycles, vector_rate(config, 4)
    tail = passes * (vlat + pix * ot / acc_rate)
    rearrange = nhwc_in * (len(chunks) * vlat + ot * k / vector_rate(config, item))
    # streamed through a ring, a chunk's load waits for the matmul that read its slot
    # last, and the in-order load queue with it: about one chunk's matmul more
    streaming = 0 if option.kept else mm / len(chunks)
    cost = Cost(mxu_cycles=mine_p * ceil_div(mine_w, arrays) * mm,
                vpu_cycles=mine_p * mine_w * tail + w_loads * rearrange,
                dma_cycles=dma_cycles, dram_bytes=dram,
                serial_cycles=first_loads +
                rearrange / len(chunks) + mm / len(chunks) + tail + setup +
                out_bytes / dma.bandwidth_bytes_per_cycle + streaming)
    commands = cores * (commands + mine_p * mine_w * (len(chunks) + 1 + passes))
    sizes = {f.name: getattr(option, f.name) for f in fields(option)}
    return cost.estimate(config), commands, PatchTiling(**sizes, cost=cost)


@functools.lru_cache(maxsize=4096)
def _chunked_matmul(matrix: MatrixConfig, dtype: DType, pix: int, ot: int,
                    pixels_major: bool, ks: tuple[int, ...]) -> float:
    """Cycles of one tile's matmuls over its K chunks ``ks``, back to back on one array
    (the same for every grid and weight policy of a tiling: the search asks often)."""
    one = (lambda k: matmul_cycles(pix, k, ot, matrix, dtype)) if pixels_major else \
        (lambda k: matmul_cycles(ot, k, pix, matrix, dtype))
    return sum(one(k) for k in ks) - (len(ks) - 1) * back_to_back_saving(matrix)
