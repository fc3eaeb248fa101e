"""Convolution as implicit GEMM, and pooling, on padded NCHW inputs.

Conv: an output tile is ``[o-tile, rows x OW]`` of one image and group. For each input
channel chunk the weight tile is loaded once and rearranged on the vector engine to
``[kh, kw, o, c]``; then for each kernel tap the strided input window ``[c, rows x OW]``
is loaded and one matmul accumulates ``W_tap[o, c] @ X_tap[c, pixels]``. The output
tile is already NCHW. Pool: per tap, load the strided window and max/add it into the
accumulator on the vector engine.
"""

from __future__ import annotations

from archsim.errors import CapacityError, LoweringError
from compiler import graph as g
from compiler.emit import Arena
from compiler.graph import Value

from compiler.ir.operands import DramRef, Scalar, Slice
from compiler.ir.ops import Binary, BinaryKind, Cast, Load, MatMul, Transpose
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


def lower_conv_kernel(ctx: Context, kernel: Kernel) -> None:
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
              box: tuple[tuple[int, int], ...], shape: tuple[int, int], cast: bool):
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
        finish = _pool_finisher(ctx, kernel, core, b, q, box, shape)
        per_core[core].append(TileSteps(work, lambda: None, finish))
    pipeline(per_core, sets - 1)


def _pool_finisher(ctx: Context, kernel: Kernel, core: int, b: dict, q: int,
                   box: tuple[tuple[int, int], ...], shape: tuple[int, int]):
    out = kernel.anchor.out
    source = kernel.anchor.source

    def store() -> None:
        value = sub(b["acc"][q], shape)
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



