"""The DMA commands of a packed int4 B tile (torch's CPU int4 layout): pure arithmetic
on storage offsets, shared by the matmul kernel (:mod:`.matmul_dequant`) and the
tiling's cost model (:func:`compiler.cost.b_runs`), so both count the same commands.

A packed tile is ``[blocks, k, half]`` bytes of columns in blocks, each block's k rows
contiguous, stored as rows of ``[N, K / 2]`` (a block is ``block`` whole stored rows).
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.views import flat_boxes


def block_runs(blocks: tuple[int, int], ks: tuple[int, int], k: int, half: int
               ) -> list[tuple[int, int]]:
    """The storage runs (byte ranges of the stored tensor, in order) of k rows ``ks`` of
    packed blocks ``blocks`` (``[blocks, k, half]`` bytes): a run per block, one for all
    when the rows span all of ``k`` (consecutive blocks then adjoin)."""
    runs: list[tuple[int, int]] = []
    for blk in range(*blocks):
        lo, hi = (blk * k + ks[0]) * half, (blk * k + ks[1]) * half
        if runs and runs[-1][1] == lo:
            runs[-1] = (runs[-1][0], hi)
        else:
            runs.append((lo, hi))
    return runs


@dataclass(frozen=True)
class PackedCommand:
    """One DMA command of a packed B tile: rows ``rows`` (start, stop, step) and byte
    columns ``cols`` of the stored tensor seen as rows of ``row_bytes``, written from
    element ``offset`` of the tile's dense buffer, ``strides`` elements apart per dim
    (None: dense)."""

    rows: tuple[int, int, int]
    cols: tuple[int, int]
    offset: int
    strides: tuple[int, int] | None = None


def packed_commands(blocks: tuple[int, int], ks: tuple[int, int], k: int, half: int,
                    row_bytes: int) -> list[PackedCommand]:
    """The DMA commands of k rows ``ks`` of packed blocks ``blocks`` (``[blocks, k,
    half]`` bytes) stored as rows of ``row_bytes``: the fewer of

    - a command per box of each storage run (:func:`block_runs`: per block, or one run
      for all blocks when ``ks`` spans all of ``k``; a run is up to three boxes, a
      partial row, whole rows, a partial row), dense in the tile;
    - when a block is whole stored rows (torch's ``[N, K / 2]``: a row per column), a
      command per stored row (or part of one) a block's step meets, strided over the
      blocks (a row every ``k * half / row_bytes`` rows), its parts a block's step
      (``(ks[1] - ks[0]) * half`` bytes) apart in the tile.

    Llama-2's 4096-input projections (a 64-column block is 64 rows of 2,048 bytes, 64 k
    rows each): a 512-row k step of 22 blocks is 8 commands of 22 runs of 2 KiB instead
    of 22 commands of 16 KiB."""
    by_runs: list[PackedCommand] = []
    offset = 0
    for lo, hi in block_runs(blocks, ks, k, half):
        for (r0, r1), (c0, c1) in flat_boxes((-(-hi // row_bytes), row_bytes), lo, hi):
            by_runs.append(PackedCommand((r0, r1, 1), (c0, c1), offset))
            offset += (r1 - r0) * (c1 - c0)
    count = blocks[1] - blocks[0]
    if (k * half) % row_bytes or count == 1:
        return by_runs
    rows = k * half // row_bytes  # stored rows a block
    start, stop = ks[0] * half, ks[1] * half  # the step's bytes in a block
    strided = [PackedCommand((blocks[0] * rows + r, (blocks[1] - 1) * rows + r + 1, rows),
                             (c0, c1), r * row_bytes + c0 - start, (stop - start, 1))
               for (r0, r1), (c0, c1) in flat_boxes((rows, row_bytes), start, stop)
               for r in range(r0, r1)]
    return strided if len(strided) < len(by_runs) else by_runs

__all__ = ["PackedCommand", "block_runs", "packed_commands"]
