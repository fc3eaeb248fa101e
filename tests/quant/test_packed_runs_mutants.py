"""The DMA commands of packed int4 tiles, pinned where mutation testing found them
loose (``python benchmarks/mutation.py compiler/kernels/packed_runs.py``): the tile
offsets after a partial row, a step inside one stored row of two blocks, a tie, and a
block that is not whole stored rows. Hand-derived, as in test_int4_strided_loads.py."""

from __future__ import annotations

from compiler.kernels.packed_runs import PackedCommand, packed_commands

# K = 256, blocks of 64 columns: a block is 64 stored rows of 128 bytes, 4 k rows each
K, HALF, ROW = 256, 32, 128


def test_a_runs_boxes_follow_each_other_in_the_tile() -> None:
    # one block (always by runs), k rows 6..14: bytes 192..448, the second half of
    # stored row 1 (64 B at 0), row 2 (128 B at 64), the first half of row 3 (at 192)
    assert packed_commands((0, 1), (6, 14), K, HALF, ROW) == [
        PackedCommand((1, 2, 1), (64, 128), 0), PackedCommand((2, 3, 1), (0, 128), 64),
        PackedCommand((3, 4, 1), (0, 64), 192)]


def test_two_blocks_stepping_inside_one_stored_row_take_one_strided_command() -> None:
    # k rows 8..12 of blocks 2..3: bytes 256..384, stored row 2 of each block (rows 130
    # and 194): one command, 64 rows apart, instead of two runs
    (command,) = packed_commands((2, 4), (8, 12), K, HALF, ROW)
    assert command == PackedCommand((130, 195, 64), (0, 128), 0, (128, 1))
    assert all(type(v) is int for v in command.rows)  # rows of the IR's slices


def test_a_tie_keeps_the_runs() -> None:
    # k rows 8..16 of blocks 2..3: two stored rows a block, two strided commands or two
    # runs of two rows: the runs (dense, on any engine)
    assert packed_commands((2, 4), (8, 16), K, HALF, ROW) == [
        PackedCommand((130, 132, 1), (0, 128), 0), PackedCommand((194, 196, 1), (0, 128), 256)]


def test_blocks_that_are_not_whole_stored_rows_go_by_runs() -> None:
    # k = 4 rows of 3 bytes (12 B a block) stored in rows of 8 bytes: k rows 0..2 are
    # bytes 0..6 of block 0 (row 0) and 12..18 of block 1 (the end of row 1, the start
    # of row 2); no stride steps from block to block
    assert packed_commands((0, 2), (0, 2), 4, 3, 8) == [
        PackedCommand((0, 1, 1), (0, 6), 0), PackedCommand((1, 2, 1), (4, 8), 6),
        PackedCommand((2, 3, 1), (0, 2), 10)]
