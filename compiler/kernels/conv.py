"""Convolution as implicit GEMM, and pooling, on padded NCHW inputs.

Conv: weight-stationary arrays stream the matmul's M rows, so M is output pixels. A
tile is ``ty`` output rows x an output-channel tile of one image and group. Per input
channel chunk, the window ``[c, rows, cols]`` is loaded once (whole input rows, so long
DRAM runs) and rearranged on the vector engine into stride phases, channels last
(:class:`_Geometry`); each tap's A operand ``[pixels, c]`` is then a contiguous run of
it, B is the tap's weights ``[c, o]`` (kept resident per core when they fit), and the
taps accumulate into one ``[pixels, o]`` accumulator. Arrays taller than the chunk get
several taps packed into K. Output rows come out ``plane_cols`` apart: the extra
columns are computed and dropped when the tile is transposed back to NCHW. Tile sizes
come from the cost model (``choose_conv_tiling``). Windows that cannot be phase-split
inside the input fall back to a strided DRAM load and ``W_tap @ X_tap`` per tap.

Pool: the same window and phase planes; the taps are reduced with max/add over
contiguous pixel runs.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, NamedTuple
from dataclasses import dataclass

from archsim.config.model import ceil_div
from archsim.errors import CapacityError, LoweringError
from archsim.matrix import matmul_cycles
from compiler import graph as g
from compiler.cost import COMMAND_TOLERANCE, DRAM_EFFICIENCY, Cost, load_bandwidth
from compiler.emit import Arena
from compiler.graph import Value

from compiler.ir.operands import DramRef, Scalar, Slice, SramRef
from compiler.ir.dtypes import DType
from compiler.ir.ops import Binary, BinaryKind, Cast, Load, MatMul, Transpose, VCopy
from compiler.kernels.common import Context, TileSteps, pipeline
from compiler.kernels.matmul import accumulator_dtype
from compiler.kernels.vector import (
    emit_compute,
    emit_loads,
    emit_stores,
    bytes_per_element,
    layout,
    store_box,
    sub,
)
from compiler.plan import Kernel


def _window(ctx: Context, x: Value, n: int, chans: tuple[int, int], rows: tuple[int, int],
            tap: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int],
            ow: int, where: str) -> DramRef:
    view = ctx.view(x)
    if view.shape != view.base_shape:
        raise LoweringError(f"{where}: convolution/pool input must be a stored tensor, "
                            f"got a reshaped view")
    (i, j), (sh, sw), (dh, dw) = tap, stride, dilation
    ty = rows[1] - rows[0]
    r0 = rows[0] * sh + i * dh
    c0 = j * dw
    lead = tuple(Slice(v, v + 1) for v in _lead_index(n, x.shape[:-3]))
    return DramRef(view.tensor, lead + (
        Slice(*chans), Slice(r0, r0 + (ty - 1) * sh + 1, sh),
        Slice(c0, c0 + (ow - 1) * sw + 1, sw)))


def _lead_index(n: int, lead: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for size in reversed(lead):
        out.append(n % size)
        n //= size
    return tuple(reversed(out))


def _epilogue_bytes(ctx: Context, kernel: Kernel, out: Value) -> int:
    if kernel.group is None:
        return 0
    return bytes_per_element(ctx, kernel.group, {out.id})


@dataclass(frozen=True)
class _Geometry:
    """Where a tile of output rows reads its input.

    The input window ``[c, rows, cols]`` (rows and cols rounded up to the strides) is
    rearranged once into stride phases, channels last: ``[sh, sw, rows/sh, cols/sw, c]``.
    Then output pixel (y, x) of tap (i, j) reads phase ((i*dh) % sh, (j*dw) % sw) at flat
    position ``y * plane_cols + x + shift(i, j)``: every tap's operand is one contiguous
    run of pixels. Output rows are ``plane_cols`` apart, so columns ``ow..plane_cols`` of
    each row are computed and dropped.
    """

    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    out_rows: int
    out_cols: int
    in_rows: int
    in_cols: int

    @property
    def cols(self) -> int:
        """Input columns loaded per window (a multiple of the column stride)."""
        (_, kw), (_, sw), (_, dw) = self.kernel, self.stride, self.dilation
        need = (self.out_cols - 1) * sw + (kw - 1) * dw + 1
        return ceil_div(need, sw) * sw

    @property
    def plane_cols(self) -> int:
        return self.cols // self.stride[1]

    def rows(self, ty: int) -> int:
        """Input rows loaded for ``ty`` output rows (a multiple of the row stride)."""
        (kh, _), (sh, _), (dh, _) = self.kernel, self.stride, self.dilation
        return ceil_div((ty - 1) * sh + (kh - 1) * dh + 1, sh) * sh

    def plane_rows(self, ty: int) -> int:
        return self.rows(ty) // self.stride[0]

    def pixels(self, ty: int, images: int = 1) -> int:
        """Matmul rows for ``ty`` output rows of ``images`` images stacked in the phase
        planes (several images only with whole images): every plane column but the last
        row's tail, and the plane rows between one image's last output row and the
        next image."""
        return ((images - 1) * self.plane_rows(ty) + ty - 1) * self.plane_cols + \
            self.out_cols

    def fits(self, ty: int) -> bool:
        """Every row tile's window lies inside the (padded) input."""
        if self.cols > self.in_cols:
            return False
        sh = self.stride[0]
        return all(y0 * sh + self.rows(min(ty, self.out_rows - y0)) <= self.in_rows
                   for y0 in range(0, self.out_rows, ty))

    def shift(self, ty: int, i: int, j: int, images: int = 1) -> int:
        """Pixel offset of tap (i, j)'s operand in the phase planes of a ``ty``-row tile
        of ``images`` stacked images (``[sh, sw, images, plane rows, plane cols, c]``)."""
        (sh, sw), (dh, dw) = self.stride, self.dilation
        plane_rows = self.plane_rows(ty) * images
        phase = ((i * dh) % sh) * sw + (j * dw) % sw
        return (phase * plane_rows + (i * dh) // sh) * self.plane_cols + (j * dw) // sw


@dataclass(frozen=True)
class ConvTiling:
    """A tile is ``out_rows`` output rows x ``out_channels`` output channels of
    ``images`` images of one group (several images only when ``out_rows`` is the whole
    image: they are stacked into one matmul's M, as batch folded into the GEMM's rows),
    accumulated over input-channel chunks of ``in_channels``; each matmul covers
    ``taps`` consecutive kernel taps (K = taps x in_channels). With
    ``resident_weights`` every core keeps each weight block it has loaded."""

    images: int
    out_rows: int
    out_channels: int
    in_channels: int
    taps: int
    resident_weights: bool
    cost: Cost


def _sizes(size: int, unit: int) -> list[int]:
    out = {size}
    t = unit
    while t < size:
        out.add(t)
        t *= 2
    return sorted(out)


def _packed_groups(ntaps: int, taps: int) -> int:
    """Matmuls whose A operand is packed from several taps."""
    return sum(1 for t in range(0, ntaps, taps) if min(taps, ntaps - t) > 1)


def _sram_bytes(geo: _Geometry, ni: int, ty: int, ot: int, ct: int, taps: int,
                resident: int, item: int, out_item: int, cast: bool, epi: int,
                sets: int) -> int:
    """Scratchpad one core needs (``resident``: bytes of all weight blocks kept)."""
    kh, kw = geo.kernel
    m = geo.pixels(ty, ni)
    window = ni * geo.rows(ty) * geo.cols * ct * item
    weights = ot * ct * kh * kw * item
    pack = _packed_groups(kh * kw, taps) * m * taps * ct * item
    stage = taps * m * ct * item if taps > 1 else 0
    out = ni * ty * geo.out_cols * ot
    acc = m * ot * 4 + 2 * out * 4 + out * ((out_item if cast else 0) + epi)
    kept = resident if resident else sets * weights
    return sets * (2 * window + weights + pack + acc + 16 * 64 * 8) + kept + stage + 8192


def choose_conv_tiling(ctx: Context, geo: _Geometry, batch: int, groups: int, cin: int,
                       cout: int, dtype: DType, out_item: int, cast: bool, epi: int,
                       epi_ops: int, arrays: int,
                       capacity: int | None = None) -> ConvTiling | None:
    """The tiling with the lowest estimated time (``compiler.cost``) that fits the
    scratchpad; None when no window tiling fits (the caller falls back).

    ``cin``/``cout`` are per group. ``capacity`` (default: the scratchpad) is the SRAM
    budget the estimate must fit."""
    config = ctx.config
    capacity = ctx.capacity if capacity is None else capacity
    matrix, vector, dma = config.core.matrix, config.core.vector, config.core.dma
    kh, kw = geo.kernel
    ntaps = kh * kw
    item = dtype.itemsize
    lanes, vlat = vector.lanes, vector.pipeline_latency_cycles
    setup = dma.setup_latency_cycles + config.dram.latency_cycles + config.noc.latency_cycles
    granule = config.dram.access_granularity_bytes
    images = batch * groups
    all_weights = images * cout * cin * ntaps * item
    oh, ow = geo.out_rows, geo.out_cols
    heights = sorted({ceil_div(oh, k) for k in range(1, oh + 1)})
    options = []
    shapes = [(1, ty) for ty in heights] + [(ni, oh) for ni in _sizes(batch, 2) if ni > 1]
    for (ni, ty), ot, ct in itertools.product(shapes, _sizes(cout, matrix.cols),
                                              _sizes(cin, matrix.rows)):
        if not geo.fits(ty):
            continue
        m = geo.pixels(ty, ni)
        rows = geo.rows(ty)
        tiles = groups * ceil_div(batch, ni) * ceil_div(cout, ot) * ceil_div(oh, ty)
        cores = min(ctx.cores, tiles)
        per_core = ceil_div(tiles, cores)
        # the cores' loads share DRAM once more than one core runs
        load_bw = min(load_bandwidth(config),
                      config.dram_bytes_per_cycle * DRAM_EFFICIENCY / cores)
        chunks = ceil_div(cin, ct)
        most = min(ntaps, max(1, matrix.rows // ct))
        for g, resident in itertools.product(sorted({1, most}), (all_weights, 0)):
            need = _sram_bytes(geo, ni, ty, ot, ct, g, resident, item, out_item, cast, epi,
                               ctx.sets)
            if need > capacity:
                continue
            mm_groups = ceil_div(ntaps, g)
            mxu = chunks * sum(matmul_cycles(m, min(g, ntaps - t) * ct, ot, matrix, dtype)
                               for t in range(0, ntaps, g))
            window = ni * ct * rows * ceil_div(geo.cols * item, granule) * granule
            weights = ot * ct * ntaps * item
            weight_share = min(per_core * chunks * weights, all_weights) if resident else \
                per_core * chunks * weights
            out_bytes = ni * ot * ty * ow * (out_item + epi)
            loads = per_core * chunks * window + weight_share
            dma_cycles = loads / load_bw + per_core * (
                chunks * 2 * setup / max(1, dma.engines - 1) +
                out_bytes / dma.bandwidth_bytes_per_cycle)
            vpu = chunks * (2 * vlat + ni * rows * geo.cols * ct / lanes) + \
                weight_share / per_core / item / lanes
            if g > 1:
                vpu += chunks * _packed_groups(ntaps, g) * (g + 1) * (vlat + g * m * ct / lanes)
            tail = ni * ty * (vlat + ot * ow / lanes) + \
                (2 + epi_ops) * (vlat + ni * ot * ty * ow / lanes)
            vpu += tail
            share = min(arrays, per_core)
            fill = 2 * setup + (window + weights) / load_bw
            cost = Cost(mxu_cycles=per_core * mxu / share, vpu_cycles=per_core * vpu,
                        dma_cycles=dma_cycles,
                        dram_bytes=cores * loads + tiles * out_bytes,
                        serial_cycles=fill + tail + setup + out_bytes /
                        dma.bandwidth_bytes_per_cycle)
            commands = tiles * (chunks * (4 + mm_groups * (1 + (g + 1) * (g > 1))) +
                                ni * ty + 4)
            options.append((cost.estimate(config), commands,
                            ConvTiling(ni, ty, ot, ct, g, resident > 0, cost)))
    if not options:
        return None
    fastest = min(o[0] for o in options)
    near = [o for o in options if o[0] <= fastest * (1 + COMMAND_TOLERANCE)]
    return min(near, key=lambda o: (o[1], o[0]))[2]


class _ConvLayout(NamedTuple):
    """A tiling laid out: tile lists and every core's SRAM buffers."""

    ni: int
    ty: int
    ot: int
    ct: int
    ntap: int
    taps: list[tuple[int, int]]
    tap_groups: list[list[tuple[int, int]]]
    tiles: list[tuple[tuple[int, int], int, int, int]]
    cores: int
    sets: int
    rows_max: int
    m_max: int
    packed: int
    bufs: list[dict[str, Any]]


def _conv_buffers(ctx: Context, kernel: Kernel, geo: "_Geometry", tiling: ConvTiling,
                  x: Any, out: Any, cout: int, cg: int, ow: int, acc_dtype: DType,
                  cast: bool) -> _ConvLayout:
    """Allocate every core's buffers for ``tiling``; raises CapacityError when they do
    not fit the scratchpad."""
    node = kernel.anchor
    batch = x.shape[0]
    groups = node.spec.groups
    og = cout // groups
    oh = out.shape[2]
    kh, kw = geo.kernel
    ni, ty, ot, ct, ntap = (tiling.images, tiling.out_rows, tiling.out_channels,
                            tiling.in_channels, tiling.taps)
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    tap_groups = [taps[t:t + ntap] for t in range(0, len(taps), ntap)]
    tiles = [((n0, min(n0 + ni, batch)), gi, y0, o0) for n0 in range(0, batch, ni)
             for gi in range(groups) for y0 in range(0, oh, ty) for o0 in range(0, og, ot)]
    cores = min(ctx.cores, len(tiles))
    sets = ctx.sets
    rows_max, m_max = geo.rows(ty), geo.pixels(ty, ni)
    packed = _packed_groups(len(taps), ntap)
    bufs = []
    for c in range(cores):
        arena = Arena(f"sram{c}", ctx.capacity)
        bufs.append({
            "raw": [arena.alloc((ni, ct, rows_max, geo.cols), x.dtype, "conv input window")
                    for _ in range(sets)],
            "planes": [arena.alloc((ni * rows_max * geo.cols, ct), x.dtype,
                                   "conv input planes") for _ in range(sets)],
            "wraw": [arena.alloc((ot, ct, kh, kw), x.dtype, "conv weight tile")
                     for _ in range(sets)],
            "w": [arena.alloc((kh * kw * ct, ot), x.dtype, "conv weight taps")
                  for _ in range(1 if tiling.resident_weights else sets)],
            "kept": arena.alloc((cout * cg * kh * kw,), x.dtype, "conv resident weights")
            if tiling.resident_weights else None,
            "stage": arena.alloc((ntap, m_max, ct), x.dtype, "conv tap staging")
            if ntap > 1 else None,
            "packed": [arena.alloc((packed, m_max, ntap * ct), x.dtype, "conv packed taps")
                       for _ in range(sets)] if packed else [],
            "acc": [arena.alloc((max(m_max, ty * geo.plane_cols), ot), acc_dtype,
                                "conv accumulator") for _ in range(sets)],
            "rowt": [arena.alloc((ni * ty, ot, ow), acc_dtype, "conv output rows")
                     for _ in range(sets)],
            "nchw": [arena.alloc((ni, ot, ty * ow), acc_dtype, "conv output tile")
                     for _ in range(sets)],
            "out": [arena.alloc((ni, ot, ty * ow), out.dtype, "conv output") if cast else None
                    for _ in range(sets)],
            "epi": [layout(ctx, kernel.group, (ni, ot, ty, ow), arena, 1, {out.id})
                    if kernel.group else None for _ in range(sets)],
        })
    return _ConvLayout(ni, ty, ot, ct, ntap, taps, tap_groups, tiles, cores, sets, rows_max,
                       m_max, packed, bufs)


def lower_conv_kernel(ctx: Context, kernel: Kernel) -> None:
    node = kernel.anchor
    spec: g.Conv2d = node.spec
    x, w = node.inputs
    out = node.out
    batch, cin, in_rows, in_cols = x.shape
    cout, cg, kh, kw = w.shape
    _, _, oh, ow = out.shape
    groups = spec.groups
    og = cout // groups
    acc_dtype = accumulator_dtype(x.dtype)
    cast = out.dtype is not acc_dtype
    view = ctx.view(x)
    if view.shape != view.base_shape:
        raise LoweringError(f"{node.source}: convolution input must be a stored tensor, "
                            f"got a reshaped view")
    geo = _Geometry((kh, kw), tuple(spec.stride), tuple(spec.dilation), oh, ow, in_rows,
                    in_cols)
    arrays = ctx.config.core.matrix.arrays if ctx.options.multi_array else 1
    epi_ops = len(kernel.group.nodes) if kernel.group else 0
    # The SRAM estimate of a tiling is close, not exact (alignment, epilogue layouts): if
    # the buffers of the chosen tiling do not fit, choose again under a smaller budget.
    budget = ctx.capacity
    while True:
        tiling = choose_conv_tiling(ctx, geo, batch, groups, cg, og, x.dtype,
                                    out.dtype.itemsize, cast, _epilogue_bytes(ctx, kernel, out),
                                    epi_ops, arrays, budget)
        if tiling is None:
            _lower_conv_per_tap(ctx, kernel)
            return
        try:
            layout_state = _conv_buffers(ctx, kernel, geo, tiling, x, out, cout, cg, ow,
                                         acc_dtype, cast)
            break
        except CapacityError:
            budget = budget * 7 // 8
    (_, ty, ot, ct, ntap, taps, tap_groups, tiles, cores, sets, rows_max, m_max, packed,
     bufs) = layout_state
    kept: list[dict[tuple[int, int], SramRef]] = [{} for _ in range(cores)]
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    tile_counts = [0] * cores
    step_counts = [0] * cores
    source = node.source
    vpu = "core{}.vpu".format

    def weights(core: int, xs: int, oo: tuple[int, int], cc: tuple[int, int]
                ) -> tuple[SramRef, Transpose | None]:
        """Load a weight block (once per core when weights are resident); returns where
        it lives as ``[kh * kw * c, o]`` and the rearrangement still to emit."""
        b = bufs[core]
        no, nc = oo[1] - oo[0], cc[1] - cc[0]
        if tiling.resident_weights:
            if (oo, cc) in kept[core]:
                return kept[core][(oo, cc)], None
            offset = (oo[0] * cg + cc[0] * (oo[1] - oo[0])) * kh * kw
            dst = sub(b["kept"], (kh * kw * nc, no), offset)
            kept[core][(oo, cc)] = dst
        else:
            dst = sub(b["w"][xs], (kh * kw * nc, no))
        wref = DramRef(ctx.view(w).tensor, (Slice(*oo), Slice(*cc), Slice(0, kh),
                                            Slice(0, kw)))
        wraw = sub(b["wraw"][xs], (no, nc, kh, kw))
        ctx.em.emit(ctx.em.dma(core, "load"), Load(wref, wraw), source)
        return dst, Transpose(wraw, sub(dst, (kh, kw, nc, no)), (2, 3, 1, 0))

    for t, (nn, gi, y0, o0) in enumerate(tiles):
        ni = nn[1] - nn[0]
        core = t % cores
        q = tile_counts[core] % sets
        mxu = f"core{core}.mxu{tile_counts[core] % arrays}"
        tile_counts[core] += 1
        b = bufs[core]
        oo = (gi * og + o0, gi * og + min(o0 + ot, og))
        no = oo[1] - oo[0]
        ty_t = min(ty, oh - y0)
        chunks = list(range(0, cg, ct))
        for s, c0 in enumerate(chunks):
            cc = (gi * cg + c0, gi * cg + min(c0 + ct, cg))
            nc = cc[1] - cc[0]
            xs = step_counts[core] % sets
            step_counts[core] += 1
            operands: dict[str, object] = {}

            def load(core=core, b=b, xs=xs, nn=nn, ni=ni, cc=cc, nc=nc, oo=oo, ty_t=ty_t,
                     y0=y0, c0=c0, operands=operands) -> None:
                em = ctx.em
                rows = geo.rows(ty_t)
                m = geo.pixels(ty_t, ni)
                r0 = y0 * geo.stride[0]
                ref = DramRef(view.tensor, (Slice(*nn), Slice(*cc), Slice(r0, r0 + rows),
                                            Slice(0, geo.cols)))
                raw = sub(b["raw"][xs], (ni, nc, rows, geo.cols))
                em.emit(em.dma(core, "load"), Load(ref, raw), source)
                operands["w"], rearrange = weights(core, xs, oo, (c0, c0 + nc))
                (sh, sw) = geo.stride
                planes = b["planes"][xs]
                if ni == 1:
                    split = sub(raw, (nc, rows // sh, sh, geo.plane_cols, sw))
                    em.emit(vpu(core), Transpose(
                        split, sub(planes, (sh, sw, rows // sh, geo.plane_cols, nc)),
                        (2, 4, 1, 3, 0)), source)
                else:
                    split = sub(raw, (ni, nc, rows // sh, sh, geo.plane_cols, sw))
                    em.emit(vpu(core), Transpose(
                        split, sub(planes, (sh, sw, ni, rows // sh, geo.plane_cols, nc)),
                        (3, 5, 0, 2, 4, 1)), source)
                if rearrange is not None:
                    em.emit(vpu(core), rearrange, source)
                a_refs = []
                slot = 0
                for group in tap_groups:
                    if len(group) == 1:
                        a_refs.append(sub(planes, (m, nc),
                                          geo.shift(ty_t, *group[0], ni) * nc))
                        continue
                    stage = sub(b["stage"], (len(group), m, nc))
                    for u, (i, j) in enumerate(group):
                        em.emit(vpu(core), VCopy(
                            sub(planes, (m, nc), geo.shift(ty_t, i, j, ni) * nc),
                            sub(stage, (m, nc), u * m * nc)), source)
                    a = sub(b["packed"][xs], (m, len(group), nc), slot * m_max * ntap * ct)
                    slot += 1
                    em.emit(vpu(core), Transpose(stage, a, (1, 0, 2)), source)
                    a_refs.append(sub(a, (m, len(group) * nc)))
                operands["a"] = a_refs

            def compute(b=b, q=q, nc=nc, no=no, ty_t=ty_t, ni=ni, first=s == 0, mxu=mxu,
                        operands=operands) -> None:
                m = geo.pixels(ty_t, ni)
                acc = sub(b["acc"][q], (m, no))
                for k, (group, a) in enumerate(zip(tap_groups, operands["a"])):
                    (i, j) = group[0]
                    rhs = sub(operands["w"], (len(group) * nc, no), (i * kw + j) * nc * no)
                    ctx.em.emit(mxu, MatMul(a, rhs, acc, not (first and k == 0)), source)

            store = (lambda: None)
            if s == len(chunks) - 1:
                box = (nn, oo, (y0, y0 + ty_t), (0, ow))
                store = _gemm_finisher(ctx, kernel, core, b, q, box, geo, cast)
            per_core[core].append(TileSteps(load, compute, store))
    pipeline(per_core, sets - 1)


def _gemm_finisher(ctx: Context, kernel: Kernel, core: int, b: dict, q: int,
                   box: tuple[tuple[int, int], ...], geo: _Geometry, cast: bool):
    """Channels-last accumulator ``[pixels, o]`` -> NCHW tile ``[images, o, rows x ow]``,
    dropping the extra plane columns and rows, then the shared finisher (cast, store,
    fused epilogue)."""
    source = kernel.anchor.source
    ni = box[0][1] - box[0][0]
    no = box[1][1] - box[1][0]
    ty = box[2][1] - box[2][0]
    ow = geo.out_cols
    finish = _finisher(ctx, kernel, core, {**b, "acc": b["nchw"]}, q, box,
                       (ni, no, ty * ow) if ni > 1 else (no, ty * ow), cast)

    def store() -> None:
        _to_channels_first(ctx, core, b, q, no, ty, geo, source, ni)
        finish()
    return store


def _lower_conv_per_tap(ctx: Context, kernel: Kernel) -> None:
    """The fallback: per tap a strided DRAM window and ``W_tap @ X_tap`` (NCHW out)."""
    node = kernel.anchor
    spec: g.Conv2d = node.spec
    x, w = node.inputs
    out = node.out
    batch, cin, _, _ = x.shape
    cout, cg, kh, kw = w.shape
    _, _, oh, ow = out.shape
    groups = spec.groups
    og = cout // groups
    item = x.dtype.itemsize
    acc_dtype = accumulator_dtype(x.dtype)
    matrix = ctx.config.core.matrix
    ot = min(og, 4 * max(matrix.rows, matrix.cols))
    ct = min(cg, 4 * matrix.rows)
    epi = _epilogue_bytes(ctx, kernel, out)
    cast = out.dtype is not acc_dtype
    sets = ctx.sets
    ty = oh
    while True:
        pixels = ty * ow
        need = (sets * ct * pixels * item + 2 * sets * ot * ct * kh * kw * item +
                sets * ot * pixels * (4 + (out.dtype.itemsize if cast else 0)) +
                sets * (epi * ot * pixels + 64 * 16) + 8192)
        if need <= ctx.capacity or (ty == 1 and ot == 1 and ct == 1):
            break
        if ty > 1:
            ty = (ty + 1) // 2
        elif ot > 1:
            ot = (ot + 1) // 2
        else:
            ct = (ct + 1) // 2
    if need > ctx.capacity:
        raise CapacityError(f"{node.source}: conv tile does not fit {ctx.capacity} B")
    tiles = [(nb, gi, o0, y0) for nb in range(batch) for gi in range(groups)
             for o0 in range(0, og, ot) for y0 in range(0, oh, ty)]
    cores = min(ctx.cores, len(tiles))
    arrays = matrix.arrays if ctx.options.multi_array else 1
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    bufs = []
    for c in range(cores):
        arena = Arena(f"sram{c}", ctx.capacity)
        bufs.append({
            "x": [arena.alloc((ct, ty * ow), x.dtype, "conv input window") for _ in range(sets)],
            "wraw": [arena.alloc((ot, ct, kh, kw), x.dtype, "conv weight tile")
                     for _ in range(sets)],
            "w": [arena.alloc((kh, kw, ot, ct), x.dtype, "conv weight taps")
                  for _ in range(sets)],
            "acc": [arena.alloc((ot, ty * ow), acc_dtype, "conv accumulator")
                    for _ in range(sets)],
            "out": [arena.alloc((ot, ty * ow), out.dtype, "conv output") if cast else None
                    for _ in range(sets)],
            "epi": [layout(ctx, kernel.group, (1, ot, ty, ow), arena, 1, {out.id})
                    if kernel.group else None for _ in range(sets)],
        })
    counts = [0] * cores
    step_counts = [0] * cores
    chunk_counts = [0] * cores
    source = node.source
    for t, (nb, gi, o0, y0) in enumerate(tiles):
        core = t % cores
        q = counts[core] % sets
        counts[core] += 1
        b = bufs[core]
        mxu = f"core{core}.mxu{(counts[core] - 1) % arrays}"
        oo = (gi * og + o0, gi * og + min(o0 + ot, og))
        rows = (y0, min(y0 + ty, oh))
        pix = (rows[1] - rows[0]) * ow
        no = oo[1] - oo[0]
        steps = [(c0, i, j) for c0 in range(0, cg, ct) for i in range(kh) for j in range(kw)]
        for s, (c0, i, j) in enumerate(steps):
            cc = (c0, min(c0 + ct, cg))
            nc = cc[1] - cc[0]
            xs = step_counts[core] % sets
            step_counts[core] += 1
            if i == 0 and j == 0:
                chunk_counts[core] += 1
            ws = chunk_counts[core] % sets

            def load(core=core, b=b, xs=xs, q=ws, cc=cc, i=i, j=j, nb=nb, gi=gi, rows=rows,
                     oo=oo, no=no, nc=nc, pix=pix, first_tap=(i == 0 and j == 0)) -> None:
                if first_tap:
                    wref = DramRef(ctx.view(w).tensor, (Slice(*oo), Slice(*cc), Slice(0, kh),
                                                        Slice(0, kw)))
                    raw = sub(b["wraw"][q], (no, nc, kh, kw))
                    ctx.em.emit(ctx.em.dma(core, "load"), Load(wref, raw), source)
                    ctx.em.emit(f"core{core}.vpu", Transpose(
                        raw, sub(b["w"][q], (kh, kw, no, nc)), (2, 3, 0, 1)), source)
                chans = (gi * cin // groups + cc[0], gi * cin // groups + cc[1])
                ref = _window(ctx, x, nb, chans, rows, (i, j), spec.stride, spec.dilation, ow,
                              source)
                ctx.em.emit(ctx.em.dma(core, "load"), Load(ref, sub(b["x"][xs], (nc, pix))),
                            source)

            def compute(core=core, b=b, xs=xs, i=i, j=j, q=q, ws=ws, no=no, nc=nc, pix=pix,
                        s=s, mxu=mxu) -> None:
                tap = sub(b["w"][ws], (no, nc), (i * kw + j) * no * nc)
                ctx.em.emit(mxu, MatMul(tap, sub(b["x"][xs], (nc, pix)),
                                        sub(b["acc"][q], (no, pix)), s > 0), source)

            store = (lambda: None)
            if s == len(steps) - 1:
                box = ((nb, nb + 1), oo, rows, (0, ow))
                store = _finisher(ctx, kernel, core, b, q, box, (no, pix), cast)
            per_core[core].append(TileSteps(load, compute, store))
    pipeline(per_core, sets - 1)


def _finisher(ctx: Context, kernel: Kernel, core: int, b: dict, q: int,
              box: tuple[tuple[int, int], ...], shape: tuple[int, ...], cast: bool):
    out = kernel.anchor.out
    source = kernel.anchor.source

    def store() -> None:
        value = sub(b["acc"][q], shape)
        if cast:
            dst = sub(b["out"][q], shape)
            ctx.em.emit(f"core{core}.vpu", Cast(value, dst), source)
            value = dst
        if ctx.materialized(out):
            store_box(ctx, out, box, value, core, source, "store")
        if kernel.group is None:
            return
        lay = b["epi"][q]
        merged = dict(lay.buffers[0])
        merged[out.id] = value
        emit_loads(ctx, kernel.group, box, core, merged, lay.scratch[0], {out.id: value},
                   source)
        emit_compute(ctx, kernel.group, box, core, merged, lay.scratch[0], source)
        emit_stores(ctx, kernel.group, box, core, merged, source, "store")
    return store


def lower_pool_kernel(ctx: Context, kernel: Kernel) -> None:
    """Load each input window once, rearrange it into stride phases channels-last (as
    the conv does) and reduce the taps over contiguous pixel runs; windows that cannot
    be phase-split fall back to a strided DRAM load per tap."""
    node = kernel.anchor
    spec: g.Pool2d = node.spec
    x, out = node.inputs[0], node.out
    lead = x.shape[:-3]
    chans, in_rows, in_cols = x.shape[-3:]
    oh, ow = out.shape[-2:]
    view = ctx.view(x)
    geo = _Geometry(tuple(spec.kernel), tuple(spec.stride), tuple(spec.dilation), oh, ow,
                    in_rows, in_cols)
    images = math.prod(lead)
    sets = ctx.sets
    item = x.dtype.itemsize
    epi = _epilogue_bytes(ctx, kernel, out)

    def need(cc: int, ty: int) -> int:
        window = geo.rows(ty) * geo.cols * cc * item
        tile = ty * geo.plane_cols * cc * item + 2 * ty * ow * cc * item
        return sets * (2 * window + tile + ty * ow * cc * epi + 64 * 16) + 8192

    cc = chans
    ty = ceil_div(oh, max(1, ctx.cores // max(1, images)))
    while (need(cc, ty) > ctx.capacity or not geo.fits(ty)) and (ty > 1 or cc > 1):
        if ty > 1:
            ty = (ty + 1) // 2
        else:
            cc = (cc + 1) // 2
    if view.shape != view.base_shape or need(cc, ty) > ctx.capacity or not geo.fits(ty):
        _lower_pool_per_tap(ctx, kernel)
        return
    tiles = [(nb, c0, y0) for nb in range(images) for c0 in range(0, chans, cc)
             for y0 in range(0, oh, ty)]
    cores = min(ctx.cores, len(tiles))
    rows_max = geo.rows(ty)
    bufs = []
    for c in range(cores):
        arena = Arena(f"sram{c}", ctx.capacity)
        bufs.append({
            "raw": [arena.alloc((cc, rows_max, geo.cols), x.dtype, "pool input window")
                    for _ in range(sets)],
            "planes": [arena.alloc((rows_max * geo.cols, cc), x.dtype, "pool input planes")
                       for _ in range(sets)],
            "acc": [arena.alloc((ty * geo.plane_cols, cc), x.dtype, "pool accumulator")
                    for _ in range(sets)],
            "rowt": [arena.alloc((ty, cc, ow), x.dtype, "pool output rows")
                     for _ in range(sets)],
            "nchw": [arena.alloc((cc, ty * ow), x.dtype, "pool output tile")
                     for _ in range(sets)],
            "epi": [layout(ctx, kernel.group, (1,) * len(lead) + (cc, ty, ow), arena, 1,
                           {out.id}) if kernel.group else None for _ in range(sets)],
        })
    kind = BinaryKind.max if spec.kind == "max" else BinaryKind.add
    kh, kw = spec.kernel
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    counts = [0] * cores
    source = node.source
    for t, (nb, c0, y0) in enumerate(tiles):
        core = t % cores
        q = counts[core] % sets
        counts[core] += 1
        b = bufs[core]
        ch = (c0, min(c0 + cc, chans))
        nc = ch[1] - ch[0]
        ty_t = min(ty, oh - y0)

        def load(core=core, b=b, q=q, nb=nb, ch=ch, nc=nc, y0=y0, ty_t=ty_t) -> None:
            rows = geo.rows(ty_t)
            r0 = y0 * geo.stride[0]
            index = tuple(Slice(v, v + 1) for v in _lead_index(nb, lead))
            ref = DramRef(view.tensor, index + (Slice(*ch), Slice(r0, r0 + rows),
                                                Slice(0, geo.cols)))
            raw = sub(b["raw"][q], (nc, rows, geo.cols))
            ctx.em.emit(ctx.em.dma(core, "load"), Load(ref, raw), source)

        def work(core=core, b=b, q=q, nc=nc, ty_t=ty_t) -> None:
            vpu = f"core{core}.vpu"
            rows = geo.rows(ty_t)
            m = geo.pixels(ty_t)
            (sh, sw) = geo.stride
            raw = sub(b["raw"][q], (nc, rows // sh, sh, geo.plane_cols, sw))
            planes = b["planes"][q]
            ctx.em.emit(vpu, Transpose(raw, sub(planes, (sh, sw, rows // sh, geo.plane_cols,
                                                        nc)), (2, 4, 1, 3, 0)), source)
            taps = [sub(planes, (m, nc), geo.shift(ty_t, i, j) * nc)
                    for i in range(kh) for j in range(kw)]
            acc = sub(b["acc"][q], (m, nc))
            if len(taps) == 1:
                ctx.em.emit(vpu, VCopy(taps[0], acc), source)
            for k, tap in enumerate(taps[1:]):
                ctx.em.emit(vpu, Binary(kind, taps[0] if k == 0 else acc, tap, acc), source)
            if spec.kind == "avg" and spec.divisor != 1.0:
                ctx.em.emit(vpu, Binary(BinaryKind.mul, acc, Scalar(spec.divisor), acc), source)
            _to_channels_first(ctx, core, b, q, nc, ty_t, geo, source)

        box = tuple((v, v + 1) for v in _lead_index(nb, lead)) + (ch, (y0, y0 + ty_t),
                                                                    (0, ow))
        finish = _finisher(ctx, kernel, core, {**b, "acc": b["nchw"]}, q, box,
                           (nc, ty_t * ow), cast=False)
        per_core[core].append(TileSteps(load, work, finish))
    pipeline(per_core, sets - 1)


def _to_channels_first(ctx: Context, core: int, b: dict, q: int, channels: int, ty: int,
                       geo: _Geometry, source: str, images: int = 1) -> SramRef:
    """Channels-last ``b["acc"][q]`` ``[pixels, c]`` -> ``b["nchw"][q]``
    ``[images, c, ty x ow]``, dropping the extra plane columns and rows (one transpose
    per output row, then one to interleave them)."""
    vpu = f"core{core}.vpu"
    ow = geo.out_cols
    acc = b["acc"][q]
    nchw = sub(b["nchw"][q], (images, channels, ty * ow))
    dense = geo.plane_cols == ow and (images == 1 or geo.plane_rows(ty) == ty)
    if images == 1 and (dense or ty == 1):
        ctx.em.emit(vpu, Transpose(sub(acc, (ty * ow, channels)),
                                   sub(nchw, (channels, ty * ow)), (1, 0)), source)
        return nchw
    if dense:
        ctx.em.emit(vpu, Transpose(sub(acc, (images, ty * ow, channels)), nchw, (0, 2, 1)),
                    source)
        return nchw
    rowt = b["rowt"][q]
    image_rows = geo.plane_rows(ty) * geo.plane_cols
    for k in range(images):
        for y in range(ty):
            ctx.em.emit(vpu, Transpose(
                sub(acc, (ow, channels), (k * image_rows + y * geo.plane_cols) * channels),
                sub(rowt, (channels, ow), (k * ty + y) * channels * ow), (1, 0)), source)
    ctx.em.emit(vpu, Transpose(sub(rowt, (images, ty, channels, ow)),
                               sub(nchw, (images, channels, ty, ow)), (0, 2, 1, 3)), source)
    return nchw


def _lower_pool_per_tap(ctx: Context, kernel: Kernel) -> None:
    node = kernel.anchor
    spec: g.Pool2d = node.spec
    x, out = node.inputs[0], node.out
    lead = x.shape[:-3]
    chans = x.shape[-3]
    oh, ow = out.shape[-2:]
    kh, kw = spec.kernel
    images = 1
    for n in lead:
        images *= n
    sets = ctx.sets
    item = x.dtype.itemsize
    epi = _epilogue_bytes(ctx, kernel, out)
    cc, ty = chans, oh
    while sets * 2 * cc * ty * ow * (item + epi) + 8192 > ctx.capacity and (cc > 1 or ty > 1):
        if ty > 1:
            ty = (ty + 1) // 2
        else:
            cc = (cc + 1) // 2
    tiles = [(nb, c0, y0) for nb in range(images) for c0 in range(0, chans, cc)
             for y0 in range(0, oh, ty)]
    cores = min(ctx.cores, len(tiles))
    bufs = []
    for c in range(cores):
        arena = Arena(f"sram{c}", ctx.capacity)
        bufs.append({
            "acc": [arena.alloc((cc, ty * ow), x.dtype, "pool accumulator") for _ in range(sets)],
            "tap": [arena.alloc((cc, ty * ow), x.dtype, "pool window") for _ in range(sets)],
            "epi": [layout(ctx, kernel.group, (1,) * len(lead) + (cc, ty, ow), arena, 1,
                           {out.id}) if kernel.group else None for _ in range(sets)],
        })
    kind = BinaryKind.max if spec.kind == "max" else BinaryKind.add
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    counts = [0] * cores
    source = node.source
    for t, (nb, c0, y0) in enumerate(tiles):
        core = t % cores
        q = counts[core] % sets
        counts[core] += 1
        b = bufs[core]
        ch = (c0, min(c0 + cc, chans))
        rows = (y0, min(y0 + ty, oh))
        shape = (ch[1] - ch[0], (rows[1] - rows[0]) * ow)

        def work(core=core, b=b, q=q, nb=nb, ch=ch, rows=rows, shape=shape) -> None:
            acc = sub(b["acc"][q], shape)
            vpu = f"core{core}.vpu"
            for i in range(kh):
                for j in range(kw):
                    ref = _window(ctx, x, nb, ch, rows, (i, j), spec.stride, spec.dilation, ow,
                                  source)
                    first = i == 0 and j == 0
                    dst = acc if first else sub(b["tap"][q], shape)
                    ctx.em.emit(ctx.em.dma(core), Load(ref, dst), source)
                    if not first:
                        ctx.em.emit(vpu, Binary(kind, acc, dst, acc), source)
            if spec.kind == "avg" and spec.divisor != 1.0:
                ctx.em.emit(vpu, Binary(BinaryKind.mul, acc, Scalar(spec.divisor), acc), source)

        box = tuple((v, v + 1) for v in _lead_index(nb, lead)) + (ch, rows, (0, ow))
        finish = _finisher(ctx, kernel, core, b, q, box, shape, cast=False)
        per_core[core].append(TileSteps(work, lambda: None, finish))
    pipeline(per_core, sets - 1)
