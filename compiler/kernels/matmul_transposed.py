"""Weight tiles stored [N, K] loaded transposed into [K, N] scratchpad tiles by the DMA
(the matmul kernel's B tiles of an ``nn.Linear`` weight, attention's K^T)."""

from __future__ import annotations

import math

from archsim.errors import LoweringError
from compiler.graph import Value
from compiler.ir.operands import DramRef, Slice, SramRef
from compiler.ir.ops import Load
from compiler.kernels.common import Box, Context, box_shape
from compiler.views import flat_boxes


def load_transposed(ctx: Context, b: Value, box: Box, dst: SramRef, core: int,
                    source: str) -> None:
    """``dst`` [k, n] := the [n, k] ``box`` of ``b`` transposed, by the DMA: each piece's
    SRAM side is a strided view (consecutive k go ``n`` elements apart). Pieces are not
    split over engines: their strided spans would overlap and serialize them anyway."""
    n, k = box_shape(box)[-2:]
    item = dst.dtype.itemsize
    for piece, offset in ctx.em.dram_pieces(ctx.view(b), box):
        for ref, at in _row_parts(piece, offset, k):
            n0, k0 = divmod(at, k)
            strides = _transposed_strides(ref.shape, min(math.prod(ref.shape), k), n)
            view = SramRef(dst.space, dst.offset + (k0 * n + n0) * item, ref.shape,
                           dst.dtype, strides)
            ctx.em.emit(ctx.em.dma(core, "load"), Load(ref, view), source)


def _k_dims(shape: tuple[int, ...], cols: int) -> int | None:
    """The first of ``shape``'s dims that hold a row's ``cols`` k (those before it hold
    the rows), or None when a dim holds both. A piece of a transposed tile is ``cols``
    consecutive k of one or more rows (it spans the box's width or lies in one row,
    :func:`compiler.views.split_box`), stored as a box of ``shape`` of ``b``'s base
    tensor: a weight [6, 6] viewed from a parameter [6, 2, 3] has pieces [rows, 2, 3]."""
    split = len(shape) - 1  # [..., rows, k]: the last
    while split > 0 and math.prod(shape[split:]) != cols:
        split -= 1
    return split if math.prod(shape[split:]) == cols else None


def _row_parts(piece: DramRef, offset: int, k: int) -> list[tuple[DramRef, int]]:
    """``piece`` (at element ``offset`` of the dense box, ``k`` wide) in parts whose dims
    hold rows or k, with their offsets: itself, or when a dim of its tensor holds both
    (a weight [6, 6] viewed from [12, 3]: a piece [8, 3] is 4 rows) each row's boxes."""
    shape = piece.shape
    if _k_dims(shape, min(math.prod(shape), k)) is not None:
        return [(piece, offset)]
    parts = []
    for row in range(0, math.prod(shape), k):  # a piece of several rows starts a row
        for part in flat_boxes(shape, row, row + k):
            first = sum(lo * math.prod(shape[d + 1:]) for d, (lo, _) in enumerate(part))
            slices = tuple(Slice(s.start + lo, s.start + hi)
                           for s, (lo, hi) in zip(piece.slices, part))
            parts.append((DramRef(piece.tensor, slices), offset + first))
    return parts


def _transposed_strides(shape: tuple[int, ...], cols: int, n: int) -> tuple[int, ...]:
    """SRAM strides of a piece of ``shape`` holding ``cols`` k of each of its rows (see
    :func:`_k_dims`) in a transposed tile [k, n]: k ``n`` elements apart, rows 1 apart
    ([rows, 2, 3]: (1, 3n, n)). Size-1 leading dims get stride 0."""
    split = _k_dims(shape, cols)
    if split is None:
        raise LoweringError(f"a transposed load's piece {list(shape)} does not hold rows "
                            f"of {cols} elements")
    return tuple(0 if size == 1 and d < len(shape) - 2 else
                 math.prod(shape[d + 1:split]) if d < split else
                 math.prod(shape[d + 1:]) * n for d, size in enumerate(shape))


__all__ = ["load_transposed"]
