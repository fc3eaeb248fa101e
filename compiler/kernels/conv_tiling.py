"""How the implicit-GEMM convolution tiles its work: the cost model's choice among
(images, output rows, output columns, output channels, input-channel chunk, taps per
matmul, resident weights) under the scratchpad's capacity."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from archsim.config.model import MatrixConfig, NpuConfig, ceil_div
from archsim.matrix import matmul_cycles
from compiler.cost import (
    COMMAND_TOLERANCE,
    DRAM_EFFICIENCY,
    Cost,
    load_bandwidth,
    tile_sizes,
    vector_rate,
)
from compiler.ir.dtypes import DType
from compiler.kernels.common import Context
from compiler.kernels.conv_arrays import k_split
from compiler.kernels.conv_geometry import Geometry, row_block
from compiler.kernels.conv_interleave import interleaved, interleaves, stacked_rows
from compiler.kernels.epilogue import FinishCost, plain_finish, store_cycles
from compiler.kernels.conv_staging import (
    StagingCost, sharers, staged_cost, staging_pays,
)


@dataclass(frozen=True)
class ConvTiling:
    """A tile is ``out_rows`` output rows x ``out_channels`` output channels of
    ``images`` images of one group (several images only when ``out_rows`` is the whole
    image: they are stacked into one matmul's rows, the batch folded into the GEMM's
    M), accumulated over input-channel chunks of ``in_channels``; each matmul covers
    ``taps`` consecutive kernel taps (K = taps x in_channels). With
    ``resident_weights`` every core keeps each weight block it has loaded (only the
    blocks of the output-channel tiles it meets: :func:`blocks_met`)."""

    images: int
    out_rows: int
    out_channels: int
    in_channels: int
    taps: int
    resident_weights: bool
    cost: Cost
    direct_phases: bool = False
    """From an NHWC image: each stride phase of the window loads by its own strided
    DMA (else the window loads whole and the vector unit splits its phases)."""
    out_cols: int = 0
    """Output columns a tile covers (0: the whole row). A tile of fewer reads a window
    of ``(out_cols - 1) * sw + (kw - 1) * dw + 1`` input columns (a 1-D convolution,
    one output row of thousands of columns, fits a small scratchpad only so)."""
    blocks_kept: bool = False
    """With ``resident_weights``: each core keeps only the weight blocks it meets
    (:func:`blocks_met`), else every block at its place in the weights."""
    row_blocks: bool = False
    """Each kernel row is a step of its own (NCHW image): its window is the tile's
    output rows' input rows of that kernel row (one strided DMA, rows ``sh`` apart) and
    its weights that row's taps, so a step holds ``1 / kh`` of the weights (CLIP's
    32x32 patch embedding: 6 KiB per filter whole, 192 bytes a row)."""
    staged_weights: bool = False
    """Weight blocks staged in shared SRAM: the first core to need a block loads it
    from DRAM into shared SRAM, and every core that needs it copies it from there
    (:mod:`compiler.kernels.conv_staging`)."""
    k_split: bool = False
    """A tile's K blocks are dealt to the core's arrays, each summing its own partial
    (:func:`~compiler.kernels.conv_arrays.k_split`), instead of splitting its pixels among them."""
    interleaved: int = 0
    """Non-zero: the window's phase planes interleaved (NCHW image, one channel chunk:
    :func:`~compiler.kernels.conv_interleave.interleaved`), each entry stacking this many
    plane rows (:func:`~compiler.kernels.conv_interleave.stacked_rows`): a matmul that
    many kernel rows of phases, its A operand a view of the planes (K = ``R x kw / sw x
    sh x sw x c``, the kernel padded to whole phases with zero weights), no tap copied
    side by side."""


def blocks_met(groups: int, o_tiles: int, tiles: int, cores: int) -> int:
    """Distinct (group, output-channel tile) weight blocks one core meets when the
    tiles, output-channel tile innermost, are dealt to the cores in turn: with one
    group core ``c`` meets tiles ``c, c + cores, ...``, whose channel tiles repeat with
    period ``o_tiles / gcd(o_tiles, cores)``; with several, at most every block."""
    per_core = ceil_div(tiles, cores)
    if groups == 1:
        return min(per_core, o_tiles // math.gcd(o_tiles, cores))
    return min(per_core, groups * o_tiles)


def weight_loads(resident: bool, blocks_kept: bool, sets: int) -> int:
    """Buffers weight blocks load into: one when each core keeps the blocks it meets
    (each loads once, on the core's first tiles), else one per buffer set."""
    return 1 if resident and blocks_kept else sets


def column_widths(ow: int, unit: int) -> list[int]:
    """Tile widths below the output row's ``ow`` columns: ``ow`` cut into 2, 3, 4, 6,
    8, 12... near-equal tiles, and ``unit`` (the array's rows: a tile's pixels are
    its matmuls' rows) times powers of two."""
    widths, parts = set(tile_sizes(ow, unit)), 2
    while parts <= ow:
        widths.update({ceil_div(ow, parts), ceil_div(ow, parts + parts // 2)})
        parts *= 2
    return sorted(w for w in widths if w < ow)


def narrow_channel_tiles(size: int, unit: int) -> list[int]:
    """Channel tiles narrower than ``unit`` (the array's columns for output channels,
    its rows for input-channel chunks): its halves down to an eighth, for convolutions
    whose weights per tile (all taps of a channel chunk: CLIP's 32x32 patch embedding
    holds 6 KiB per output channel) leave no room in a small scratchpad otherwise. A
    narrow chunk packs more taps into K (``taps``). Tried only when no tile of
    :func:`~compiler.cost.tile_sizes` fits: where one does, the estimate favours
    narrow tiles by 5-10% that simulate 10-30% slower (ResNet-18 on tpu-v4: 157k ->
    203k cycles), an array's idle columns costing more than it sees."""
    return sorted({t for t in (unit // 2, unit // 4, unit // 8) if 0 < t < size})


def tap_packs(matrix: MatrixConfig, taps: int, kw: int, ct: int) -> set[int]:
    """Taps a matmul packs into K, tried: one, and as many as the array's rows hold of
    ``ct``-channel chunks; on an output-stationary array also a kernel row's ``kw``
    when the rows hold fewer.

    There K streams through the array (its rows hold output pixels), so a matmul of
    any K costs one fill and drain per fold (``rows + cols - 2`` cycles): a 3x3
    convolution's chunk of 128 channels on ascend-910b's 64x64 array spends 126 of
    every 254 cycles on them one tap at a time, 126 of 510 three taps at a time (the
    vector unit copying the taps side by side meanwhile). A row's taps, not all nine:
    ResNet-18 on ascend-910b took 169.8k cycles with rows, 177.9k with all nine
    taps and 171.8k with both tried (whole kernels' packing buffers crowd out the
    larger tiles). Only where the fill is a third of a tap's K or more: on a 32x32
    array, 512-channel chunks save 7% of the folds and the vector unit's copies,
    which a one-tile layer cannot overlap, cost more (ResNet-18's 7x7 x 512 layer
    81,007 -> 98,493 cycles on SCALE-Sim's os 32x32, `benchmarks/conv_mapping.py
    --dataflow os`, before this condition)."""
    most = min(taps, max(1, matrix.rows // ct))
    fill = matrix.rows + matrix.cols - 2
    if matrix.dataflow == "os" and kw > most and 3 * fill >= ct:
        return {1, most, min(kw, taps)}
    return {1, most}


def packs_taps(config: NpuConfig) -> bool:
    """Whether the compiler may put several taps' input channels in one matmul's K
    (``runtime.conv_taps: packed``); with ``one`` every convolution runs a tap a
    matmul, as XLA does on TPU."""
    return config.runtime.conv_taps == "packed"


def packed_groups(ntaps: int, taps: int) -> int:
    """Matmuls whose A operand is packed from several taps."""
    return sum(1 for t in range(0, ntaps, taps) if min(taps, ntaps - t) > 1)


def sram_bytes(geo: Geometry, ni: int, ty: int, ot: int, ct: int, taps: int,
               resident: int, item: int, out_item: int, cast: bool, epi: int,
               sets: int, loads: int | None = None) -> int:
    """Scratchpad one core needs (``resident``: bytes of the weight blocks kept;
    ``loads``: buffers weight blocks load into, default ``sets``; with :func:`~compiler.kernels.conv_arrays.k_split`
    the arrays' partials come on top, ``sets x (arrays - 1)`` accumulators)."""
    kh, kw = geo.kernel
    m = ni * ty * geo.out_cols
    window = ni * geo.rows(ty) * geo.cols * ct * item
    weights = ot * ct * kh * kw * item
    pack = packed_groups(kh * kw, taps) * m * taps * ct * item
    stage = taps * m * ct * item if taps > 1 else 0
    acc = 2 * m * ot * 4 + m * ot * ((out_item if cast else 0) + epi)
    # as loaded, and rearranged (or kept)
    weights = (sets if loads is None else loads) * weights + \
        (resident if resident else sets * weights)
    return sets * (2 * window + pack + acc + 16 * 64 * 8) + weights + stage + 8192


Shape = tuple[int, int, int]
"""(images, output rows, output columns) of a tile."""


def _tiers(rows: list[Shape], columns: list[Shape], outs: tuple[list[int], list[int]],
           ins: tuple[list[int], list[int]]
           ) -> list[tuple[list[Shape], list[int], list[int], bool]]:
    """The tilings tried, in tiers: the next only when none of a tier fits. First
    tiles of whole rows and whole array columns of output channels, weights kept
    resident only when all of them fit; then column tiles too, each core keeping only
    the weight blocks it meets (``fallback``); then narrow channel tiles and chunks
    (:func:`narrow_channel_tiles`). The later tiers' options are estimated 5-15%
    faster than the first tier's on some convolutions that fit and simulate slower
    (ResNet-50 on atom: 1,034k -> 1,127k cycles with every option in one tier), and
    a column tile reads its input in strided boxes, which keeps a computed input out
    of shared SRAM (:mod:`compiler.residency`: Wav2Vec2's 1-D convolution on atom,
    estimated 108k against 160k for whole rows, runs 148k against 132k after the op
    computing its input): they stay for scratchpads where nothing else fits."""
    (wide_out, narrow_out), (wide_in, narrow_in) = outs, ins
    return [(rows, wide_out, wide_in, False), (rows + columns, wide_out, wide_in, True),
            (rows + columns, wide_out + narrow_out, wide_in + narrow_in, True)]


def choose_conv_tiling(ctx: Context, geo: Geometry, batch: int, groups: int, cin: int,
                       cout: int, dtype: DType, out_item: int, cast: bool, epi: int,
                       epi_ops: int, arrays: int,
                       capacity: int | None = None,
                       channels_last: tuple[bool, bool] = (False, False),
                       epi_dram: int | None = None,
                       finish: FinishCost | None = None) -> ConvTiling | None:
    """The tiling with the lowest estimated time (``compiler.cost``) that fits the
    scratchpad; None when none fits (the caller falls back to the per-tap kernel).

    ``cin``/``cout`` are per group. ``capacity`` (default: the scratchpad) is the SRAM
    budget the estimate must fit. ``channels_last`` (input, output): an image stored
    NHWC, whose window loads as stride phases (one DMA each, no rearrangement) or
    whose output tile stores as it is (no transpose). ``finish``: the tile's cast and
    fused epilogue on the vector unit (:func:`~compiler.kernels.epilogue.finish_cost`;
    None: ``cast + epi_ops`` passes reading and writing the tile)."""
    nhwc_in, nhwc_out = channels_last
    full = geo
    config = ctx.config
    capacity = ctx.capacity if capacity is None else capacity
    matrix, vector, dma = config.core.matrix, config.core.vector, config.core.dma
    kh, kw = geo.kernel
    ntaps = kh * kw
    item = dtype.itemsize
    lanes, vlat = vector_rate(config, item), vector.pipeline_latency_cycles
    setup = dma.setup_latency_cycles + config.dram.latency_cycles + config.noc.latency_cycles
    granule = config.dram.access_granularity_bytes
    all_weights = batch * groups * cout * cin * ntaps * item
    oh, ow = geo.out_rows, geo.out_cols
    if finish is None:
        finish = plain_finish(config, cast + epi_ops)
    heights = sorted({ceil_div(oh, k) for k in range(1, oh + 1)})
    # whole rows of one image, whole images, or a single row cut into column tiles
    whole = [(1, ty, ow) for ty in heights] + \
        [(ni, oh, ow) for ni in tile_sizes(batch, 2) if ni > 1]
    columns = [(1, 1, tw) for tw in column_widths(ow, matrix.rows)]
    outs = tile_sizes(cout, matrix.cols), narrow_channel_tiles(cout, matrix.cols)
    ins = tile_sizes(cin, matrix.rows), narrow_channel_tiles(cin, matrix.rows)
    options: list[tuple[float, int, ConvTiling]] = []
    # (tile shape, channel tiles, fallback) an earlier tier estimated: none of it fit,
    # and a later tier estimates it alike (tier 3 holds all of tier 2)
    tried: set[tuple[Shape, int, int, bool]] = set()
    for shapes, o_tiles, c_tiles, fallback in _tiers(whole, columns, outs, ins):
        if options:
            break
        for (ni, ty, tw), ot, ct in itertools.product(shapes, o_tiles, c_tiles):
            if ((ni, ty, tw), ot, ct, fallback) in tried:
                continue
            tried.add(((ni, ty, tw), ot, ct, fallback))
            geo = replace(full, out_cols=tw)  # the tile's window
            m = ni * ty * tw
            tiles = groups * ceil_div(batch, ni) * ceil_div(cout, ot) * ceil_div(oh, ty) * \
                ceil_div(ow, tw)
            cores = min(ctx.cores, tiles)
            per_core = ceil_div(tiles, cores)
            # the cores' loads share DRAM once more than one core runs
            load_bw = min(load_bandwidth(config),
                          config.dram_sustained_bytes_per_cycle * DRAM_EFFICIENCY / cores)
            chunks = ceil_div(cin, ct)
            # from an NHWC image with a stride, the phases load directly or are split
            modes = (True, False) if nhwc_in and geo.stride != (1, 1) else (nhwc_in,)
            # the weight blocks a core meets, and the bytes it keeps when they stay
            # resident (only those blocks, or all of the weights)
            met = blocks_met(groups, ceil_div(cout, ot), tiles, cores)
            kept = met * chunks * ot * ct * ntaps * item if fallback else all_weights
            # tiers after the first: an NCHW image's kernel rows may run as steps of
            # their own (:attr:`ConvTiling.row_blocks`)
            blockings = (False, True) if fallback and not nhwc_in and kh > 1 else (False,)
            # array cycles of a tile by (row blocks, taps a matmul): the same whichever
            # weights stay resident and however the phases load
            mxu_of: dict[tuple[bool, int, bool], int] = {}
            dealt_of: dict[tuple[bool, int, bool], int | None] = {}
            combine = (arrays - 1) * (vlat + m * ot / vector_rate(config, 4))
            # ``runtime.conv_taps: one`` (XLA on TPU): one tap's channels a matmul
            inter = packs_taps(config) and interleaves(matrix, geo, cin, ct, groups, nhwc_in)
            for blocked, resident, direct in itertools.product(blockings, (kept, 0), modes):
                steps = chunks * (kh if blocked else 1)  # window loads a tile
                tn0 = kw if blocked else ntaps
                packs = [(g, False) for g in sorted(tap_packs(matrix, tn0, kw, ct))
                         if g == 1 or packs_taps(config)]
                for g, inside in packs + ([(1, True)] if inter and not blocked else []):
                    tgeo = interleaved(geo) if inside else row_block(geo) if blocked else geo
                    tn = kw if blocked else tgeo.kernel[0] * tgeo.kernel[1]
                    trows = tgeo.rows(ty)
                    # interleaved: a matmul R kernel rows of phases, K their taps
                    stack = stacked_rows(tgeo, ct, matrix.rows) if inside else 0
                    row = stack * tgeo.stride[0] * tgeo.kernel[1]
                    ks = [row * ct] * (tgeo.plane_rows(1) // stack) if inside else \
                        [min(g, tn - t) * ct for t in range(0, tn, g)]
                    if (blocked, g, inside) not in mxu_of:
                        mxu_of[blocked, g, inside] = steps * sum(
                            matmul_cycles(m, k, ot, matrix, dtype) for k in ks)
                        dealt_of[blocked, g, inside] = k_split(
                            matrix, dtype, arrays, (ni, ty, tw), ot, ks, combine, steps)
                    mxu, dealt = mxu_of[blocked, g, inside], dealt_of[blocked, g, inside]
                    if inside and len(ks) > min(ceil_div(tn0, p) for p, _ in packs):
                        # the padded taps would take more matmuls than the taps packed
                        # by copies (ResNet's 7x7/2 on a 64-row array: four of K = 48
                        # against three of K <= 63), each one more pass over the pixels:
                        # atom's stem ran 17,945 -> 23,018 cycles in ResNet-18
                        continue
                    need = sram_bytes(tgeo, ni, ty, ot, ct, g, resident, item, out_item,
                                      cast, epi, ctx.sets,
                                      weight_loads(resident > 0, fallback, ctx.sets))
                    if inside:  # the planes written once a stacked row
                        need += (stack - 1) * ctx.sets * ni * trows * tgeo.cols * ct * item
                    if need > capacity:
                        continue
                    if dealt is not None and need + ctx.sets * (arrays - 1) * m * ot * 4 > \
                            capacity:  # no room for the arrays' partials
                        dealt = None
                    mm_groups = len(ks)
                    if nhwc_in:  # runs of a pixel's channels, or a row's when all load
                        run = ct * item * (1 if ct < cin or direct and tgeo.stride != (1, 1)
                                           else tgeo.cols)
                        window = ni * trows * tgeo.cols * ct * item // run * \
                            ceil_div(run, granule) * granule
                    else:
                        window = ni * ct * trows * ceil_div(tgeo.cols * item, granule) * granule
                    if direct:  # only the phases some tap reads
                        window = window * len(tgeo.phases_read()) // \
                            (tgeo.stride[0] * tgeo.stride[1])
                    window_loads = len(tgeo.phases_read()) if direct else 1
                    weights = ot * ct * tn * item
                    # resident: a core loads each weight block it meets once
                    weight_share = min(per_core, met) * steps * weights if resident else \
                        per_core * steps * weights
                    # the store's bytes and the epilogue's DRAM reads (a residual), the
                    # reads counted on the store's side though they take the load
                    # engines (as in :func:`~.conv_packed.choose_packed_tiling`)
                    out_bytes = m * ot * (out_item + (epi if epi_dram is None else epi_dram))
                    loads = per_core * steps * window + weight_share
                    # loads on the load engines; the stores on the engine kept for them
                    # (:meth:`~compiler.emit.Emitter.dma`), beside the loads when there
                    # are two engines or more (the last one after everything: serial)
                    loading = loads / load_bw + per_core * steps * (1 + window_loads) * \
                        setup / max(1, dma.engines - 1)
                    storing = (per_core - 1) * store_cycles(config, out_bytes, cores)
                    dma_cycles = max(loading, storing) if dma.engines > 1 else \
                        loading + storing
                    # phase split, border fills, weight rearrangement
                    split = 0 if direct else 2 * ni * trows * tgeo.cols * ct / lanes
                    if inside:  # R transposes, each of the window but R - 1 plane rows
                        split = stack * (vlat + ni * (trows - (stack - 1) * tgeo.stride[0]) *
                                         tgeo.cols * ct / lanes)
                    vpu = steps * (6 * vlat + split) + weight_share / per_core / item / lanes
                    if g > 1:  # per packed matmul: g tap copies, one transpose of all g
                        vpu += steps * packed_groups(tn, g) * \
                            ((g + 1) * vlat + 2 * g * m * ct / lanes)
                    # after the last matmul (ConvStep.finisher): for an NCHW output one
                    # transpose of the accumulator (a pass over the tile, in column blocks
                    # when the arrays took them), then the cast, if any, and the fused
                    # epilogue's passes, chained; for an NHWC output no transpose
                    tail = finish.cycles(vlat, m * ot) + \
                        (not nhwc_out) * (vlat + m * ot / vector_rate(config, 4))
                    vpu += tail
                    # the first matmul waits for the vector work on the first step's loads
                    # (the window's phases, the weights' rearrangement, one tap group): the
                    # arrays start that much later (when the vector unit bounds the kernel,
                    # this work is already inside its time). Counted for an NHWC output
                    # only, whose short tail otherwise makes one-tile tilings look free
                    # (BENCHMARKS.md, "Channels-last images"); on NCHW it misranks small
                    # batched convolutions (4 x 8 x 8 x 8, 3x3: 2,515 -> 3,338 cycles), so
                    # their estimate is as it was
                    first = 6 * vlat + split + weights / item / lanes + \
                        ((g + 1) * vlat + 2 * g * m * ct / lanes if g > 1 else 0) \
                        if nhwc_out else 0
                    # before any matmul or vector work: the first step's window and
                    # weights, each one command on an engine of its own
                    fill = setup + max(window, weights) / min(dma.bandwidth_bytes_per_cycle,
                                                              load_bw)
                    cost = Cost(mxu_cycles=fill + per_core * mxu / min(arrays, per_core) +
                                first, vpu_cycles=fill + per_core * vpu, dma_cycles=dma_cycles,
                                dram_bytes=cores * loads + tiles * out_bytes,
                                serial_cycles=tail + setup + out_bytes /
                                dma.bandwidth_bytes_per_cycle)
                    commands = tiles * (steps * (8 + mm_groups * (1 + (g + 1) * (g > 1))) + 4)
                    # staged weights (not with resident ones: a core keeping its blocks
                    # loads each once, fewer than ``weight_share`` counts, so staging
                    # would be credited with DRAM bytes the resident tiling never reads)
                    o_tiles = ceil_div(cout, ot)
                    staged = None if resident or inside else staged_cost(config, cost, cores, StagingCost(
                        groups * cout * cin * ntaps * item,
                        sharers(o_tiles, tiles // groups, cores), groups * o_tiles * steps,
                        weight_share, weights, load_bw, setup))
                    for shared, variant in ((False, cost), (True, staged)):
                        if variant is None:
                            continue
                        tiling = ConvTiling(ni, ty, ot, ct, g, resident > 0, variant, direct,
                                            tw if tw < ow else 0, fallback, blocked,
                                            staged_weights=shared, interleaved=stack)
                        if dealt is not None:  # every array on the tile's own matmuls
                            tiling = replace(tiling, k_split=True, cost=replace(
                                variant, mxu_cycles=per_core * steps * dealt + first,
                                vpu_cycles=variant.vpu_cycles + per_core * combine))
                        # (a staged tiling: a copy out of shared SRAM a step)
                        options.append((variant.estimate(config),
                                        commands + tiles * steps * shared, tiling))
    if not options:
        return None
    # ranked by the estimate without dealt K blocks: with them, small tiles estimate
    # faster than they run (ResNet-18's 56x56 layers on tpu-v3: 3-row tiles, estimated
    # 8% under the 19-row tiles, simulate 3% over them); the choice then deals its K
    # blocks where they help, and its estimate says so
    unstaged = [o for o in options if not o[2].staged_weights]
    taken = _taken(unstaged)
    fastest = min(o[0] for o in unstaged)
    return _taken(unstaged + [o for o in options if o[2].staged_weights and
                              staging_pays(o[0], o[2].cost, fastest, taken.cost)])


def _taken(options: list[tuple[float, int, ConvTiling]]) -> ConvTiling:
    """Among the options within :data:`~compiler.cost.COMMAND_TOLERANCE` of the lowest
    estimate, the one issuing the fewest commands."""
    fastest = min(o[0] for o in options)
    near = [o for o in options if o[0] <= fastest * (1 + COMMAND_TOLERANCE)]
    return min(near, key=lambda o: (o[1], o[0]))[2]
