"""One step of the implicit GEMM (:mod:`compiler.kernels.conv`): an input-channel chunk
of one tile. It builds the zero-padded input window in SRAM (from an NCHW image by
:func:`~compiler.kernels.conv_geometry.padded_window`, from an NHWC one phase by phase),
rearranges it into stride phases, channels last
(:class:`~compiler.kernels.conv_geometry.Geometry`), multiplies every tap (or pack of
taps) into the tile's accumulator, spread over the core's arrays, and after the last
chunk finishes the tile (:func:`~compiler.kernels.conv_geometry.finisher`)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from archsim.config.names import mxu_engine, vpu_engine
from archsim.errors import LoweringError
from compiler import graph as g
from compiler.ir.operands import Scalar, Slice, SramRef
from compiler.ir.ops import Binary, BinaryKind, Load, MatMul, Transpose, VCopy
from compiler.kernels.common import Context
from compiler.kernels.conv_geometry import (
    Geometry, finisher, image_load, padded_window, stored_ref, valid_range,
)
from compiler.kernels.conv_interleave import interleave_window, interleaved_operands
from compiler.kernels.conv_arrays import array_split, k_blocks
from compiler.kernels.conv_tiling import ConvTiling
from compiler.kernels.vector import sub
from compiler.plan import Kernel


class ConvLayout(NamedTuple):
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


class ConvStep:
    """One input-channel chunk of one tile: build the window, multiply every tap."""

    def __init__(self, ctx: Context, node: g.Node, plan: ConvLayout, core: int,
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
        elif self.plan.tiling.interleaved:
            raw = sub(self.b["raw"][self.xs], (ni, nc, rows, cols))
            self._window(raw)
            for op in interleave_window(raw, planes, geo, ty, self.plan.tiling.interleaved):
                self.emit(self.vpu, op)
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
        if self.plan.tiling.interleaved:
            self.operands += interleaved_operands(planes, geo, (ni, ty, tw), nc,
                                                  self.plan.tiling.interleaved)
            return
        strides = (image_rows * geo.plane_cols * nc, geo.plane_cols * nc, nc, 1)

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
        kw = self.geo.kernel[1]  # padded to whole phases when interleaved
        nc, no = self.nc, self.no
        m = self.ni * self.ty * self.tw
        acc = sub(self.b["acc"][self.q], (m, no))
        if self._deals():
            self._dealt(first, acc)
            return
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

    def _dealt(self, first: bool, acc: SramRef) -> None:
        """The tile's matmuls with their K blocks dealt to the arrays in turn
        (:func:`~compiler.kernels.conv_arrays.k_split`): array 0 sums into the
        accumulator, the others into partials of their own, each starting its sum with
        its first block of the tile's first step (which has a block for every array:
        ``k_split`` deals only then, and the first step's chunk is a whole one)."""
        kw, rows = self.geo.kernel[1], self.ctx.config.core.matrix.rows
        nc, no = self.nc, self.no
        m = acc.shape[0]
        sums = [acc] + [sub(p, (m, no)) for p in self.b["partials"][self.q]]
        ks = [len(group) * nc for group in self.plan.tap_groups]
        blocks = k_blocks(ks, rows)
        if first and len(blocks) < self.arrays:
            raise LoweringError(f"{self.node.source}: {len(blocks)} K blocks dealt to "
                                f"{self.arrays} arrays would leave a partial unwritten")
        for u, (k, lo, hi) in enumerate(blocks):
            array = u % self.arrays
            (i, j), a = self.plan.tap_groups[k][0], self.operands[k]
            rhs = sub(self.w, (hi - lo, no), ((i * kw + j) * nc + lo) * no)
            op = MatMul(_k_range(a, lo, hi), rhs, sums[array],
                        not (first and u < self.arrays))
            self.emit(mxu_engine(self.core, array), op)

    def _combine(self) -> None:
        """Add the arrays' partials into the accumulator (K blocks dealt)."""
        if not self._deals():
            return
        m = self.ni * self.ty * self.tw
        acc = sub(self.b["acc"][self.q], (m, self.no))
        for partial in self.b["partials"][self.q]:
            self.emit(self.vpu, Binary(BinaryKind.add, acc, sub(partial, (m, self.no)), acc))

    def _deals(self) -> bool:
        """Whether this tile deals its K blocks to the arrays (:meth:`_dealt`): the
        tiling's ``k_split``, where the tile would otherwise split by images or rows (a
        short last tile that takes turns does not)."""
        return self.plan.tiling.k_split and self._split()[0][1] in ("images", "rows")

    def _split(self) -> list[tuple[int, str, tuple[int, int]]]:
        """How the tile's matmuls spread over the core's arrays (so the next tile's
        window is built while this one computes;
        :func:`~compiler.kernels.conv_arrays.array_split`): by output-channel columns,
        images or output rows, else they take turns with other tiles' (:meth:`_deals`
        replaces an image or row split). ``(array, by, range)``."""
        by, extent = array_split(self.arrays, self.ctx.config.core.matrix.cols, self.no,
                                 self.ni, self.ty)
        if by == "all":
            return [(self.turn, "all", (0, 0))]
        step = -(-extent // self.arrays)
        return [(a, by, (r, min(r + step, extent)))
                for a, r in enumerate(range(0, extent, step))]

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
            self._combine()
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
            self._combine()
            whole = b["nchw"][q]
            for lo, hi in blocks:
                src = sub(b["acc"][q], (ni * pixels, hi - lo), ni * pixels * lo)
                dst = SramRef(whole.space, whole.offset + lo * whole.dtype.itemsize,
                              (ni * pixels, hi - lo), whole.dtype, (no, 1))
                self.emit(self.vpu, VCopy(src, dst))
            finish()
        return store


def _k_range(ref: SramRef, lo: int, hi: int) -> SramRef:
    """Elements ``lo:hi`` of the last (K) axis of a matmul's A operand: a tap view
    ``[ni, ty, ow, c]`` or a dense ``[pixels, k]`` matrix."""
    strides = ref.strides
    if strides is None:
        strides = tuple(math.prod(ref.shape[d + 1:]) for d in range(len(ref.shape)))
    return SramRef(ref.space, ref.offset + lo * strides[-1] * ref.dtype.itemsize,
                   (*ref.shape[:-1], hi - lo), ref.dtype, strides)


def _columns(ref: SramRef, span: tuple[int, int]) -> SramRef:
    """Columns ``span`` of a dense 2-D matrix, as a strided view."""
    rows, width = ref.shape
    lo, hi = span
    return SramRef(ref.space, ref.offset + lo * ref.dtype.itemsize, (rows, hi - lo),
                   ref.dtype, (width, 1))
