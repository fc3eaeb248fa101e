"""Patch embeddings: convolutions whose stride is their kernel (ViT's 16x16 stride 16,
CLIP's 32x32 stride 32, Swin's 4x4 stride 4), without padding or dilation.

Their windows do not overlap and cover every input pixel at most once, so the
im2col of the image is the image itself, rearranged: output pixel ``(y, x)`` reads
``x[c, y kh + i, x kw + j]`` for every ``(c, i, j)``, and the convolution is one
matmul ``P [pixels, C kh kw] @ W^T [C kh kw, O]`` with the weights as stored
(``[O, C, kh, kw]`` is ``[O, K]``). Per block of output rows, one DMA loads the
block's input rows (each a contiguous run of the image in DRAM) and writes them
through a strided view into ``P``, whose rows are the pixels: from an NCHW image a
run of ``kw`` elements lands per (pixel, channel, kernel row), from an NHWC one a run
of ``kw x C``. No tap is copied, and K is the whole patch (3,072 for CLIP), where the
implicit GEMM (:mod:`compiler.kernels.conv`) copied each of the 1,024 taps of every
tile on the vector unit and multiplied K = 3 channels at a time.

From an NHWC image K's order is ``(i, j, c)``: each weight tile is transposed once on
the vector unit into that order. The matmul runs pixels-major (``P @ W^T``, the
accumulator ``[pixels, o]``: an NHWC tile, transposed for an NCHW output) or
channels-major (``W @ P^T``, ``[o, pixels]``: an NCHW tile). The output channels are
cut into tiles and the pixel blocks and channel tiles are spread over a grid of
cores (:class:`PatchTiling`). On each core a block's patches load once, its channel
tiles take the core's arrays in turn, and their weights stream in chunks of K
(whole kernel rows) so the arrays start on the first chunk while the next loads; a
core keeps its weights resident across blocks when they fit. The cost model picks
all of it (:func:`~compiler.kernels.conv_patch_tiling.choose_patch_tiling`); the convolution kernel weighs its estimate
against the other mappings'.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from archsim.config.names import mxu_engine, sram_space, vpu_engine
from compiler.emit import Arena
from compiler.ir.operands import Slice, SramRef
from compiler.ir.ops import Load, MatMul, Op, Transpose
from compiler.kernels.common import Context, TileSteps, pipeline
from compiler.kernels.conv_geometry import pixels_finisher, stored_ref, tile_buffers
from compiler.kernels.conv_patch_tiling import PatchShape, PatchTiling, patch_shape
from compiler.kernels.matmul import accumulator_dtype
from compiler.kernels.vector import sub
from compiler.plan import Kernel


def lower_conv_patch(ctx: Context, kernel: Kernel, tiling: PatchTiling) -> None:
    """Emit the patch embedding of ``kernel`` with ``tiling`` (see the module)."""
    node = kernel.anchor
    (x, _), out = node.inputs, node.out
    shape = patch_shape(node)
    oh, ow, k = *shape.out_size, shape.k
    nhwc_in, nhwc_out = shape.nhwc
    ni, ty, ot = tiling.images, tiling.out_rows, tiling.out_channels
    acc_dtype = accumulator_dtype(x.dtype)
    cast = out.dtype is not acc_dtype
    sets = ctx.sets
    arrays = ctx.config.core.matrix.arrays if ctx.options.multi_array else 1
    blocks = [((n0, min(n0 + ni, shape.batch)), (y0, min(y0 + ty, oh)))
              for n0 in range(0, shape.batch, ni) for y0 in range(0, oh, ty)]
    otiles = [(o0, min(o0 + ot, shape.filters)) for o0 in range(0, shape.filters, ot)]
    chunks = shape.chunks(tiling.chunk_rows)
    unit = k // (shape.kernel[0] if nhwc_in else shape.channels * shape.kernel[0])
    kc = max(u1 - u0 for u0, u1 in chunks) * unit
    rows, columns = tiling.grid
    pix = ni * ty * ow
    per_core: list[list[TileSteps]] = []
    for core in range(rows * columns):
        mine_p, mine_w = blocks[core // columns::rows], otiles[core % columns::columns]
        keep = tiling.kept
        ring = sets * min(arrays, len(mine_w))
        arena = Arena(sram_space(core), ctx.capacity)
        alloc = arena.alloc
        b = {
            "p": [alloc((pix, k), x.dtype, "conv patches") for _ in range(sets)],
            # kept: a tile's chunks side by side, each dense (a strided view of one
            # would span its neighbours, whose loads would then wait for its matmul)
            "w": [alloc((len(chunks) if keep else 1, ot, kc), x.dtype, "conv weights")
                  for _ in range(len(mine_w) if keep else ring)],
            "wraw": [alloc((ot, kc), x.dtype, "conv weights as stored")
                     for _ in range(ring if nhwc_in else 0)],
            "acc": [[alloc((pix, ot), acc_dtype, "conv accumulator") for _ in mine_w]
                    for _ in range(sets)],
            "nchw": [alloc((pix, ot), acc_dtype, "conv output tile")
                     for _ in range(sets if tiling.pixels_major and not nhwc_out else 0)],
            **tile_buffers(ctx, kernel, arena, ot, ty, ow, cast, not tiling.pixels_major,
                           ni),
        }
        steps: list[TileSteps] = []
        loaded = finished = 0  # weight chunks loaded, tiles finished
        for bi, block in enumerate(mine_p):
            for ci, chunk in enumerate(chunks):
                for ti, oo in enumerate(mine_w):
                    load_w = not keep or bi == 0
                    slot = ti if keep else loaded % ring
                    cell = _Cell(ctx, kernel, shape, tiling.pixels_major, core, b, block, oo,
                                 bi % sets, slot, loaded % ring, ti, chunk, ci if keep else 0)
                    loaded += load_w
                    store: Callable[[], None] = lambda: None
                    if ci == len(chunks) - 1:
                        store = cell.finisher(cast, finished % sets)
                        finished += 1
                    steps.append(TileSteps(cell.loader(ci == 0 and ti == 0, load_w),
                                           partial(cell.compute, ti % arrays, ci > 0), store))
        per_core.append(steps)
    pipeline(per_core, sets - 1)


@dataclass(frozen=True)
class _Cell:
    """One step of a core: chunk ``chunk`` (kernel rows, in K's order) of the weights
    of channel tile ``oo`` (the core's ``tile``-th) times the patches of ``block``.
    ``q``: the block's buffer set (patches, accumulators); ``slot``: the buffer the
    chunk's weights lie in (a tile's own, kept, or a ring's), ``place`` their place in
    it; ``raw``: the ring slot an NHWC image's weights load into before their
    transpose."""

    ctx: Context
    kernel: Kernel
    shape: PatchShape
    pixels_major: bool
    core: int
    b: dict
    block: tuple[tuple[int, int], tuple[int, int]]
    oo: tuple[int, int]
    q: int
    slot: int
    raw: int
    tile: int
    chunk: tuple[int, int]
    place: int

    def _emit(self, engine: str, op: Op) -> None:
        self.ctx.em.emit(engine, op, self.kernel.anchor.source)

    @property
    def _unit(self) -> int:
        """K elements per kernel row."""
        shape = self.shape
        return shape.kernel[1] * (shape.channels if shape.nhwc[0] else 1)

    @property
    def _k_range(self) -> tuple[int, int]:
        return self.chunk[0] * self._unit, self.chunk[1] * self._unit

    def _sizes(self) -> tuple[int, int, int]:
        """(images, output rows, output channels) of the step."""
        (n0, n1), (y0, y1) = self.block
        return n1 - n0, y1 - y0, self.oo[1] - self.oo[0]

    def loader(self, patches: bool, weights: bool) -> Callable[[], None]:
        def load() -> None:
            if patches:
                self._load_patches()
            if weights:
                self._load_weights()
        return load

    def _load_patches(self) -> None:
        """The block's input rows into ``P [pixels, K]`` through a view: one DMA per
        load engine, each of a share of one image's patch rows."""
        shape, ctx = self.shape, self.ctx
        (kh, kw), ow, k, c = shape.kernel, shape.out_size[1], shape.k, shape.channels
        (n0, n1), (y0, y1) = self.block
        nn, nty = n1 - n0, y1 - y0
        p = self.b["p"][self.q]
        engines = max(1, ctx.config.core.dma.engines - 1)
        parts = 1 if nn > 1 else min(nty, engines)
        cuts = [y0 + nty * i // parts for i in range(parts + 1)]
        for ya, yb in zip(cuts, cuts[1:]):
            images, rows, cols = Slice(n0, n1), Slice(ya * kh, yb * kh), Slice(0, ow * kw)
            if shape.nhwc[0]:  # (n, y, i, x, j, c): K is (i, j, c)
                box = (images, rows, cols, Slice(0, c))
                view = ((nn, yb - ya, kh, ow, kw, c), (nty * ow * k, ow * k, kw * c, k, c, 1))
            else:  # (n, c, y, i, x, j): K is (c, i, j)
                box = (images, Slice(0, c), rows, cols)
                view = ((nn, c, yb - ya, kh, ow, kw),
                        (nty * ow * k, kh * kw, ow * k, kw, k, 1))
            dst = SramRef(p.space, p.offset + (ya - y0) * ow * k * p.dtype.itemsize, view[0],
                          p.dtype, view[1])
            self._emit(ctx.em.dma(self.core, "load"),
                       Load(stored_ref(ctx, self.kernel.anchor.inputs[0], box), dst))

    def _weights(self) -> SramRef:
        """The chunk's weights ``[o, kc]`` (K's order), dense."""
        k0, k1 = self._k_range
        buf = self.b["w"][self.slot]
        _, ot, kc = buf.shape
        return sub(buf, (self.oo[1] - self.oo[0], k1 - k0), self.place * ot * kc)

    def _load_weights(self) -> None:
        """The chunk's filters as stored (kernel rows of one channel or whole
        channels); from an NHWC image transposed into K's ``(i, j, c)`` order."""
        shape = self.shape
        c, (kh, kw) = shape.channels, shape.kernel
        no = self.oo[1] - self.oo[0]
        u0, u1 = self.chunk
        dst = self._weights()
        ld, base = dst.shape[1], dst.offset
        if shape.nhwc[0]:  # kernel rows u0:u1 of every channel
            box = (Slice(*self.oo), Slice(0, c), Slice(u0, u1), Slice(0, kw))
            raw = sub(self.b["wraw"][self.raw], (no, c, u1 - u0, kw))
        elif u0 // kh == (u1 - 1) // kh:  # kernel rows of one channel
            box = (Slice(*self.oo), Slice(u0 // kh, u0 // kh + 1), Slice(u0 % kh, (u1 - 1) % kh + 1),
                   Slice(0, kw))
            raw = SramRef(dst.space, base, (no, 1, u1 - u0, kw), dst.dtype,
                          (ld, kh * kw, kw, 1))
        else:  # whole channels
            box = (Slice(*self.oo), Slice(u0 // kh, u1 // kh), Slice(0, kh), Slice(0, kw))
            raw = SramRef(dst.space, base, (no, (u1 - u0) // kh, kh, kw), dst.dtype,
                          (ld, kh * kw, kw, 1))
        ref = stored_ref(self.ctx, self.kernel.anchor.inputs[1], box)
        self._emit(self.ctx.em.dma(self.core, "load"), Load(ref, raw))
        if shape.nhwc[0]:
            rows = (u1 - u0) * kw
            self._emit(vpu_engine(self.core), Transpose(
                sub(raw, (no, c, rows)),
                SramRef(dst.space, base, (no, rows, c), dst.dtype, (ld, c, 1)), (0, 2, 1)))

    def compute(self, array: int, accumulate: bool) -> None:
        ni, nty, no = self._sizes()
        k0, k1 = self._k_range
        pix, k = ni * nty * self.shape.out_size[1], self.shape.k
        p = self.b["p"][self.q]
        w = self._weights()
        acc = self.b["acc"][self.q][self.tile]
        item = p.dtype.itemsize
        if self.pixels_major:  # P [pix, kc] @ W^T [kc, o]
            a = SramRef(p.space, p.offset + k0 * item, (pix, k1 - k0), p.dtype, (k, 1))
            wt = SramRef(w.space, w.offset, (k1 - k0, no), w.dtype, (1, k1 - k0))
            op = MatMul(a, wt, sub(acc, (pix, no)), accumulate)
        else:  # W [o, kc] @ P^T [kc, pix]
            pt = SramRef(p.space, p.offset + k0 * item, (k1 - k0, pix), p.dtype, (1, k))
            op = MatMul(w, pt, sub(acc, (no, pix)), accumulate)
        self._emit(mxu_engine(self.core, array), op)

    def finisher(self, cast: bool, q: int) -> Callable[[], None]:
        """The tile into the output (the finishing buffers of set ``q``,
        :func:`~compiler.kernels.conv_geometry.pixels_finisher`): a pixels-major tile is
        NHWC (or transposed per image into NCHW), a channels-major one NCHW."""
        ni, nty, no = self._sizes()
        ow = self.shape.out_size[1]
        (n0, n1), (y0, y1) = self.block
        box = ((n0, n1), self.oo, (y0, y1), (0, ow))
        shape = (ni, no, nty * ow) if self.pixels_major else (no, nty * ow)
        b = {**self.b, "acc": {q: self.b["acc"][self.q][self.tile]}}
        return pixels_finisher(self.ctx, self.kernel, self.core, b, q, box, shape, cast,
                               self.pixels_major)
