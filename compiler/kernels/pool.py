"""Pooling (max / average) on NCHW inputs, padding by addressing: each input window is
loaded once inside its border (filled with ``-inf`` for max, zeros for avg, as the
convolution fills zeros) and rearranged into stride phases channels last, and the taps
are reduced over contiguous pixel runs; windows that cannot be phase-split fall back
to a strided DRAM load per tap, each inside the same border."""

from __future__ import annotations

import math

from archsim.config.model import ceil_div
from archsim.config.names import sram_space, vpu_engine
from compiler import graph as g
from compiler.emit import Arena
from compiler.ir.operands import DramRef, Scalar, Slice, SramRef
from compiler.ir.ops import Binary, BinaryKind, Load, Transpose, VCopy
from compiler.kernels.common import Context, TileSteps, pipeline, unravel
from compiler.kernels.conv_geometry import (
    Geometry,
    epilogue_bytes,
    finisher,
    padded_window,
    to_channels_first,
    valid_range,
)
from compiler.kernels.vector import layout, sub
from compiler.plan import Kernel

TILES_PER_CORE = 4
"""Tiles a core's share of a pooling is cut into, so that a tile's load runs under the
previous tile's work (one tile per core leaves the DMA and the vector unit taking turns:
ResNet's stem pool on one TPU v3 core loaded, reduced and stored it in one piece)."""

HALO_SHARE = 8
"""...as long as a tile re-reads at most 1/8 of its input rows (a 3x3 stride-2 window
loads two rows past its own 2 x rows: tiles of at least 8 output rows)."""


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
    (ph, pw) = spec.padding
    geo = Geometry(tuple(spec.kernel), tuple(spec.stride), tuple(spec.dilation), oh, ow,
                   in_rows + 2 * ph, in_cols + 2 * pw)
    images = math.prod(lead)
    sets = ctx.sets
    item = x.dtype.itemsize
    epi = epilogue_bytes(ctx, kernel, out)

    def need(cc: int, ty: int) -> int:
        window = geo.rows(ty) * geo.cols * cc * item  # the raw window and its planes
        tile = ty * geo.plane_cols * cc * item + ty * ow * cc * item  # acc, channels first
        return sets * (2 * window + tile + ty * ow * cc * epi + 64 * 16) + 8192

    cc = chans
    ty = ceil_div(oh, max(1, ctx.cores // max(1, images)))
    while ty > 1 and _split_pays(geo, images, oh, (ty + 1) // 2, ctx.cores):
        ty = (ty + 1) // 2
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
        arena = Arena(sram_space(c), ctx.capacity)
        bufs.append({
            "raw": [arena.alloc((cc, rows_max, geo.cols), x.dtype, "pool input window")
                    for _ in range(sets)],
            "planes": [arena.alloc((rows_max * geo.cols, cc), x.dtype, "pool input planes")
                       for _ in range(sets)],
            "acc": [arena.alloc((ty * geo.plane_cols, cc), x.dtype, "pool accumulator")
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
            raw = sub(b["raw"][q], (nc, geo.rows(ty_t), geo.cols))
            placed = padded_window(ctx, core, raw, (y0 * geo.stride[0], 0), (ph, pw),
                                   (in_rows, in_cols), spec.fill, source, len(lead))
            if placed is not None:
                inside, rows, cols = placed
                index = tuple(Slice(v, v + 1) for v in unravel(nb, lead))
                ctx.em.emit(ctx.em.dma(core, "load"),
                            Load(DramRef(view.tensor, index + (Slice(*ch), rows, cols)),
                                 inside), source)

        def work(core=core, b=b, q=q, nc=nc, ty_t=ty_t) -> None:
            vpu = vpu_engine(core)
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
            for k, tap in enumerate(taps[1:]):  # one pass: the running result in registers
                ctx.em.emit(vpu, Binary(kind, taps[0] if k == 0 else acc, tap, acc, k > 0),
                            source)
            if spec.kind == "avg" and spec.divisor != 1.0:
                ctx.em.emit(vpu, Binary(BinaryKind.mul, acc, Scalar(spec.divisor), acc,
                                        len(taps) > 1), source)
            to_channels_first(ctx, core, b, q, nc, ty_t, geo, source)

        box = tuple((v, v + 1) for v in unravel(nb, lead)) + (ch, (y0, y0 + ty_t),
                                                                    (0, ow))
        finish = finisher(ctx, kernel, core, {**b, "acc": b["nchw"]}, q, box,
                           (nc, ty_t * ow), cast=False)
        per_core[core].append(TileSteps(load, work, finish))
    pipeline(per_core, sets - 1)


def _split_pays(geo: Geometry, images: int, oh: int, ty: int, cores: int) -> bool:
    """Whether tiles of ``ty`` output rows keep within both limits above."""
    stride = geo.stride[0]
    tiles = images * ceil_div(oh, ty)
    halo = geo.rows(ty) - ty * stride
    return tiles <= TILES_PER_CORE * cores and HALO_SHARE * halo <= ty * stride


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
    epi = epilogue_bytes(ctx, kernel, out)
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
        arena = Arena(sram_space(c), ctx.capacity)
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
            vpu = vpu_engine(core)
            for i in range(kh):
                for j in range(kw):
                    first = i == 0 and j == 0
                    dst = acc if first else sub(b["tap"][q], shape)
                    _load_tap(ctx, x, nb, ch, rows, (i, j), spec, ow, core, dst, source)
                    if not first:
                        ctx.em.emit(vpu, Binary(kind, acc, dst, acc), source)
            if spec.kind == "avg" and spec.divisor != 1.0:
                ctx.em.emit(vpu, Binary(BinaryKind.mul, acc, Scalar(spec.divisor), acc), source)

        box = tuple((v, v + 1) for v in unravel(nb, lead)) + (ch, rows, (0, ow))
        finish = finisher(ctx, kernel, core, b, q, box, shape, cast=False)
        per_core[core].append(TileSteps(work, lambda: None, finish))
    pipeline(per_core, sets - 1)


def tap_inside(ctx: Context, core: int, dst: SramRef, tap: tuple[int, int],
               rows: tuple[int, int], ow: int, stride: tuple[int, int],
               dilation: tuple[int, int], padding: tuple[int, int], size: tuple[int, int],
               fill: float, lead: int, source: str) -> tuple[SramRef, Slice, Slice] | None:
    """For ``dst`` [c, rows x ow], tap ``(i, j)``'s input pixels of output rows ``rows``:
    fill it with ``fill`` if the tap reaches into the padding anywhere, and return the
    part of it the input covers (a strided view with ``lead`` unit dims in front) with
    the input rows and columns that land there, or None when none does."""
    (i, j), (sh, sw), (dh, dw), (ph, pw) = tap, stride, dilation, padding
    row0, col0 = i * dh - ph, j * dw - pw  # input row/col of output pixel (0, 0)
    ya, yb = valid_range(rows[0], rows[1], row0, sh, size[0])
    xa, xb = valid_range(0, ow, col0, sw, size[1])
    nc, pix = dst.shape
    if (ya, yb, xa, xb) != (rows[0], rows[1], 0, ow):
        ctx.em.emit(vpu_engine(core), Binary(BinaryKind.add, Scalar(fill), Scalar(0.0), dst),
                    source)
    if yb <= ya or xb <= xa:
        return None
    r, c = row0 + ya * sh, col0 + xa * sw
    offset = ((ya - rows[0]) * ow + xa) * dst.dtype.itemsize
    inside = SramRef(dst.space, dst.offset + offset, (1,) * lead + (nc, yb - ya, xb - xa),
                     dst.dtype, (nc * pix,) * lead + (pix, ow, 1))
    return (inside, Slice(r, r + (yb - ya - 1) * sh + 1, sh),
            Slice(c, c + (xb - xa - 1) * sw + 1, sw))


def _load_tap(ctx: Context, x: g.Value, nb: int, chans: tuple[int, int],
              rows: tuple[int, int], tap: tuple[int, int], spec: g.Pool2d, ow: int,
              core: int, dst: SramRef, source: str) -> None:
    """``dst`` [c, rows x ow] := tap ``(i, j)``'s input pixels, the padding's fill where
    the tap falls outside the input."""
    lead = x.shape[:-3]
    placed = tap_inside(ctx, core, dst, tap, rows, ow, tuple(spec.stride),
                        tuple(spec.dilation), tuple(spec.padding), tuple(x.shape[-2:]),
                        spec.fill, len(lead), source)
    if placed is not None:
        inside, in_rows, in_cols = placed
        index = tuple(Slice(v, v + 1) for v in unravel(nb, lead))
        ref = DramRef(ctx.view(x).tensor, index + (Slice(*chans), in_rows, in_cols))
        ctx.em.emit(ctx.em.dma(core), Load(ref, inside), source)
