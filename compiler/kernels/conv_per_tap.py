"""Convolution's fallback when no implicit-GEMM tile fits the scratchpad: per kernel
tap, a strided DRAM window ``X_tap [c, pixels]`` and ``W_tap @ X_tap`` accumulated into
an NCHW tile. Padding is by addressing: output pixels whose tap falls in the border
read zeros from a filled buffer, the rest arrive by one strided DMA."""

from __future__ import annotations

from archsim.config.names import sram_space, vpu_engine
from archsim.errors import CapacityError, LoweringError
from compiler import graph as g
from compiler.emit import Arena
from compiler.graph import Value
from compiler.ir.operands import DramRef, Scalar, Slice, SramRef
from compiler.ir.ops import Binary, BinaryKind, Load, MatMul, Transpose
from compiler.kernels.common import Context, TileSteps, pipeline
from compiler.kernels.conv_geometry import (
    conv_tiles, epilogue_bytes, finisher, image_load, tile_buffers,
)
from compiler.kernels.matmul import accumulator_dtype
from compiler.kernels.vector import sub
from compiler.plan import Kernel


def lower_conv_per_tap(ctx: Context, kernel: Kernel) -> None:
    """Per tap a strided DRAM window and ``W_tap @ X_tap`` (NCHW out)."""
    node = kernel.anchor
    spec: g.Conv2d = node.spec
    x, w = node.inputs
    out = node.out
    batch, cin, _, _ = spec.image_shape(x, spec.channels_last_in)
    cout, cg, kh, kw = w.shape
    _, _, oh, ow = spec.image_shape(out, spec.channels_last_out)
    groups = spec.groups
    og = cout // groups
    item = x.dtype.itemsize
    acc_dtype = accumulator_dtype(x.dtype)
    matrix = ctx.config.core.matrix
    ot = min(og, 4 * max(matrix.rows, matrix.cols))
    ct = min(cg, 4 * matrix.rows)
    epi = epilogue_bytes(ctx, kernel, out)
    cast = out.dtype is not acc_dtype
    sets = ctx.sets
    ty = oh
    while True:
        pixels = ty * ow
        need = (sets * ct * pixels * item + 2 * sets * ot * ct * kh * kw * item +
                sets * ot * pixels * (4 + (out.dtype.itemsize if cast else 0)) +
                sets * (epi * ot * pixels + 64 * 16) + 8192 +
                (sets * ot * pixels * 4 if spec.channels_last_out and kernel.group else 0))
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
        arena = Arena(sram_space(c), ctx.capacity)
        bufs.append({
            "x": [arena.alloc((ct, ty * ow), x.dtype, "conv input window") for _ in range(sets)],
            "wraw": [arena.alloc((ot, ct, kh, kw), x.dtype, "conv weight tile")
                     for _ in range(sets)],
            "w": [arena.alloc((kh, kw, ot, ct), x.dtype, "conv weight taps")
                  for _ in range(sets)],
            "acc": [arena.alloc((ot, ty * ow), acc_dtype, "conv accumulator")
                    for _ in range(sets)],
            **tile_buffers(ctx, kernel, arena, ot, ty, ow, cast),
        })
    step_counts = [0] * cores
    chunk_counts = [0] * cores
    source = node.source
    for tile in conv_tiles(tiles, cores, sets, arrays, og, ot, oh, ty, ow):
        core, q, mxu, nb, gi = tile.core, tile.q, tile.mxu, tile.nb, tile.gi
        oo, rows, pix, no, b = tile.oo, tile.rows, tile.pix, tile.no, bufs[tile.core]
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
                    ctx.em.emit(vpu_engine(core), Transpose(
                        raw, sub(b["w"][q], (kh, kw, no, nc)), (2, 3, 0, 1)), source)
                chans = (gi * cin // groups + cc[0], gi * cin // groups + cc[1])
                load_tap(ctx, x, nb, chans, rows, (i, j), spec, ow, core,
                          sub(b["x"][xs], (nc, pix)), source)

            def compute(core=core, b=b, xs=xs, i=i, j=j, q=q, ws=ws, no=no, nc=nc, pix=pix,
                        s=s, mxu=mxu) -> None:
                tap = sub(b["w"][ws], (no, nc), (i * kw + j) * no * nc)
                ctx.em.emit(mxu, MatMul(tap, sub(b["x"][xs], (nc, pix)),
                                        sub(b["acc"][q], (no, pix)), s > 0), source)

            store = (lambda: None)
            if s == len(steps) - 1:
                box = ((nb, nb + 1), oo, rows, (0, ow))
                store = finisher(ctx, kernel, core, b, q, box, (no, pix), cast)
            per_core[core].append(TileSteps(load, compute, store))
    pipeline(per_core, sets - 1)


def valid_range(lo: int, hi: int, start: int, step: int, size: int) -> tuple[int, int]:
    """Output positions ``[a, b)`` within ``[lo, hi)`` whose input ``start + p * step``
    lies inside ``[0, size)``."""
    a = max(lo, -(start // step))
    b = min(hi, (size - 1 - start) // step + 1)
    return a, max(a, b)


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


def load_tap(ctx: Context, x: Value, n: int, chans: tuple[int, int], rows: tuple[int, int],
             tap: tuple[int, int], spec: g.Conv2d, ow: int, core: int, dst: SramRef,
             source: str) -> None:
    """``dst`` [c, rows x ow] := tap ``(i, j)``'s input pixels, zero in the padding."""
    view = ctx.view(x)
    if view.shape != view.base_shape:
        raise LoweringError(f"{source}: convolution input must be a stored tensor, got a "
                            f"reshaped view")
    _, _, height, width = spec.image_shape(x, spec.channels_last_in)
    placed = tap_inside(ctx, core, dst, tap, rows, ow, tuple(spec.stride),
                        tuple(spec.dilation), tuple(spec.padding), (height, width), 0.0, 1,
                        source)
    if placed is not None:
        inside, in_rows, in_cols = placed
        ctx.em.emit(ctx.em.dma(core, "load"),
                    image_load(ctx, x, spec.channels_last_in, (n, n + 1), chans, in_rows,
                               in_cols, inside), source)
