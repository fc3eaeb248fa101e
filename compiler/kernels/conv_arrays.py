"""How a convolution tile's matmuls spread over a core's arrays: by output-channel
columns, images or output rows (:func:`array_split`), or, where a row or image split
leaves an array fewer pixels than it has rows, by K blocks dealt to the arrays in turn,
each summing a partial the vector unit adds up (:func:`k_split`; emitted by
:class:`~compiler.kernels.conv_step.ConvStep`)."""

from __future__ import annotations

from archsim.config.model import MatrixConfig, ceil_div
from archsim.matrix import back_to_back_saving, matmul_cycles
from compiler.ir.dtypes import DType


def array_split(arrays: int, cols: int, no: int, ni: int, ty: int) -> tuple[str, int]:
    """How a tile's matmuls spread over a core's ``arrays`` (``cols`` wide): by
    output-channel columns when there are enough for every array, else by images, else
    by output rows (``by``, and the extent it divides), else ``("all", 0)``: the tile's
    matmuls take turns with other tiles'."""
    for by, extent, least in (("cols", no, arrays * cols), ("images", ni, arrays),
                              ("rows", ty if ni == 1 else 0, arrays)):
        if arrays > 1 and extent >= least:
            return by, extent
    return "all", 0


def k_blocks(ks: list[int], rows: int) -> list[tuple[int, int, int]]:
    """Each matmul's K (a tap group's rows of weights, ``ks``) cut into blocks of the
    array's ``rows``: (matmul, first row, end row)."""
    return [(k, lo, min(lo + rows, size)) for k, size in enumerate(ks)
            for lo in range(0, size, rows)]


def k_split(matrix: MatrixConfig, dtype: DType, arrays: int, tile: tuple[int, int, int],
            no: int, ks: list[int], combine: float, steps: int = 1) -> int | None:
    """A tile's K blocks (:func:`k_blocks`) dealt to the arrays in turn, each array
    summing a partial of its own, against the split by images or rows
    (:func:`array_split`): the busiest array's cycles a step when dealing wins over the
    tile's ``steps`` (channel chunks, kernel rows) by more than ``combine`` (the vector
    cycles adding the partials up, once a tile), else None.

    ``tile`` is (images, rows, columns), ``no`` its output channels, ``ks`` the K of
    each tap group's matmul. A row split has every array load every weight fold for its
    share of the pixels: a tile with fewer pixels an array than the array has rows
    (ResNet's 7x7 and 14x14 layers at batch 1) loads each fold four times over."""
    ni, ty, tw = tile
    by, extent = array_split(arrays, matrix.cols, no, ni, ty)
    units = k_blocks(ks, matrix.rows)
    if by not in ("images", "rows") or len(units) < arrays:
        return None
    share = ceil_div(extent, arrays) * (ty * tw if by == "images" else tw)
    saving = back_to_back_saving(matrix)

    def run(mks: list[tuple[int, int]]) -> int:
        return sum(matmul_cycles(m, k, no, matrix, dtype) for m, k in mks) - \
            saving * (len(mks) - 1)

    split = run([(share, k) for k in ks])
    dealt = max(run([(ni * ty * tw, hi - lo) for u, (_, lo, hi) in enumerate(units)
                     if u % arrays == a]) for a in range(arrays))
    return dealt if steps * dealt + combine < steps * split else None
