"""Space-to-depth for convolutions over few channels with a stride (a CNN's first
layer): the implicit GEMM's window rearranged into *interleaved* phase planes, so a
matmul's A operand is a view of them and no tap is copied side by side.

A stride-(sh, sw) convolution over ``c`` channels equals a stride-1 one over the
``sh x sw x c`` channels of its stride phases, with the kernel padded to whole phases
(zero weights). Laid out ``[images, entry rows, plane cols, R, sh, sw, c]``, the
``kw / sw`` plane columns one output pixel reads across ``R`` kernel rows of phases are
one run of memory, so each matmul reads ``K = R x kw / sw x sh x sw x c`` elements a
pixel in place (:func:`interleaved_operands`); the vector unit writes the planes ``R``
times, once a row shift (:func:`interleave_window`). ResNet's 7x7/2 stem over 3
channels on a 128-row array: two matmuls of K = 96 where the implicit GEMM copied 49
taps 3 elements a pixel into operands of K = 126 and 21.
"""

from __future__ import annotations

from archsim.config.model import MatrixConfig, ceil_div
from archsim.config.names import vpu_engine
from compiler.ir.operands import DramRef, Scalar, SramRef
from compiler.ir.ops import Binary, BinaryKind, Load, Transpose
from compiler.kernels.common import Context
from compiler.kernels.conv_geometry import Geometry
from compiler.kernels.vector import sub


def interleaved(geo: Geometry) -> Geometry:
    """``geo`` with its kernel padded to whole stride phases (a 7x7 kernel of stride 2
    as 8x8, the added taps' weights zero): the geometry of a window whose phase planes
    are laid out interleaved, ``[images, plane rows, plane cols, sh, sw, c]``, so that
    the ``kw / sw`` plane columns a kernel row of phases reads are one run of
    ``kw x sh x c`` elements a pixel (space-to-depth: a stride-2 7x7 convolution over
    3 channels is a stride-1 4x4 one over the 12 channels of the 2x2 phases, and a
    row of it one matmul of K = 48 reading the planes in place, no tap copied)."""
    (kh, kw), (sh, sw) = geo.kernel, geo.stride
    return Geometry((ceil_div(kh, sh) * sh, ceil_div(kw, sw) * sw), geo.stride,
                    geo.dilation, geo.out_rows, geo.out_cols, geo.in_rows, geo.in_cols)


def stacked_rows(geo: Geometry, channels: int, depth: int) -> int:
    """Plane rows an interleaved entry stacks (``geo`` from :func:`interleaved`): the
    most rows of phases, dividing them, whose taps fit ``depth`` (the array's rows) as
    one matmul's K. An entry (y, x) holds plane rows ``y .. y + R - 1`` at column x,
    so the vector unit writes the planes ``R`` times (once a row shift) and a matmul
    covers ``R`` kernel rows of phases: ResNet's 7x7/2 on a 128-row array two
    matmuls of K = 96 (as the taps packed by copies), not four of K = 48."""
    (kh, kw), (sh, sw) = geo.kernel, geo.stride
    row = kw // sw * sh * sw * channels  # one kernel row of phases' K
    return max(r for r in range(1, kh // sh + 1) if (kh // sh) % r == 0 and
               (r == 1 or r * row <= depth))



def interleaves(matrix: MatrixConfig, geo: Geometry, cin: int, ct: int, groups: int,
                nhwc_in: bool) -> bool:
    """Whether a tiling may read the phase planes interleaved
    (:attr:`~compiler.kernels.conv_tiling.ConvTiling.interleaved`): an NCHW image with a stride and no dilation, all
    its channels one chunk, and a kernel row of phases (``kw / sw x sh x sw x c``)
    no deeper than the array's rows: a 3-channel stem, whose taps the vector unit
    otherwise copies 3 elements a pixel at a time (ResNet's 7x7/2: K = 48 a row)."""
    (_, kw), (sh, sw) = interleaved(geo).kernel, geo.stride
    return (not nhwc_in and groups == 1 and ct == cin and (sh, sw) != (1, 1)
            and geo.dilation == (1, 1) and kw * sh * ct <= matrix.rows)



def padded_weights(ctx: Context, core: int, wref: DramRef, shape: tuple[int, ...],
                    wraw: SramRef, dst: SramRef, padded: tuple[int, int],
                    stacked: tuple[int, int, int], source: str
                    ) -> tuple[SramRef, Transpose]:
    """The weights of an interleaved tiling (:attr:`~compiler.kernels.conv_tiling.ConvTiling.interleaved`): the
    buffer ``[o, c, KH, KW]`` of the kernel padded to whole phases is zeroed, the
    block lands in its first ``kh x kw`` taps (one strided DMA) and the
    rearrangement to ``[KH / sh / R, KW / sw, R, sh, sw, c, o]`` (the planes' K
    order, ``stacked`` = (R, sh, sw)) is returned. ``shape`` is the block's
    ``[o, c, kh, kw]``, ``dst`` where it goes, as ``[KH x KW x c, o]``."""
    no, nc, kh, kw = shape
    (ph, pw), (r, sh, sw) = padded, stacked
    whole = sub(wraw, (no, nc, ph, pw))
    ctx.em.emit(vpu_engine(core), Binary(BinaryKind.add, Scalar(0.0), Scalar(0.0), whole),
                source)
    inside = SramRef(whole.space, whole.offset, (no, nc, kh, kw), whole.dtype,
                     (nc * ph * pw, ph * pw, pw, 1))
    ctx.em.emit(ctx.em.dma(core, "load"), Load(wref, inside), source)
    return dst, Transpose(sub(whole, (no, nc, ph // sh // r, r, sh, pw // sw, sw)),
                          sub(dst, (ph // sh // r, pw // sw, r, sh, sw, nc, no)),
                          (2, 5, 3, 4, 6, 1, 0))


def entries(geo: Geometry, ty: int, channels: int, stacked: int) -> tuple[int, int]:
    """(entry rows an image, elements an entry) of the interleaved planes of a
    ``ty``-row tile (``geo`` from :func:`interleaved`): entry (y, x) holds plane rows
    ``y .. y + R - 1`` at column x (R = ``stacked``); the last rows, which no matmul
    starts from, are left out."""
    (sh, sw) = geo.stride
    return geo.plane_rows(ty) - stacked + 1, stacked * sh * sw * channels


def interleave_window(raw: SramRef, planes: SramRef, geo: Geometry, ty: int,
                      stacked: int) -> list[Transpose]:
    """The transposes writing the window ``raw`` [ni, c, rows, cols] into ``planes`` as
    interleaved entries (:func:`entries`): one a stacked row, each of the window shifted
    by that many plane rows."""
    ni, nc, total, cols = raw.shape
    (sh, sw), pcol = geo.stride, geo.plane_cols
    rows, entry = entries(geo, ty, nc, stacked)
    item = raw.dtype.itemsize
    return [Transpose(SramRef(raw.space, raw.offset + u * sh * cols * item,
                              (ni, nc, rows, sh, pcol, sw), raw.dtype,
                              (nc * total * cols, total * cols, sh * cols, cols, sw, 1)),
                      SramRef(planes.space, planes.offset + u * sh * sw * nc * item,
                              (ni, rows, pcol, sh, sw, nc), planes.dtype,
                              (rows * pcol * entry, pcol * entry, entry, sw * nc, nc, 1)),
                      (0, 2, 4, 3, 5, 1))
            for u in range(stacked)]


def interleaved_operands(planes: SramRef, geo: Geometry, pixels: tuple[int, int, int],
                         channels: int, stacked: int) -> list[SramRef]:
    """A matmul's A operand per R kernel rows of phases, read in place from the
    interleaved planes (:func:`entries`) for ``pixels`` (images, output rows, output
    columns): for output pixel (y, x) of matmul ``d`` the ``kw / sw`` entries from
    (y + d R, x), a run of ``K = kw / sw x R x sh x sw x c`` elements (consecutive
    pixels' runs overlap: they are one entry apart)."""
    ni, ty, tw = pixels
    (_, sw), (_, kw) = geo.stride, geo.kernel
    rows, entry = entries(geo, ty, channels, stacked)
    pitch = geo.plane_cols * entry
    item = planes.dtype.itemsize
    return [SramRef(planes.space, planes.offset + d * stacked * pitch * item,
                    (ni, ty, tw, kw // sw * entry), planes.dtype,
                    (rows * pitch, pitch, entry, 1))
            for d in range(geo.plane_rows(1) // stacked)]
