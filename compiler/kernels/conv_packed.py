"""Convolution with its taps packed into K by DMA (im2col in the scratchpad).

For few input channels per group the implicit GEMM (:mod:`compiler.kernels.conv`)
multiplies K = channels per tap: a 3-channel stem fills 3 of a 128-row array. Here
each tap's input window ``[c, pixels]`` (strided, zero where it falls in the padding)
is loaded by DMA straight into its rows of one packed operand ``X [taps x c, pixels]``,
so one matmul has K = taps x c, as an im2col lowering has (SCALE-Sim lowers every
convolution so). The expansion is paid in DMA (each input element is loaded once per
tap that reads it, strided runs charged whole DRAM granules) and SRAM (the packed
buffer), not in vector work.

The matmul runs in whichever orientation the array prefers
(:func:`~archsim.matrix.matmul_cycles`): pixels as the streamed rows
(``X^T [pixels, K] @ W [K, o]``, transposed back to NCHW once per tile) or output
channels as the streamed rows (``W [o, K] @ X [K, pixels]``, NCHW directly). Taps
are packed ``taps`` at a time (one matmul per pack, accumulated). The tiling and the
orientation are chosen by the cost model (:func:`choose_packed_tiling`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from archsim.config.model import MatrixConfig, ceil_div
from archsim.config.names import sram_space, vpu_engine
from archsim.matrix import matmul_cycles
from compiler import graph as g
from compiler.graph import Value
from compiler.cost import COMMAND_TOLERANCE, DRAM_EFFICIENCY, Cost, load_bandwidth, \
    loads_in_flight, tile_sizes, vector_rate
from compiler.emit import Arena
from compiler.ir.dtypes import DType
from compiler.ir.operands import Scalar, Slice, SramRef
from compiler.ir.ops import Binary, BinaryKind, Load, MatMul, Transpose
from compiler.kernels.common import Context, TileSteps, pipeline
from compiler.kernels.conv_geometry import (
    conv_tiles, epilogue_bytes, epilogue_reads, image_load, padded_window, pixels_finisher, stored_ref,
    tile_buffers, valid_range,
)
from compiler.kernels.epilogue import FinishCost, finish_cost, plain_finish, store_cycles
from compiler.kernels.matmul import accumulator_dtype
from compiler.kernels.vector import sub
from compiler.plan import Kernel


@dataclass(frozen=True)
class PackedTiling:
    """A tile is ``out_rows`` output rows x ``out_channels`` output channels of one
    image and group; each matmul covers ``taps`` kernel taps of every input channel of
    the group (K = taps x channels). ``pixels_major``: pixels are the matmul's rows."""

    out_rows: int
    out_channels: int
    taps: int
    pixels_major: bool
    cost: Cost


def row_span(ow: int, sw: int) -> int:
    """Input columns one output row of a tap reads (loaded contiguously: one DRAM run;
    the matmul's operand view skips the columns between strided pixels)."""
    return (ow - 1) * sw + 1


def weights_as_stored(cg: int, ntaps: int) -> bool:
    """K's (tap, channel) order is one stride in the weights as loaded ``[o, c, kh,
    kw]`` when there is one tap (a 1x1 convolution: K is the channels) or one channel
    per group (depthwise: K is the taps): the array then takes its stationary tile as a
    transposed view of them (the operand feed reads the tile by columns, as it reads
    ``W^T`` in the channels-major orientation) and the vector unit rearranges nothing.
    The buffers the rearranged weights would take hold the next tiles' weights instead:
    a tile's weights load while the tiles before it still compute on theirs."""
    return ntaps == 1 or cg == 1


def packed_sram_bytes(window: int, pix: int, ot: int, cg: int, ntaps: int, taps: int,
                      pixels_major: bool, item: int, out_item: int, cast: bool, epi: int,
                      sets: int) -> int:
    """Scratchpad one core needs for a tile of ``pix`` output pixels whose tap windows
    are ``window`` elements per channel."""
    packed = taps * cg * window * item
    # as loaded, and rearranged (or, read as stored, a second tile's as loaded)
    weights = 2 * ot * cg * ntaps * item
    acc = ot * pix * (4 * (1 + pixels_major) + (out_item if cast else 0) + epi)
    return sets * (packed + weights + acc + 16 * 64 * 8) + 8192


def padding_fills(kernel: tuple[int, int], stride: tuple[int, int],
                  dilation: tuple[int, int], padding: tuple[int, int],
                  in_size: tuple[int, int], out_size: tuple[int, int]) -> tuple[int, int]:
    """``(taps, elements)``: the taps whose window reaches into the padding somewhere,
    and the elements per channel their border strips hold over the whole output (what
    the vector unit zero-fills)."""
    span = row_span(out_size[1], stride[1])
    taps = elements = 0
    for i in range(kernel[0]):
        valid_rows = _inside(i, 0, stride, dilation, padding, in_size, out_size[0])
        for j in range(kernel[1]):
            first = j * dilation[1] - padding[1]
            valid_cols = max(0, min(span, in_size[1] - first) - max(0, -first))
            strips = (out_size[0] - valid_rows) * span + valid_rows * (span - valid_cols)
            taps += strips > 0
            elements += strips
    return taps, elements


def _inside(t: int, axis: int, stride: tuple[int, int], dilation: tuple[int, int],
            padding: tuple[int, int], in_size: tuple[int, int], count: int) -> int:
    """Output positions along ``axis`` whose tap-``t`` input lies inside the input."""
    first = t * dilation[axis] - padding[axis]
    return sum(1 for p in range(count) if 0 <= first + p * stride[axis] < in_size[axis])


def choose_packed_tiling(ctx: Context, geo_out: tuple[int, int], kernel: tuple[int, int],
                         stride: tuple[int, int], fills: tuple[int, int], batch: int,
                         groups: int,
                         cg: int, og: int,
                         dtype: DType, out_item: int, cast: bool, epi: int, epi_ops: int,
                         arrays: int, capacity: int | None = None,
                         epi_dram: int | None = None,
                         finish: FinishCost | None = None) -> PackedTiling | None:
    """The packed-taps tiling with the lowest estimated time (``compiler.cost``) that fits
    the scratchpad; None when none fits. ``cg``/``og`` are per group; ``epi`` is the
    fused epilogue's scratchpad bytes per output element, ``epi_dram`` the DRAM bytes it
    reads per output element (:func:`~compiler.kernels.conv_geometry.epilogue_reads`;
    None: ``epi``); ``finish`` the tile's cast and epilogue on the vector unit
    (:func:`~compiler.kernels.epilogue.finish_cost`; None: ``cast + epi_ops`` passes
    reading and writing the tile)."""
    config = ctx.config
    capacity = ctx.capacity if capacity is None else capacity
    matrix, dma = config.core.matrix, config.core.dma
    oh, ow = geo_out
    ntaps = kernel[0] * kernel[1]
    item = dtype.itemsize
    setup = dma.setup_latency_cycles + config.dram.latency_cycles + config.noc.latency_cycles
    granule = config.dram.access_granularity_bytes
    vlat = config.core.vector.pipeline_latency_cycles
    lanes = vector_rate(config, item)
    span = row_span(ow, stride[1])
    if finish is None:
        finish = plain_finish(config, cast + epi_ops)
    run_bytes = ceil_div(span * item, granule) * granule  # one DRAM run per window row
    # every height: the last tile of an image is what is left, and a short last tile
    # shortens what shows after the last matmul (its transpose to NCHW and store)
    heights = range(1, oh + 1)
    fill_rows = max(1, min(ntaps, matrix.rows // cg))  # taps filling the array's rows
    packs = sorted({ntaps, fill_rows, min(ntaps, 2 * fill_rows), ceil_div(ntaps, 2),
                    ceil_div(ntaps, 4)})
    options = []
    majors = (True, False) if stride[1] == 1 else (True,)
    for ty, ot, tp, pixels_major in itertools.product(heights, tile_sizes(og, matrix.cols),
                                                      packs, majors):
        pix = ty * ow
        need = packed_sram_bytes(ty * span, pix, ot, cg, ntaps, tp, pixels_major, item,
                                 out_item, cast, epi, ctx.sets)
        if need > capacity:
            continue
        tiles = batch * groups * ceil_div(og, ot) * ceil_div(oh, ty)
        cores = min(ctx.cores, tiles)
        per_core = ceil_div(tiles, cores)
        load_bw = min(load_bandwidth(config),
                      config.dram_sustained_bytes_per_cycle * DRAM_EFFICIENCY / cores)
        last = oh - (ceil_div(oh, ty) - 1) * ty  # the last tile's rows
        mxu_full = _tile_mxu(pix, ntaps, tp, cg, ot, pixels_major, matrix, dtype)
        mxu_last = _tile_mxu(last * ow, ntaps, tp, cg, ot, pixels_major, matrix, dtype)
        # the mean tile (an image's row tiles: all full but the last)
        mxu = mxu_full + (mxu_last - mxu_full) / ceil_div(oh, ty)
        taps_bytes = ntaps * cg * ty * run_bytes
        weights = ot * cg * ntaps * item
        # the tile's store and what the epilogue reads from DRAM (a residual), not its
        # scratch buffers, which stay in the scratchpad. The reads run on the load
        # engines (:func:`~compiler.kernels.epilogue.finish_tile`) but are counted on
        # the store's side: counted with the loads, ResNet-50's residual layers on
        # atom took tilings that simulate up to 20% slower (BENCHMARKS, fourteenth
        # session), so this stays an approximation
        out_bytes = pix * ot * (out_item + (epi if epi_dram is None else epi_dram))
        # loads on the load engines (their latencies overlapping in flight), the
        # stores on the engine kept for them (:meth:`~compiler.emit.Emitter.dma`)
        loading = (taps_bytes + weights) / load_bw + (ntaps + 1) * setup / loads_in_flight(config)
        storing = store_cycles(config, out_bytes, cores)
        npacks = ceil_div(ntaps, tp)
        direct = weights_as_stored(cg, ntaps)
        # the accumulator's transpose to NCHW, the cast, the fused epilogue's passes
        def finishing(elements: int) -> float:
            return finish.cycles(vlat, elements) + \
                pixels_major * (vlat + elements / vector_rate(config, 4))
        tail = finishing(pix * ot)
        # after the last matmul: the last tile's passes, behind what is left of the
        # previous tile's (they start when its matmul ends; the vector unit runs in
        # order, so a weight rearrangement of the last tile's second pack waits for
        # them too, and only its first pack's matmul overlaps them). A vector-bound
        # tiling has that backlog in its vector time already.
        overlap = mxu_last if direct else mxu_last / npacks
        backlog = max(0.0, tail - overlap) if last < ty else 0.0
        tail_last = finishing(last * ow * ot)
        # weight rearrangement (none when the array reads them as stored), zero fills
        # of the taps reaching into the padding
        rearrange = 0 if direct else vlat + weights / item / lanes  # the first pack's
        vpu = tail + vlat + (0 if direct else (npacks - 1) * vlat) + rearrange + \
            4 * fills[0] * vlat + \
            fills[1] * cg / ceil_div(oh, ty) / lanes
        # a pipeline of steps, one pack each (lower_conv_packed): a step's loads run
        # while the step before computes. A tile's first step loads its weights, one
        # command on one DMA engine (at that engine's bandwidth, or the core's DRAM
        # share), beside its first pack's windows on the other engines, and the vector
        # unit rearranges the pack's weights before its matmul; a later step loads
        # only its pack's windows (its taps' commands in flight together). The steps
        # chain: each waits for the longer of its loads and the previous matmul (the
        # core's arrays take its tiles in turn), the first's loads show whole.
        turns = min(arrays, per_core)
        step_mxu = mxu / npacks / turns
        windows = taps_bytes / npacks / load_bw + setup
        weights_in = setup + weights / min(dma.bandwidth_bytes_per_cycle, load_bw)
        if not direct:  # the pack's weights rearranged once in
            weights_in += vlat + weights / item / npacks / lanes
        if direct or not fills[0]:
            lead = max(weights_in, windows + weights / load_bw)
        else:  # a window's load waits for its border fills, which the vector unit
            # runs after the rearrangement it queued first, which waits for the weights
            lead = weights_in + windows
        # (a step's loads reuse the buffers of the step ``sets`` back, so at most
        # ``sets`` steps are between their loads' start and their matmul's end)
        pack_mxu = mxu / npacks
        chain = lead + (per_core - 1) * max(lead, step_mxu, (lead + pack_mxu) / ctx.sets) + \
            per_core * (npacks - 1) * max(windows, step_mxu, (windows + pack_mxu) / ctx.sets) + \
            step_mxu
        mxu_cycles = max(per_core * mxu / turns, chain)
        if per_core * vpu < mxu_cycles:
            tail_last += backlog
        # the stores follow each other on their engine from the first tile's, after
        # its loads, its matmuls and its passes; with one engine they queue with the
        # loads. The last tile's store comes after everything.
        if dma.engines > 1:
            dma_cycles = max(per_core * loading,
                             lead + mxu_full + tail + (per_core - 1) * storing)
        else:
            dma_cycles = per_core * (loading + storing)
        last_store = setup + store_cycles(config, out_bytes * last / ty, cores)
        cost = Cost(mxu_cycles=mxu_cycles + tail_last,
                    vpu_cycles=per_core * vpu, dma_cycles=dma_cycles,
                    dram_bytes=tiles * (taps_bytes + weights + out_bytes),
                    serial_cycles=last_store)
        commands = tiles * (ntaps * 2 + ceil_div(ntaps, tp) + 6)
        options.append((cost.estimate(config), -cores, commands,
                        PackedTiling(ty, ot, tp, pixels_major, cost)))
    if not options:
        return None
    fastest = min(o[0] for o in options)
    near = [o for o in options if o[0] <= fastest * (1 + COMMAND_TOLERANCE)]
    return min(near, key=lambda o: (o[2], o[0]))[3]


def _tile_mxu(pix: int, ntaps: int, tp: int, cg: int, ot: int, pixels_major: bool,
              matrix: MatrixConfig, dtype: DType) -> int:
    """Array cycles of one tile of ``pix`` pixels: one matmul per pack of ``tp`` taps."""
    mxu = 0
    for t in range(0, ntaps, tp):
        k = min(tp, ntaps - t) * cg
        mxu += matmul_cycles(pix, k, ot, matrix, dtype) if pixels_major else \
            matmul_cycles(ot, k, pix, matrix, dtype)
    return mxu


def lower_conv_packed(ctx: Context, kernel: Kernel, tiling: PackedTiling) -> None:
    """Emit the convolution of ``kernel`` with ``tiling`` (taps packed into K by DMA)."""
    node = kernel.anchor
    spec: g.Conv2d = node.spec
    (x, w), out = node.inputs, node.out
    batch, cin, _, _ = spec.image_shape(x, spec.channels_last_in)
    cout, cg, kh, kw = w.shape
    _, _, oh, ow = spec.image_shape(out, spec.channels_last_out)
    groups = spec.groups
    og, ntaps = cout // groups, kh * kw
    ty, ot, tp, pixels_major = (tiling.out_rows, tiling.out_channels, tiling.taps,
                                tiling.pixels_major)
    acc_dtype = accumulator_dtype(x.dtype)
    cast = out.dtype is not acc_dtype
    sets, source = ctx.sets, node.source
    arrays = ctx.config.core.matrix.arrays if ctx.options.multi_array else 1
    sw = spec.stride[1]
    span = row_span(ow, sw)
    direct = weights_as_stored(cg, ntaps)
    tiles = [((nb, nb + 1), gi, o0, y0, 0) for nb in range(batch) for gi in range(groups)
             for o0 in range(0, og, ot) for y0 in range(0, oh, ty)]
    cores = min(ctx.cores, len(tiles))
    bufs = []
    for c in range(cores):
        arena = Arena(sram_space(c), ctx.capacity)
        alloc = arena.alloc
        bufs.append({
            "x": [alloc((tp * cg, ty * span), x.dtype, "conv packed taps")
                  for _ in range(sets)],
            "wraw": [alloc((ot, cg, kh, kw), x.dtype, "conv weight tile")
                     for _ in range(sets * (2 if direct else 1))],
            "w": [alloc((ntaps * cg, ot), x.dtype, "conv weight taps") for _ in range(sets)]
            if not direct else None,
            "acc": [alloc((ot, ty * ow), acc_dtype, "conv accumulator") for _ in range(sets)],
            "nchw": [alloc((ot, ty * ow), acc_dtype, "conv output tile")
                     for _ in range(sets)] if pixels_major else None,
            **tile_buffers(ctx, kernel, arena, ot, ty, ow, cast, not pixels_major),
        })
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    step_counts = [0] * cores
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    packs = [taps[t:t + tp] for t in range(0, ntaps, tp)]
    started: set[int] = set()  # cores whose first tile is emitted
    loaded = [0] * cores  # tiles whose weights each core has loaded
    for tile in conv_tiles(tiles, cores, sets, arrays, og, ot, (oh, ow), (ty, ow)):
        core, q, mxu, nb, gi = tile.core, tile.q, tile.mxu, tile.images[0], tile.gi
        # weights the array reads as stored are needed only with the input windows:
        # when the core's store queue is empty (nothing before this kernel stored
        # there), the first tile's windows load on it alongside the weights, so the
        # prologue pays one DMA latency, not two (weights to rearrange are needed
        # first, and a queue holding earlier stores would hold the windows back)
        prologue = direct and core not in started and \
            ctx.em.idle(ctx.em.dma(core, "store"))
        started.add(core)
        wq = loaded[core] % len(bufs[core]["wraw"])  # the tile's weight buffer
        loaded[core] += 1
        oo, rows, pix, no, b = tile.oo, tile.rows, tile.pix, tile.no, bufs[tile.core]
        chans = (gi * cg, gi * cg + cg)
        for s, pack in enumerate(packs):
            xs = step_counts[core] % sets
            step_counts[core] += 1
            first = s * tp  # the pack's first tap

            def load(core=core, b=b, xs=xs, q=q, pack=pack, s=s, nb=nb, rows=rows, oo=oo,
                     no=no, pix=pix, chans=chans, first=first, prologue=prologue,
                     wq=wq) -> None:
                raw = sub(b["wraw"][wq], (no, cg, kh, kw))
                if s == 0:  # the tile's weights
                    wref = stored_ref(ctx, w, (Slice(*oo), Slice(0, cg), Slice(0, kh),
                                               Slice(0, kw)))
                    ctx.em.emit(ctx.em.dma(core, "load"), Load(wref, raw), source)
                if not direct:  # else the array reads them as stored
                    _rearrange(ctx, core, raw, sub(b["w"][q], (len(pack), cg, no),
                                                   first * cg * no), first, source)
                nrows = rows[1] - rows[0]
                for u, tap in enumerate(pack):
                    _load_rows(ctx, x, nb, chans, rows, tap, spec, core,
                               sub(b["x"][xs], (cg, nrows, span), u * cg * nrows * span),
                               source, "store" if prologue and s == 0 else "load")

            def compute(core=core, b=b, xs=xs, q=q, pack=pack, first=first, s=s, no=no,
                        pix=pix, mxu=mxu, wq=wq) -> None:
                k, nrows = len(pack) * cg, pix // ow
                packed = b["x"][xs]
                if direct:  # [k, o] as a view of the weights [o, c, kh, kw]
                    raw = b["wraw"][wq]
                    weights = SramRef(raw.space, raw.offset + first * raw.dtype.itemsize,
                                      (k, no), raw.dtype, (1, cg * ntaps))
                else:
                    weights = sub(b["w"][q], (k, no), first * cg * no)
                if pixels_major:  # X^T [pix, k] @ W [k, o]: every sw-th loaded column
                    xt = SramRef(packed.space, packed.offset, (nrows, ow, k), packed.dtype,
                                 (span, sw, nrows * span))
                    op = MatMul(xt, weights, sub(b["acc"][q], (pix, no)), s > 0)
                else:  # W^T [o, k] @ X [k, pix]
                    wt = SramRef(weights.space, weights.offset, (no, k), weights.dtype,
                                 (cg * ntaps, 1) if direct else (1, no))
                    op = MatMul(wt, sub(packed, (k, pix)), sub(b["acc"][q], (no, pix)),
                                s > 0)
                ctx.em.emit(mxu, op, source)

            store = (lambda: None)
            if s == len(packs) - 1:
                box = ((nb, nb + 1), oo, rows, (0, ow))
                store = pixels_finisher(ctx, kernel, core, b, q, box, (no, pix), cast,
                                        pixels_major)
            per_core[core].append(TileSteps(load, compute, store))
    pipeline(per_core, sets - 1)


def _rearrange(ctx: Context, core: int, raw: SramRef, dst: SramRef, first: int,
               source: str) -> None:
    """``dst`` [taps, c, o] := a pack's taps of the tile's weights ``raw`` [o, c, kh, kw]
    in (tap, c) order (one rearrangement per pack, so the next pack's overlaps this
    one's matmul)."""
    no, cg, kh, kw = raw.shape
    ntaps, ntp = kh * kw, dst.shape[0]
    taps_view = SramRef(raw.space, raw.offset + first * raw.dtype.itemsize, (no, cg, ntp),
                        raw.dtype, (cg * ntaps, ntaps, 1))
    ctx.em.emit(vpu_engine(core), Transpose(taps_view, dst, (2, 1, 0)), source)


def _load_rows(ctx: Context, x: Value, n: int, chans: tuple[int, int], rows: tuple[int, int],
               tap: tuple[int, int], spec: g.Conv2d, core: int, dst: SramRef,
               source: str, queue: str = "load") -> None:
    """``dst`` [c, rows, span] := the input columns tap ``(i, j)`` reads for each output
    row (contiguous from its first pixel's column to its last's), zero in the padding
    (:func:`~compiler.kernels.conv_geometry.padded_window`, its rows ``sh`` apart): one
    strided DMA with one DRAM run per row."""
    (i, j), (sh, _), (dh, dw), (ph, pw) = tap, spec.stride, spec.dilation, spec.padding
    _, _, height, width = spec.image_shape(x, spec.channels_last_in)
    _, _, span = dst.shape
    row0, col0 = i * dh - ph, j * dw - pw  # input row/col of output pixel (0, 0)
    ya, yb = valid_range(rows[0], rows[1], row0, sh, height)
    if yb <= ya or min(span, width - col0) <= max(0, -col0):  # the tap reads only padding
        ctx.em.emit(vpu_engine(core), Binary(BinaryKind.add, Scalar(0.0), Scalar(0.0), dst),
                    source)
        return
    placed = padded_window(ctx, core, dst, (rows[0] * sh + i * dh, j * dw), (ph, pw),
                           (height, width), 0.0, source, row_step=sh)
    if placed is not None:
        inside, in_rows, in_cols = placed
        ctx.em.emit(ctx.em.dma(core, queue),
                    image_load(ctx, x, spec.channels_last_in, (n, n + 1), chans, in_rows,
                               in_cols, inside), source)


def packed_inputs(ctx: Context, kernel: Kernel) -> dict:
    """The arguments of :func:`choose_packed_tiling` for ``kernel``'s convolution."""
    node = kernel.anchor
    (x, w), out = node.inputs, node.out
    cout, cg, kh, kw = w.shape
    acc_dtype = accumulator_dtype(x.dtype)
    spec = node.spec
    image = spec.image_shape(x, spec.channels_last_in)[2:]
    geo_out = spec.image_shape(out, spec.channels_last_out)[2:]
    fills = padding_fills((kh, kw), tuple(spec.stride), tuple(spec.dilation),
                          tuple(spec.padding), image, geo_out)
    return dict(geo_out=geo_out, kernel=(kh, kw), stride=tuple(spec.stride),
                fills=fills, batch=x.shape[0], groups=node.spec.groups, cg=cg,
                og=cout // node.spec.groups, dtype=x.dtype, out_item=out.dtype.itemsize,
                cast=out.dtype is not acc_dtype, epi=epilogue_bytes(ctx, kernel, out),
                epi_dram=epilogue_reads(kernel, out),
                finish=finish_cost(ctx.config.core.vector, kernel.group, out,
                                   acc_dtype.itemsize, out.dtype is not acc_dtype),
                epi_ops=len(kernel.group.nodes) if kernel.group else 0,
                arrays=ctx.config.core.matrix.arrays if ctx.options.multi_array else 1)
