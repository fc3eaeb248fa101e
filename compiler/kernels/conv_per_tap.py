"""Convolution's last resort, when no implicit-GEMM or packed-taps tile fits the
scratchpad: per tile (output rows x output columns x output channels of one image and
group) and input-channel chunk, the zero-padded input window ``[c, rows, cols]`` is
loaded once (border strips zero-filled, the interior by one strided DMA) and each
kernel tap multiplies a strided view of it, ``X_tap^T [rows, cols, c] @ W_tap [c, o]``,
accumulated into a pixels-major tile that is transposed to NCHW once (or stored NHWC
as it is). It is the implicit GEMM without the stride-phase rearrangement, packed taps
or resident weights, so its buffers are the fewest: the window, a chunk's weights (as
loaded and rearranged) and the accumulator."""

from __future__ import annotations

from collections.abc import Callable

from archsim.config.names import sram_space, vpu_engine
from archsim.errors import CapacityError, LoweringError
from compiler import graph as g
from compiler.emit import Arena
from compiler.ir.operands import Slice, SramRef
from compiler.ir.ops import Load, MatMul, Transpose
from compiler.kernels.common import Context, TileSteps, pipeline
from compiler.kernels.conv_geometry import (
    conv_tiles, epilogue_bytes, image_load, padded_window, pixels_finisher, reads_stored,
    stored_ref, tile_buffers, window_size,
)
from compiler.kernels.matmul import accumulator_dtype
from compiler.kernels.vector import sub
from compiler.plan import Kernel


def _sizes(ctx: Context, need: Callable[[int, int, int, int], int], oh: int, ow: int,
           og: int, cg: int) -> tuple[int, int, int, int]:
    """(rows, columns, output channels, input channels) of a tile whose buffers
    (``need``) fit: each step halves the size that saves the most, the columns and
    channel tiles not below the array's size while another can shrink, then any."""
    matrix = ctx.config.core.matrix
    size = [oh, ow, min(og, 4 * max(matrix.rows, matrix.cols)), min(cg, 4 * matrix.rows)]
    floors = [1, min(ow, matrix.rows), min(size[2], matrix.cols), min(size[3], matrix.rows)]

    def halved(axis: int) -> list[int]:
        return [(n + 1) // 2 if a == axis else n for a, n in enumerate(size)]

    while need(*size) > ctx.capacity:
        axes = [a for a in range(4) if size[a] > floors[a]]
        if not axes:  # every size at its floor: lower the floors
            if floors == [1, 1, 1, 1]:
                raise CapacityError(f"conv tile does not fit {ctx.capacity} B")
            floors = [1, 1, 1, 1]
            continue
        size = halved(min(axes, key=lambda a: need(*halved(a))))
    return size[0], size[1], size[2], size[3]


def lower_conv_per_tap(ctx: Context, kernel: Kernel) -> None:
    """Per tile and channel chunk one window, then one matmul per tap on a view of it."""
    node = kernel.anchor
    spec: g.Conv2d = node.spec
    x, w = node.inputs
    out = node.out
    if not reads_stored(ctx.view(x)):
        raise LoweringError(f"{node.source}: convolution input must be a stored tensor, "
                            f"got a reshaped view")
    batch = spec.image_shape(x, spec.channels_last_in)[0]
    cout, cg, kh, kw = w.shape
    _, _, oh, ow = spec.image_shape(out, spec.channels_last_out)
    groups = spec.groups
    og = cout // groups
    item = x.dtype.itemsize
    acc_dtype = accumulator_dtype(x.dtype)
    matrix = ctx.config.core.matrix
    epi = epilogue_bytes(ctx, kernel, out)
    cast = out.dtype is not acc_dtype
    sets = ctx.sets
    taps = kh * kw
    shape = ((kh, kw), tuple(spec.stride), tuple(spec.dilation))

    def need(ty: int, tw: int, ot: int, ct: int) -> int:
        """The window; a chunk's weights as loaded and rearranged; the accumulator, its
        NCHW transpose, the cast and the epilogue's buffers."""
        rows, cols = window_size(*shape, ty, tw)
        return (sets * ct * rows * cols * item + 2 * sets * ot * ct * taps * item +
                sets * ot * ty * tw * (8 + (out.dtype.itemsize if cast else 0) + epi) +
                sets * 64 * 16 + 8192)

    try:
        ty, tw, ot, ct = _sizes(ctx, need, oh, ow, og, cg)
    except CapacityError as e:
        raise CapacityError(f"{node.source}: {e}") from None
    rows, cols = window_size(*shape, ty, tw)
    tiles = [((nb, nb + 1), gi, o0, y0, x0) for nb in range(batch) for gi in range(groups)
             for o0 in range(0, og, ot) for y0 in range(0, oh, ty) for x0 in range(0, ow, tw)]
    cores = min(ctx.cores, len(tiles))
    arrays = matrix.arrays if ctx.options.multi_array else 1
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    bufs = []
    for c in range(cores):
        arena = Arena(sram_space(c), ctx.capacity)
        bufs.append({
            "x": [arena.alloc((ct, rows, cols), x.dtype, "conv input window")
                  for _ in range(sets)],
            "wraw": [arena.alloc((ot, ct, kh, kw), w.dtype, "conv weight tile")
                     for _ in range(sets)],
            "w": [arena.alloc((kh, kw, ct, ot), w.dtype, "conv weight taps")
                  for _ in range(sets)],
            "acc": [arena.alloc((ty * tw, ot), acc_dtype, "conv accumulator")
                    for _ in range(sets)],
            "nchw": [arena.alloc((ot, ty * tw), acc_dtype, "conv output tile")
                     for _ in range(sets)],
            **tile_buffers(ctx, kernel, arena, ot, ty, tw, cast, False),
        })
    step_counts = [0] * cores
    source = node.source
    (sh, sw), (dh, dw) = spec.stride, spec.dilation
    for tile in conv_tiles(tiles, cores, sets, arrays, og, ot, (oh, ow), (ty, tw)):
        core, q, mxu, gi, oo, b = tile.core, tile.q, tile.mxu, tile.gi, tile.oo, bufs[tile.core]
        nb = tile.images[0]
        trows, tcols, no, pix = tile.rows, tile.cols, tile.no, tile.pix
        nrows, ncols = trows[1] - trows[0], tcols[1] - tcols[0]
        wrows, wcols = window_size(*shape, nrows, ncols)
        chunks = list(range(0, cg, ct))
        for s, c0 in enumerate(chunks):
            cc = (c0, min(c0 + ct, cg))
            nc = cc[1] - cc[0]
            xs = step_counts[core] % sets
            step_counts[core] += 1
            win = sub(b["x"][xs], (nc, wrows, wcols))

            def load(core=core, b=b, xs=xs, cc=cc, nc=nc, nb=nb, gi=gi, oo=oo, no=no,
                     win=win, corner=(trows[0] * sh, tcols[0] * sw)) -> None:
                wref = stored_ref(ctx, w, (Slice(*oo), Slice(*cc), Slice(0, kh),
                                           Slice(0, kw)))
                raw = sub(b["wraw"][xs], (no, nc, kh, kw))
                ctx.em.emit(ctx.em.dma(core, "load"), Load(wref, raw), source)
                ctx.em.emit(vpu_engine(core), Transpose(
                    raw, sub(b["w"][xs], (kh, kw, nc, no)), (2, 3, 1, 0)), source)
                load_window(ctx, x, nb, (gi * cg + cc[0], gi * cg + cc[1]), corner, spec,
                            core, win, source)

            def compute(b=b, xs=xs, q=q, nc=nc, no=no, pix=pix, s=s, mxu=mxu, win=win,
                        nrows=nrows, ncols=ncols, wrows=wrows, wcols=wcols) -> None:
                acc = sub(b["acc"][q], (pix, no))
                for t in range(taps):
                    i, j = divmod(t, kw)
                    a = SramRef(win.space, win.offset + (i * dh * wcols + j * dw) * item,
                                (nrows, ncols, nc), win.dtype, (sh * wcols, sw, wrows * wcols))
                    wt = sub(b["w"][xs], (nc, no), t * nc * no)
                    ctx.em.emit(mxu, MatMul(a, wt, acc, s > 0 or t > 0), source)

            store = (lambda: None)
            if s == len(chunks) - 1:
                box = (tile.images, oo, trows, tcols)
                store = pixels_finisher(ctx, kernel, core, b, q, box, (no, pix), cast, True)
            per_core[core].append(TileSteps(load, compute, store))
    pipeline(per_core, sets - 1)


def load_window(ctx: Context, x: g.Value, n: int, chans: tuple[int, int],
                corner: tuple[int, int], spec: g.Conv2d, core: int, dst: SramRef,
                source: str) -> None:
    """``dst`` [c, rows, cols] := the zero-padded input window whose first element is
    at padded row and column ``corner``: the border strips the padding covers are
    zero-filled, the interior lands by one strided DMA."""
    _, _, height, width = spec.image_shape(x, spec.channels_last_in)
    placed = padded_window(ctx, core, dst, corner, tuple(spec.padding), (height, width),
                           0.0, source)
    if placed is not None:
        inside, rows, cols = placed
        ctx.em.emit(ctx.em.dma(core, "load"),
                    image_load(ctx, x, spec.channels_last_in, (n, n + 1), chans, rows, cols,
                               inside), source)
