"""Convolution as implicit GEMM on NCHW tensors, with padding by addressing.

A tile is ``ty`` output rows (or, of a long row, ``tw`` of its columns) x an
output-channel tile of ``ni`` images of one group (several images only with whole
images: the batch folds into the GEMM's rows). Per
input-channel chunk the zero-padded window ``[ni, c, rows, cols]`` is built in SRAM:
its border is zero-filled and the input's interior lands inside it by one strided DMA,
so the padded tensor never exists in DRAM. The vector engine rearranges the window into
stride phases, channels last (:class:`~compiler.kernels.conv_geometry.Geometry`); each
tap's A operand is then a strided view ``[ni, ty, ow, c]`` of those planes streaming
exactly the tile's output pixels, B is the tap's weights ``[c, o]`` (kept resident per
core when they fit), and the taps accumulate into one ``[pixels, o]`` accumulator,
transposed back to NCHW once. Arrays taller than a chunk get several taps packed into K
(copied side by side). Tile sizes come from the cost model
(:func:`~compiler.kernels.conv_tiling.choose_conv_tiling`); when no tile fits the
scratchpad the per-tap kernel (:mod:`compiler.kernels.conv_per_tap`) runs instead.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

from archsim.config.names import mxu_engine, sram_space, vpu_engine
from archsim.errors import CapacityError, LoweringError
from compiler import graph as g
from compiler.emit import Arena
from compiler.ir.dtypes import DType
from compiler.ir.operands import Scalar, Slice, SramRef
from compiler.ir.ops import Binary, BinaryKind, Load, MatMul, Transpose, VCopy
from compiler.kernels.common import Context, TileSteps, pipeline
from compiler.kernels.conv_geometry import (
    Geometry, conv_tiles, epilogue_bytes, finisher, image_load, padded_window, reads_stored, row_block,
    stored_ref, valid_range,
)
from compiler.kernels.conv_depthwise import (
    choose_depthwise_tiling,
    is_depthwise,
    lower_conv_depthwise,
)
from compiler.kernels.conv_packed import choose_packed_tiling, lower_conv_packed, packed_inputs
from compiler.kernels.conv_patch import lower_conv_patch
from compiler.kernels.conv_patch_tiling import choose_patch_tiling, is_patch_embedding
from compiler.kernels.conv_per_tap import lower_conv_per_tap
from compiler.kernels.conv_tiling import (
    ConvTiling, choose_conv_tiling, packed_groups, weight_loads,
)
from compiler.kernels.matmul import accumulator_dtype
from compiler.kernels.vector import layout, sub
from compiler.plan import Kernel


class _Layout(NamedTuple):
    """A tiling laid out: the tiles and every core's SRAM buffers."""

    tiling: ConvTiling
    geo: Geometry
    """The window of a full tile (its ``out_cols`` the tile's width)."""
    tap_groups: list[list[tuple[int, int]]]
    tiles: list[tuple[tuple[int, int], int, int, int, int]]
    """(images, group, first output channel in the group, first output row, first output
    column), for :func:`~compiler.kernels.conv_geometry.conv_tiles`."""
    cores: int
    bufs: list[dict[str, Any]]
    zeroed: list[dict[int, tuple[int, ...]]]
    """Per core and buffer set, the window layout whose border is zero already (an
    interior load never touches the border, so the next tile of that layout skips
    the fills)."""


def _buffers(ctx: Context, kernel: Kernel, geo: Geometry, tiling: ConvTiling,
             acc_dtype: DType, cast: bool) -> _Layout:
    """Allocate every core's buffers for ``tiling``; raises CapacityError when they do
    not fit the scratchpad."""
    node = kernel.anchor
    spec: g.Conv2d = node.spec
    (x, w), out = node.inputs, node.out
    batch, groups = x.shape[0], spec.groups
    cout, cg, kh, kw = w.shape
    _, _, oh, ow = spec.image_shape(out, spec.channels_last_out)
    og = cout // groups
    ni, ty, ot, ct, ntap = (tiling.images, tiling.out_rows, tiling.out_channels,
                            tiling.in_channels, tiling.taps)
    tw = tiling.out_cols or ow
    geo = replace(geo, out_cols=tw)
    if tiling.row_blocks:  # a step is one kernel row: its own 1 x kw convolution
        geo, kh, bk = row_block(geo), 1, kh  # bk: the steps a chunk takes
    else:
        bk = 1
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    tap_groups = [taps[t:t + ntap] for t in range(0, len(taps), ntap)]
    tiles = [((n0, min(n0 + ni, batch)), gi, o0, y0, x0) for n0 in range(0, batch, ni)
             for gi in range(groups) for y0 in range(0, oh, ty) for x0 in range(0, ow, tw)
             for o0 in range(0, og, ot)]
    cores = min(ctx.cores, len(tiles))
    sets = ctx.sets
    rows, m, ow = geo.rows(ty), ni * ty * tw, tw
    packed = packed_groups(len(taps), ntap)
    # the weight blocks (group and channel tile, each of every chunk) each core meets
    chunks = -(-cg // ct)
    blocks = [len({(gi, o0) for _, gi, o0, _, _ in tiles[c::cores]}) * chunks * bk
              for c in range(cores)]
    bufs = []
    for c in range(cores):
        arena = Arena(sram_space(c), ctx.capacity)
        alloc = arena.alloc
        bufs.append({
            "raw": [alloc((ni, ct, rows, geo.cols), x.dtype, "conv input window")
                    for _ in range(sets)] if not tiling.direct_phases else [],
            "planes": [alloc((ni * rows * geo.cols, ct), x.dtype, "conv input planes")
                       for _ in range(sets)],
            "wraw": [alloc((ot, ct, kh, kw), x.dtype, "conv weight tile") for _ in range(
                weight_loads(tiling.resident_weights, tiling.blocks_kept, sets))],
            "w": [alloc((kh * kw * ct, ot), x.dtype, "conv weight taps")
                  for _ in range(0 if tiling.blocks_kept and tiling.resident_weights else
                                 1 if tiling.resident_weights else sets)],
            "kept": alloc((blocks[c] * ot * ct * kh * kw if tiling.blocks_kept else
                           cout * cg * kh * kw,), x.dtype, "conv resident weights")
            if tiling.resident_weights else None,
            "stage": alloc((ntap, m, ct), x.dtype, "conv tap staging") if ntap > 1 else None,
            "packed": [alloc((packed, m, ntap * ct), x.dtype, "conv packed taps")
                       for _ in range(sets)] if packed else [],
            "acc": [alloc((m, ot), acc_dtype, "conv accumulator") for _ in range(sets)],
            "nchw": [alloc((ni, ot, ty * ow), acc_dtype, "conv output tile")
                     for _ in range(sets)],
            "out": [alloc((ni, ot, ty * ow), out.dtype, "conv output") if cast else None
                    for _ in range(sets)],
            "epi": [layout(ctx, kernel.group, (ni, ty, ow, ot) if spec.channels_last_out
                           else (ni, ot, ty, ow), arena, 1, {out.id})
                    if kernel.group else None for _ in range(sets)],
        })
    return _Layout(tiling, geo, tap_groups, tiles, cores, bufs, [{} for _ in range(cores)])


def lower_conv_kernel(ctx: Context, kernel: Kernel) -> None:
    node = kernel.anchor
    spec: g.Conv2d = node.spec
    (x, w), out = node.inputs, node.out
    batch, _, height, width = spec.image_shape(x, spec.channels_last_in)
    cout, cg, kh, kw = w.shape
    _, _, oh, ow = spec.image_shape(out, spec.channels_last_out)
    if not reads_stored(ctx.view(x)):
        raise LoweringError(f"{node.source}: convolution input must be a stored tensor, "
                            f"got a reshaped view")
    (ph, pw), (eh, ew) = spec.padding, spec.pads_end
    geo = Geometry((kh, kw), tuple(spec.stride), tuple(spec.dilation), oh, ow,
                   height + ph + eh, width + pw + ew)
    acc_dtype = accumulator_dtype(x.dtype)
    cast = out.dtype is not acc_dtype
    arrays = ctx.config.core.matrix.arrays if ctx.options.multi_array else 1
    epi_ops = len(kernel.group.nodes) if kernel.group else 0
    # The SRAM estimate of a tiling is close, not exact (alignment, epilogue layouts): if
    # the buffers of the chosen tiling do not fit, choose again under a smaller budget.
    budget = ctx.capacity
    packed = choose_packed_tiling(ctx, **packed_inputs(ctx, kernel))
    depthwise = choose_depthwise_tiling(ctx, kernel) if is_depthwise(node) else None
    patch = choose_patch_tiling(ctx, kernel) if is_patch_embedding(node) else None
    while True:
        tiling = choose_conv_tiling(ctx, geo, batch, spec.groups, cg, cout // spec.groups,
                                    x.dtype, out.dtype.itemsize, cast,
                                    epilogue_bytes(ctx, kernel, out), epi_ops, arrays, budget,
                                    (spec.channels_last_in, spec.channels_last_out))
        estimates = {name: found.cost.estimate(ctx.config) if found is not None else None
                     for name, found, applies in (
                         ("depthwise", depthwise, depthwise is not None),
                         ("patch", patch, is_patch_embedding(node)),
                         ("packed", packed, True), ("gemm", tiling, True)) if applies}
        taken = _taken(estimates)
        ctx.choices[node.source] = _choice(taken, estimates) + _layout_note(spec)
        if taken == "depthwise":
            lower_conv_depthwise(ctx, kernel, depthwise)
            return
        if taken == "patch":
            lower_conv_patch(ctx, kernel, patch)
            return
        if taken == "packed":
            lower_conv_packed(ctx, kernel, packed)
            return
        if tiling is None:
            lower_conv_per_tap(ctx, kernel)
            return
        try:
            plan = _buffers(ctx, kernel, geo, tiling, acc_dtype, cast)
            break
        except CapacityError:
            budget = budget * 7 // 8
    _emit(ctx, kernel, geo, plan, arrays, cast)


def _emit(ctx: Context, kernel: Kernel, geo: Geometry, plan: _Layout, arrays: int,
          cast: bool) -> None:
    node = kernel.anchor
    w, source = node.inputs[1], node.source
    cout, cg, kh, kw = w.shape
    # the kernel rows of a step: all, or with row blocks one (``None``: all)
    blocks: list[int | None] = list(range(kh)) if plan.tiling.row_blocks else [None]
    if plan.tiling.row_blocks:
        kh = 1
    og = cout // node.spec.groups
    tiling, cores = plan.tiling, plan.cores
    kept: list[dict[tuple[tuple[int, int], tuple[int, int], int | None], SramRef]] = \
        [{} for _ in range(cores)]
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    step_counts = [0] * cores

    def weights(core: int, xs: int, oo: tuple[int, int], cc: tuple[int, int],
                block: int | None) -> tuple[SramRef, Transpose | None]:
        """Load a weight block (once per core when weights are resident): kernel row
        ``block`` or all rows; returns where it lives as ``[kh * kw * c, o]`` and the
        rearrangement still to emit."""
        b = plan.bufs[core]
        no, nc = oo[1] - oo[0], cc[1] - cc[0]
        key = (oo, cc, block)
        if tiling.resident_weights:
            if key in kept[core]:
                return kept[core][key], None
            offset = len(kept[core]) * tiling.out_channels * tiling.in_channels * kh * kw \
                if tiling.blocks_kept else (oo[0] * cg + cc[0] * no) * kh * kw
            dst = kept[core][key] = sub(b["kept"], (kh * kw * nc, no), offset)
        else:
            dst = sub(b["w"][xs], (kh * kw * nc, no))
        krows = Slice(0, kh) if block is None else Slice(block, block + 1)
        wref = stored_ref(ctx, w, (Slice(*oo), Slice(*cc), krows, Slice(0, kw)))
        wraw = sub(b["wraw"][xs % len(b["wraw"])], (no, nc, kh, kw))
        ctx.em.emit(ctx.em.dma(core, "load"), Load(wref, wraw), source)
        return dst, Transpose(wraw, sub(dst, (kh, kw, nc, no)), (2, 3, 1, 0))

    for tile in conv_tiles(plan.tiles, cores, ctx.sets, arrays, og, tiling.out_channels,
                           (geo.out_rows, geo.out_cols), (tiling.out_rows, plan.geo.out_cols)):
        core, gi = tile.core, tile.gi
        steps = [(c0, block) for c0 in range(0, cg, tiling.in_channels) for block in blocks]
        for s, (c0, block) in enumerate(steps):
            cc = (gi * cg + c0, gi * cg + min(c0 + tiling.in_channels, cg))
            xs = step_counts[core] % ctx.sets
            step_counts[core] += 1
            step = _Step(ctx, node, plan, core, xs, tile.q, tile.images,
                         (tile.rows, tile.cols), tile.oo, cc, arrays, tile.array, block)

            def load(step=step, c0=c0, block=block) -> None:
                w_ref, rearrange = weights(step.core, step.xs, step.oo,
                                           (c0, c0 + step.nc), block)
                step.load(w_ref, rearrange)

            store = (lambda: None)
            if s == len(steps) - 1:
                store = step.finisher(kernel, cast)
            per_core[core].append(TileSteps(load, step.compute if s else step.compute_first,
                                            store))
    pipeline(per_core, ctx.sets - 1)


class _Step:
    """One input-channel chunk of one tile: build the window, multiply every tap."""

    def __init__(self, ctx: Context, node: g.Node, plan: _Layout, core: int,
                 xs: int, q: int, images: tuple[int, int],
                 pixels: tuple[tuple[int, int], tuple[int, int]],
                 oo: tuple[int, int], cc: tuple[int, int], arrays: int, turn: int,
                 block: int | None = None) -> None:
        self.ctx, self.node, self.geo, self.plan = ctx, node, plan.geo, plan
        self.core, self.xs, self.q = core, xs, q
        self.arrays, self.turn = arrays, turn
        self.rows, self.cols = pixels  # output rows and columns
        self.images, self.oo, self.cc = images, oo, cc
        self.ni, self.ty = images[1] - images[0], self.rows[1] - self.rows[0]
        self.tw = self.cols[1] - self.cols[0]  # the tile's width (a last one narrower)
        self.block = block  # with row blocks, the kernel row this step multiplies
        self.no, self.nc = oo[1] - oo[0], cc[1] - cc[0]
        self.b = plan.bufs[core]
        self.vpu = vpu_engine(core)
        self.operands: list[SramRef] = []
        self.strides: tuple[int, ...] = ()
        self.w: SramRef | None = None

    def emit(self, engine: str, op: Any) -> None:
        self.ctx.em.emit(engine, op, self.node.source)

    def load(self, w: SramRef, rearrange: Transpose | None) -> None:
        geo, ni, nc, ty = self.geo, self.ni, self.nc, self.ty
        rows, cols = geo.rows(ty), geo.cols
        self.w = w
        sh, sw = geo.stride
        planes = self.b["planes"][self.xs]
        nhwc = self.node.spec.channels_last_in
        if nhwc and self.plan.tiling.direct_phases:
            self._phases(sub(planes, (sh, sw, ni, rows // sh, geo.plane_cols, nc)))
        elif nhwc:  # the window as stored, its phases split on the vector unit
            raw = sub(self.b["raw"][self.xs], (1, 1, ni, rows, cols, nc))
            self._phases(raw)
            self.emit(self.vpu, Transpose(
                sub(raw, (ni, rows // sh, sh, geo.plane_cols, sw, nc)),
                sub(planes, (sh, sw, ni, rows // sh, geo.plane_cols, nc)), (2, 4, 0, 1, 3, 5)))
        else:
            raw = sub(self.b["raw"][self.xs], (ni, nc, rows, cols))
            self._window(raw)
            self.emit(self.vpu, Transpose(
                sub(raw, (ni, nc, rows // sh, sh, geo.plane_cols, sw)),
                sub(planes, (sh, sw, ni, rows // sh, geo.plane_cols, nc)), (3, 5, 0, 2, 4, 1)))
        if rearrange is not None:
            self.emit(self.vpu, rearrange)
        m, tw = ni * ty * self.tw, self.tw
        image_rows = geo.plane_rows(ty)
        strides = self.strides = (image_rows * geo.plane_cols * nc, geo.plane_cols * nc,
                                  nc, 1)

        def tap_view(i: int, j: int) -> SramRef:
            offset = geo.shift(ty, i, j, ni) * nc * planes.dtype.itemsize
            return SramRef(planes.space, planes.offset + offset, (ni, ty, tw, nc),
                           planes.dtype, strides)

        slot = 0
        for group in self.plan.tap_groups:
            if len(group) == 1:
                self.operands.append(tap_view(*group[0]))
                continue
            stage = sub(self.b["stage"], (len(group), m, nc))
            for u, (i, j) in enumerate(group):
                self.emit(self.vpu, VCopy(tap_view(i, j),
                                          sub(stage, (ni, ty, tw, nc), u * m * nc)))
            tiling = self.plan.tiling
            a = sub(self.b["packed"][self.xs], (m, len(group), nc),
                    slot * m * tiling.taps * tiling.in_channels)
            slot += 1
            self.emit(self.vpu, Transpose(stage, a, (1, 0, 2)))
            self.operands.append(sub(a, (m, len(group) * nc)))

    def _window(self, raw: SramRef) -> None:
        """``raw`` [ni, c, rows, cols] := the zero-padded input window
        (:func:`~compiler.kernels.conv_geometry.padded_window`; with row blocks the rows
        one kernel row reads, ``sh`` apart)."""
        node = self.node
        x = node.inputs[0]
        (sh, sw), (dh, _) = node.spec.stride, node.spec.dilation
        r0 = self.rows[0] * sh  # first window row, in padded coordinates
        if self.block is not None:
            r0 += self.block * dh
        placed = padded_window(self.ctx, self.core, raw, (r0, self.cols[0] * sw),
                               tuple(node.spec.padding), tuple(x.shape[2:]), 0.0,
                               node.source, 0, row_step=1 if self.block is None else sh,
                               zeroed=(self.plan.zeroed[self.core], self.xs))
        if placed is not None:
            inside, rows, cols = placed
            self.emit(self.ctx.em.dma(self.core, "load"),
                      image_load(self.ctx, x, False, self.images, self.cc, rows, cols,
                                 inside))

    def _phases(self, planes: SramRef) -> None:
        """``planes`` [sh, sw, ni, plane rows, plane cols, c] := the zero-padded window's
        stride phases, read from the NHWC image: per phase, zero the border strips
        the padding covers and one strided DMA of the interior (runs of c channels).
        With ``sh = sw = 1`` it is the window itself."""
        node = self.node
        x = node.inputs[0]
        (ph, pw) = node.spec.padding
        _, height, width, _ = x.shape
        sh, sw, ni, prow, pcol, nc = planes.shape
        r0 = self.rows[0] * self.geo.stride[0]  # first window row, in padded coordinates
        c0 = self.cols[0] * self.geo.stride[1]  # and column
        strides = (prow * pcol * nc, pcol * nc, nc, 1)
        item = planes.dtype.itemsize
        layouts = []
        read = self.geo.phases_read() if (sh, sw) == self.geo.stride else {(0, 0)}
        for a in range(sh):
            for c in range(sw):
                if (a, c) not in read:  # no tap reads this phase: left unloaded
                    continue
                base = planes.offset + (a * sw + c) * ni * prow * pcol * nc * item
                ya, yb = valid_range(0, prow, r0 + a - ph, sh, height)
                xa, xb = valid_range(0, pcol, c0 + c - pw, sw, width)
                layouts.append((base, ya, yb, xa, xb))
        shape = ("nhwc", *planes.shape, *layouts)
        if self.plan.zeroed[self.core].get(self.xs) != shape:
            self.plan.zeroed[self.core][self.xs] = shape
            for base, ya, yb, xa, xb in layouts:
                for row, nrows, col, ncols in ((0, ya, 0, pcol), (yb, prow - yb, 0, pcol),
                                               (ya, yb - ya, 0, xa),
                                               (ya, yb - ya, xb, pcol - xb)):
                    if nrows > 0 and ncols > 0:
                        strip = SramRef(planes.space, base + (row * pcol + col) * nc * item,
                                        (ni, nrows, ncols, nc), planes.dtype, strides)
                        self.emit(self.vpu, Binary(BinaryKind.add, Scalar(0.0), Scalar(0.0),
                                                   strip))
        for (a, c), (base, ya, yb, xa, xb) in zip(sorted(read), layouts):
            if yb <= ya or xb <= xa:
                continue
            u0 = r0 + a + ya * sh - ph
            v0 = c0 + c + xa * sw - pw
            ref = stored_ref(self.ctx, x, (Slice(*self.images),
                                           Slice(u0, u0 + (yb - ya - 1) * sh + 1, sh),
                                           Slice(v0, v0 + (xb - xa - 1) * sw + 1, sw),
                                           Slice(*self.cc)))
            inside = SramRef(planes.space, base + (ya * pcol + xa) * nc * item,
                             (ni, yb - ya, xb - xa, nc), planes.dtype, strides)
            self.emit(self.ctx.em.dma(self.core, "load"), Load(ref, inside))

    def compute_first(self) -> None:
        self._compute(first=True)

    def compute(self) -> None:
        self._compute(first=False)

    def _compute(self, first: bool) -> None:
        kw = self.node.inputs[1].shape[3]
        nc, no = self.nc, self.no
        m = self.ni * self.ty * self.tw
        acc = sub(self.b["acc"][self.q], (m, no))
        parts = self._split()
        for k, (group, a) in enumerate(zip(self.plan.tap_groups, self.operands)):
            (i, j) = group[0]
            rhs = sub(self.w, (len(group) * nc, no), (i * kw + j) * nc * no)
            for array, by, span in parts:
                if by == "cols":  # each array accumulates its columns densely
                    block = sub(acc, (m, span[1] - span[0]), m * span[0])
                    op = MatMul(a, _columns(rhs, span), block, not (first and k == 0))
                else:
                    op = MatMul(self._rows(a, by, span), rhs, self._rows(acc, by, span),
                                not (first and k == 0))
                self.emit(mxu_engine(self.core, array), op)

    def _split(self) -> list[tuple[int, str, tuple[int, int]]]:
        """How the tile's matmuls spread over the core's arrays (so the next tile's
        window is built while this one computes): by output-channel columns when there
        are enough for every array, else by images, else by output rows; else the
        tile's matmuls take turns with other tiles. ``(array, by, range)``."""
        arrays, cols = self.arrays, self.ctx.config.core.matrix.cols
        choices = [("cols", self.no, arrays * cols), ("images", self.ni, arrays),
                   ("rows", self.ty if self.ni == 1 else 0, arrays)]
        for by, extent, least in choices:
            if arrays > 1 and extent >= least:
                step = -(-extent // arrays)
                return [(a, by, (r, min(r + step, extent)))
                        for a, r in enumerate(range(0, extent, step))]
        return [(self.turn, "all", (0, 0))]

    def _rows(self, ref: SramRef, by: str, span: tuple[int, int]) -> SramRef:
        """The images or output rows ``span`` of an operand: a tap view
        ``[ni, ty, ow, c]`` or a dense ``[pixels, k]`` matrix."""
        if by == "all":
            return ref
        lo, hi = span
        if ref.strides is not None and len(ref.shape) == 4:
            axis = 0 if by == "images" else 1
            shape = list(ref.shape)
            shape[axis] = hi - lo
            offset = ref.offset + lo * ref.strides[axis] * ref.dtype.itemsize
            return SramRef(ref.space, offset, tuple(shape), ref.dtype, ref.strides)
        unit = self.ty * self.tw if by == "images" else self.tw
        return sub(ref, ((hi - lo) * unit, ref.shape[-1]), lo * unit * ref.shape[-1])

    def finisher(self, kernel: Kernel, cast: bool):
        """Channels-last accumulator ``[images x pixels, o]`` -> NCHW tile
        ``[images, o, pixels]`` (one transpose), then the shared finisher (cast, store,
        fused epilogue)."""
        ni, no, pixels = self.ni, self.no, self.ty * self.tw
        box = (self.images, self.oo, self.rows, self.cols)
        b, q = self.b, self.q
        if self.node.spec.channels_last_out:
            return self._nhwc_finisher(kernel, cast, box)
        finish = finisher(self.ctx, kernel, self.core, {**b, "acc": b["nchw"]}, q, box,
                          (ni, no, pixels), cast)

        def store() -> None:
            nchw = sub(b["nchw"][q], (ni, no, pixels))
            for _, by, (lo, hi) in self._split():
                if by != "cols":
                    self.emit(self.vpu, Transpose(sub(b["acc"][q], (ni, pixels, no)), nchw,
                                                  (0, 2, 1)))
                    break
                block = sub(b["acc"][q], (ni, pixels, hi - lo), ni * pixels * lo)
                channels = SramRef(nchw.space, nchw.offset + lo * pixels * nchw.dtype.itemsize,
                                   (ni, hi - lo, pixels), nchw.dtype, (no * pixels, pixels, 1))
                self.emit(self.vpu, Transpose(block, channels, (0, 2, 1)))
            finish()
        return store

    def _nhwc_finisher(self, kernel: Kernel, cast: bool,
                       box: tuple[tuple[int, int], ...]):
        """The channels-last accumulator into the NHWC output: as it is when one array
        or several by rows computed it; when the arrays took column blocks (each
        accumulating its columns densely), the blocks are first copied side by side
        into one ``[pixels, o]`` tile (as the NCHW path transposes them into one), so
        the epilogue and the store run once over the whole tile."""
        ni, no, pixels = self.ni, self.no, self.ty * self.tw
        b, q = self.b, self.q
        blocks = [(lo, hi) for _, by, (lo, hi) in self._split() if by == "cols"]
        tile = {**b, "acc": b["nchw"]} if blocks else b
        finish = finisher(self.ctx, kernel, self.core, tile, q, box, (ni * pixels, no),
                          cast, nhwc_tile=True)

        def store() -> None:
            whole = b["nchw"][q]
            for lo, hi in blocks:
                src = sub(b["acc"][q], (ni * pixels, hi - lo), ni * pixels * lo)
                dst = SramRef(whole.space, whole.offset + lo * whole.dtype.itemsize,
                              (ni * pixels, hi - lo), whole.dtype, (no, 1))
                self.emit(self.vpu, VCopy(src, dst))
            finish()
        return store


def _columns(ref: SramRef, span: tuple[int, int]) -> SramRef:
    """Columns ``span`` of a dense 2-D matrix, as a strided view."""
    rows, width = ref.shape
    lo, hi = span
    return SramRef(ref.space, ref.offset + lo * ref.dtype.itemsize, (rows, hi - lo),
                   ref.dtype, (width, 1))


def _layout_note(spec: g.Conv2d) -> str:
    """``; NHWC in and out`` when the image or the result is stored channels last."""
    sides = [side for side, on in (("in", spec.channels_last_in),
                                   ("out", spec.channels_last_out)) if on]
    return f"; NHWC {' and '.join(sides)}" if sides else ""


_MAPPINGS = {"depthwise": "depthwise on the vector unit", "patch": "patches as one GEMM",
             "packed": "taps packed into K", "gemm": "implicit GEMM",
             "per_tap": "one tap at a time"}
_ESTIMATED = {"depthwise": "vector unit", "patch": "patches", "packed": "packed taps",
              "gemm": "implicit GEMM"}
"""How ``_choice`` names each mapping's estimate."""


_ON_A_TIE = ("gemm", "packed", "patch", "depthwise")
"""Which of two mappings estimated alike is taken: the one listed first."""


def _taken(estimates: dict[str, float | None]) -> str:
    """The mapping with the lowest estimate (None: that mapping has no tiling), or
    ``per_tap`` when none has a tiling."""
    found = [(cycles, _ON_A_TIE.index(name), name) for name, cycles in estimates.items()
             if cycles is not None]
    return min(found)[2] if found else "per_tap"


def _choice(taken: str, estimates: dict[str, float | None]) -> str:
    """Which convolution mapping the cost model took, and the estimates it compared."""
    def cycles(value: float | None) -> str:
        return f"{value:,.0f} cycles" if value is not None else "no tiling fits"
    compared = ", ".join(f"{_ESTIMATED[name]} {cycles(value)}"
                         for name, value in estimates.items())
    return f"{_MAPPINGS[taken]} (estimated: {compared})"
