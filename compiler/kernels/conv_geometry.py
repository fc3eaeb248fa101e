"""Shared by the convolution and pooling kernels: where a tile of output rows reads its
input (:class:`Geometry`: stride phases, channels last), the DRAM window of one tap,
and the finisher every tile ends with (cast, store, fused epilogue)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from archsim.config.model import ceil_div
from archsim.config.names import mxu_engine, vpu_engine
from compiler.graph import Conv2d, Value
from compiler.ir.operands import DramRef, Scalar, Slice, SramRef
from compiler.ir.ops import Binary, BinaryKind, Cast, Load, Store, Transpose
from compiler.emit import Arena, DramView
from compiler.kernels.common import Context
from compiler.kernels.matmul import accumulator_dtype
from compiler.kernels.epilogue import finish_tile, pass_order
from compiler.kernels.vector import bytes_per_element, group_values, layout, sub
from compiler.views import unit_dims_only
from compiler.plan import Kernel


def valid_range(lo: int, hi: int, start: int, step: int, size: int) -> tuple[int, int]:
    """Output positions ``[a, b)`` within ``[lo, hi)`` whose input ``start + p * step``
    lies inside ``[0, size)``."""
    a = max(lo, -(start // step))
    b = min(hi, (size - 1 - start) // step + 1)
    return a, max(a, b)


def window_size(kernel: tuple[int, int], stride: tuple[int, int],
                dilation: tuple[int, int], ty: int, ow: int) -> tuple[int, int]:
    """Input rows and columns ``ty`` output rows of ``ow`` columns read (padded)."""
    return ((ty - 1) * stride[0] + (kernel[0] - 1) * dilation[0] + 1,
            (ow - 1) * stride[1] + (kernel[1] - 1) * dilation[1] + 1)


def padded_window(ctx: Context, core: int, dst: SramRef, corner: tuple[int, int],
                  padding: tuple[int, int], size: tuple[int, int], fill: float, source: str,
                  lead: int = 1, *, row_step: int = 1,
                  zeroed: tuple[dict[int, tuple[int, ...]], int] | None = None
                  ) -> tuple[SramRef, Slice, Slice] | None:
    """For ``dst`` [c, rows, cols] or [images, c, rows, cols] (dense, or a view with unit
    column stride: the first rows of a taller buffer), the padded input window whose
    first element is at padded row and column ``corner``, its rows ``row_step``
    input rows apart (a kernel row's rows of consecutive output rows): fill the border
    strips the padding covers with ``fill`` and return the part the input covers (a
    strided view with ``lead`` unit dims in front, for the image's batch) with the input
    rows and columns that land there, or None when none does. The caller loads it
    (padding by addressing: the padded tensor never exists). ``zeroed`` is (the border
    layouts filled so far per buffer, this buffer's key): a window whose layout is the
    one recorded skips the fills (an interior load never touches the border)."""
    (ph, pw), (r0, c0), (height, width) = padding, corner, size
    *outer, nc, rows, cols = dst.shape
    ya, yb = valid_range(0, rows, r0 - ph, row_step, height)
    top = min(ya, rows)
    inner = max(0, min(yb, rows) - top)
    left = min(cols, max(0, pw - c0))
    across = max(0, min(c0 + cols - pw, width) - max(c0 - pw, 0))
    strides = dst.strides or (nc * rows * cols,) * len(outer) + (rows * cols, cols, 1)
    pitch, item = strides[-2], dst.dtype.itemsize
    layout = (*dst.shape, top, inner, left, across)
    if zeroed is None or zeroed[0].get(zeroed[1]) != layout:
        if zeroed is not None:
            zeroed[0][zeroed[1]] = layout
        for row, nrows, col, ncols in ((0, top, 0, cols),
                                       (top + inner, rows - top - inner, 0, cols),
                                       (top, inner, 0, left),
                                       (top, inner, left + across, cols - left - across)):
            if nrows > 0 and ncols > 0:
                strip = SramRef(dst.space, dst.offset + (row * pitch + col) * item,
                                (*outer, nc, nrows, ncols), dst.dtype, strides)
                ctx.em.emit(vpu_engine(core), Binary(BinaryKind.add, Scalar(fill),
                                                     Scalar(0.0), strip), source)
    if inner == 0 or across == 0:
        return None
    u0, v0 = r0 - ph + top * row_step, max(c0 - pw, 0)
    inside = SramRef(dst.space, dst.offset + (top * pitch + left) * item,
                     (1,) * lead + (*outer, nc, inner, across), dst.dtype,
                     (nc * strides[-3],) * lead + strides)
    return inside, Slice(u0, u0 + (inner - 1) * row_step + 1, row_step), \
        Slice(v0, v0 + across)


def reads_stored(view: DramView) -> bool:
    """Whether a convolution can address ``view`` by its own dims: it is the stored
    tensor, or the stored tensor with unit dims added or dropped."""
    return unit_dims_only(view.shape, view.base_shape)


def stored_ref(ctx: Context, value: Value, box: tuple[Slice, ...]) -> DramRef:
    """The DRAM box ``box`` (a slice per dim of ``value``) of the tensor ``value`` is
    stored in: the box itself, or for a view that adds or drops unit dims
    (:func:`reads_stored`) its slices of the non-unit dims, with whole unit dims for the
    stored tensor's own."""
    view = ctx.view(value)
    if view.shape == view.base_shape:
        return DramRef(view.tensor, box)
    kept = iter(s for s, n in zip(box, view.shape) if n != 1)
    return DramRef(view.tensor, tuple(next(kept) if n != 1 else Slice(0, 1)
                                      for n in view.base_shape))


def epilogue_bytes(ctx: Context, kernel: Kernel, out: Value) -> int:
    if kernel.group is None:
        return 0
    return bytes_per_element(ctx, kernel.group, {out.id})


def epilogue_reads(kernel: Kernel, out: Value) -> int:
    """DRAM bytes a fused epilogue reads per output element: its operands the size of
    the output (a residual), not the convolution's own result (in the accumulator), its
    per-channel operands (a batch norm's) nor the values it computes in SRAM, which
    ``epilogue_bytes`` counts for capacity."""
    if kernel.group is None:
        return 0
    external, _ = group_values(kernel.group)
    size = math.prod(out.shape)
    return sum(v.dtype.itemsize for v in external
               if v.id != out.id and math.prod(v.shape) == size)


@dataclass(frozen=True)
class Geometry:
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
        """Every row tile's window lies inside the (padded) input, but for its rounding
        up to whole stride phases: up to a stride less one row or column past it, which
        the border fill covers and no tap reads (odd-sized images fell back to a load a
        tap)."""
        sh, sw = self.stride
        if self.cols > self.in_cols + sw - 1:
            return False
        return all(y0 * sh + self.rows(min(ty, self.out_rows - y0)) <= self.in_rows + sh - 1
                   for y0 in range(0, self.out_rows, ty))

    def phases_read(self) -> frozenset[tuple[int, int]]:
        """The stride phases some tap reads (a 1x1 convolution with stride 2 reads one
        of four: the others need not be loaded)."""
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        return frozenset(((i * dh) % sh, (j * dw) % sw) for i in range(kh) for j in range(kw))

    def shift(self, ty: int, i: int, j: int, images: int = 1) -> int:
        """Pixel offset of tap (i, j)'s operand in the phase planes of a ``ty``-row tile
        of ``images`` stacked images (``[sh, sw, images, plane rows, plane cols, c]``)."""
        (sh, sw), (dh, dw) = self.stride, self.dilation
        plane_rows = self.plane_rows(ty) * images
        phase = ((i * dh) % sh) * sw + (j * dw) % sw
        return (phase * plane_rows + (i * dh) // sh) * self.plane_cols + (j * dw) // sw


def row_block(geo: Geometry) -> Geometry:
    """One kernel row of ``geo`` as a convolution of its own: over a window whose rows
    are the input rows that row reads for consecutive output rows (loaded ``sh``
    apart, so ``1 x kw`` taps at row stride 1)."""
    (_, kw), (_, sw), (_, dw) = geo.kernel, geo.stride, geo.dilation
    return Geometry((1, kw), (1, sw), (1, dw), geo.out_rows, geo.out_cols, geo.in_rows,
                    geo.in_cols)


def tile_buffers(ctx: Context, kernel: Kernel, arena: Arena, channels: int, ty: int,
                 ow: int, cast: bool, transposed: bool = True, images: int = 1
                 ) -> dict[str, list]:
    """What the finisher of a channel-major tile ``[channels, ty x ow]`` of ``images``
    images needs per buffer set: the cast result (``out``), the epilogue's buffers
    (``epi``, on the tile as the output is stored) and, with ``transposed``, the
    channels-last copy an epilogue on an NHWC output runs on (``tile``)."""
    out, spec, group, sets = kernel.anchor.out, kernel.anchor.spec, kernel.group, ctx.sets
    nhwc = spec.channels_last_out
    pixels = images * ty * ow
    return {
        "out": [arena.alloc((channels, pixels), out.dtype, "conv output") if cast else None
                for _ in range(sets)],
        "epi": [layout(ctx, group, (images, ty, ow, channels) if nhwc else
                       (images, channels, ty, ow), arena, 1, {out.id}) if group else None
                for _ in range(sets)],
        "tile": [arena.alloc((pixels, channels), accumulator_dtype(kernel.anchor.inputs[0]
                                                                  .dtype),
                             "conv channels-last tile") for _ in range(sets)]
        if nhwc and group and transposed else [],
    }


def _permuted(ref: SramRef, perm: tuple[int, ...]) -> SramRef:
    """``ref`` (dense or strided) with its dims read in ``perm`` order: a view."""
    strides = ref.strides
    if strides is None:
        strides, step = [], 1
        for n in reversed(ref.shape):
            strides.insert(0, step)
            step *= n
    return SramRef(ref.space, ref.offset, tuple(ref.shape[d] for d in perm), ref.dtype,
                   tuple(strides[d] for d in perm))


def image_load(ctx: Context, x: Value, nhwc: bool, images: tuple[int, int],
               chans: tuple[int, int], rows: Slice, cols: Slice, dst: SramRef) -> Load:
    """The Load of an image box (images, channels, rows, cols) into ``dst``, a
    ``[n, c, rows, cols]`` view. From an image stored NHWC the DMA reads runs of
    channels and writes them through the view's strides."""
    if not nhwc:
        return Load(stored_ref(ctx, x, (Slice(*images), Slice(*chans), rows, cols)), dst)
    return Load(stored_ref(ctx, x, (Slice(*images), rows, cols, Slice(*chans))),
                _permuted(dst, (0, 2, 3, 1)))


def finisher(ctx: Context, kernel: Kernel, core: int, b: dict, q: int,
             box: tuple[tuple[int, int], ...], shape: tuple[int, ...],
             cast: bool, nhwc_tile: bool = False) -> Callable[[], None]:
    """The tile's last step (:func:`compiler.kernels.epilogue.finish_tile`) on
    ``b["acc"][q]``, its epilogue one pass over the tile as a matmul's. ``box`` is
    (images, channels, rows, cols) whichever order the output is stored in; when it
    is stored NHWC (``channels_last_out``: no epilogue then) the tile, channels first
    or with ``nhwc_tile`` channels last, is cast and stored through a view."""
    out, group = kernel.anchor.out, kernel.group
    if isinstance(kernel.anchor.spec, Conv2d) and kernel.anchor.spec.channels_last_out:
        return _nhwc_store(ctx, kernel, core, b, q, box, shape, cast, nhwc_tile)
    order = pass_order(group, out, cast) if group else None

    def store() -> None:
        lay = b["epi"][q] if group else None
        finish_tile(ctx, core, sub(b["acc"][q], shape), sub(b["out"][q], shape) if cast
                    else None, out, group, (lay.buffers[0], lay.scratch[0]) if lay else None,
                    order, box, kernel.anchor.source)
    return store

def _nhwc_store(ctx: Context, kernel: Kernel, core: int, b: dict, q: int,
                box: tuple[tuple[int, int], ...], shape: tuple[int, ...], cast: bool,
                nhwc_tile: bool) -> Callable[[], None]:
    """The finisher of a tile whose output is stored NHWC. A channels-last tile is cast,
    stored and given its epilogue as it is (on the box in NHWC order); a channels-first
    one without an epilogue is stored through a permuted view (the DMA writes runs of
    channels), with one it is transposed into ``b["tile"]`` first."""
    out, group, source = kernel.anchor.out, kernel.group, kernel.anchor.source
    (n0, n1), (c0, c1), (r0, r1), (w0, w1) = box
    n, c, r, w = lengths = (n1 - n0, c1 - c0, r1 - r0, w1 - w0)
    nhwc_box = ((n0, n1), (r0, r1), (w0, w1), (c0, c1))
    order = pass_order(group, out, cast) if group else None

    def store() -> None:
        acc = sub(b["acc"][q], shape)
        if not nhwc_tile and group is None:
            value = acc
            if cast:
                value = sub(b["out"][q], shape)
                ctx.em.emit(vpu_engine(core), Cast(acc, value), source)
            dst = DramRef(ctx.view(out).tensor, tuple(Slice(*span) for span in nhwc_box))
            ctx.em.emit(ctx.em.dma(core, "store"),
                        Store(_permuted(sub(value, lengths), (0, 2, 3, 1)), dst), source)
            return
        if not nhwc_tile:
            tile = sub(b["tile"][q], (n, r * w, c))
            ctx.em.emit(vpu_engine(core), Transpose(sub(acc, (n, c, r * w)), tile, (0, 2, 1)),
                        source)
            acc = tile
        lay = b["epi"][q] if group else None
        finish_tile(ctx, core, sub(acc, (n, r, w, c)),
                    sub(b["out"][q], (n, r, w, c)) if cast else None, out, group,
                    (lay.buffers[0], lay.scratch[0]) if lay else None, order, nhwc_box,
                    source)
    return store


def pixels_finisher(ctx: Context, kernel: Kernel, core: int, b: dict, q: int,
                    box: tuple[tuple[int, int], ...], shape: tuple[int, ...], cast: bool,
                    pixels_major: bool) -> Callable[[], None]:
    """The tile's store (:func:`finisher`) from an accumulator ``[o, pix]``, or with
    ``pixels_major`` ``[pix, o]``: stored NHWC as it is, or transposed to NCHW
    (``b["nchw"]``) first. ``shape`` is the channels-first tile, ``(o, pix)`` or, for
    several images stacked in a pixels-major accumulator ``[images x pix, o]``,
    ``(images, o, pix)``."""
    if not pixels_major:
        return finisher(ctx, kernel, core, b, q, box, shape, cast)
    *images, no, pix = shape
    if kernel.anchor.spec.channels_last_out:  # [pix, o] is the NHWC tile already
        return finisher(ctx, kernel, core, b, q, box, (math.prod(images) * pix, no), cast,
                        nhwc_tile=True)
    finish = finisher(ctx, kernel, core, {**b, "acc": b["nchw"]}, q, box, shape, cast)
    lead = len(images)

    def store() -> None:
        ctx.em.emit(vpu_engine(core), Transpose(sub(b["acc"][q], (*images, pix, no)),
                                                sub(b["nchw"][q], shape),
                                                (*range(lead), lead + 1, lead)),
                    kernel.anchor.source)
        finish()
    return store


def to_channels_first(ctx: Context, core: int, b: dict, q: int, channels: int, ty: int,
                      geo: Geometry, source: str) -> SramRef:
    """Channels-last ``b["acc"][q]`` ``[pixels, c]`` -> ``b["nchw"][q]`` ``[c, ty x ow]``,
    dropping the extra plane columns: one transpose reading the rows' first ``ow``
    pixels in place (a transpose per row and one to interleave them took a pass more and
    ``ty`` latencies)."""
    ow = geo.out_cols
    acc = b["acc"][q]
    rows = SramRef(acc.space, acc.offset, (ty, ow, channels), acc.dtype,
                   (geo.plane_cols * channels, channels, 1))
    nchw = sub(b["nchw"][q], (channels, ty, ow))
    ctx.em.emit(vpu_engine(core), Transpose(rows, nchw, (2, 0, 1)), source)
    return sub(nchw, (channels, ty * ow))


@dataclass(frozen=True)
class ConvTile:
    """One output tile of a tiled convolution as its core runs it."""

    core: int
    q: int
    """Its accumulator set: the core's own tile count so far, modulo the sets."""
    array: int
    """The array it runs on: a core's tiles take its arrays in turn."""
    images: tuple[int, int]
    gi: int
    """Images and group."""
    oo: tuple[int, int]
    """Output channels (of all groups)."""
    rows: tuple[int, int]
    """Output rows."""
    cols: tuple[int, int]
    """Output columns."""

    @property
    def mxu(self) -> str:
        return mxu_engine(self.core, self.array)

    @property
    def no(self) -> int:
        """Output channels."""
        return self.oo[1] - self.oo[0]

    @property
    def pix(self) -> int:
        """Output pixels of one image: rows times columns."""
        return (self.rows[1] - self.rows[0]) * (self.cols[1] - self.cols[0])


def conv_tiles(tiles: list[tuple[tuple[int, int], int, int, int, int]], cores: int,
               sets: int, arrays: int, og: int, ot: int, out_size: tuple[int, int],
               tile_size: tuple[int, int]) -> Iterator[ConvTile]:
    """``tiles`` (images, group, first output channel, first row, first column) dealt to
    the cores in turn, each with its accumulator set, array and bounds (``og`` channels
    a group, ``ot`` a tile; ``out_size`` the output's rows and columns, ``tile_size`` a
    tile's)."""
    (oh, ow), (ty, tw) = out_size, tile_size
    counts = [0] * cores
    for t, (images, gi, o0, y0, x0) in enumerate(tiles):
        core = t % cores
        q = counts[core] % sets
        array = counts[core] % arrays
        counts[core] += 1
        yield ConvTile(core, q, array, images, gi, (gi * og + o0, gi * og + min(o0 + ot, og)),
                       (y0, min(y0 + ty, oh)), (x0, min(x0 + tw, ow)))
