"""Tensors moved through views and permutes in whole boxes, and vector tiles even over
the cores.

- A box of a merged view is cut at its digit boundaries (strided in the scratchpad),
  not row by row: MobileViT's head merge ``ctx.permute(0, 2, 1, 3).reshape(4, 256,
  144)`` feeding a linear took 10,259 loads of ~32 B on atom (K tiles of 64 against a
  head dim of 36).
- A permute's tiles read its input in whole rows: ``v.permute(2, 0, 1)`` on ``[128,
  128, 8]`` read one element in 8 per tile (4.2 MB of DRAM for 256 KB).
- Tiles are evened over the cores: 128 rows went as 31, 31, 31, 31, 4.
"""

from __future__ import annotations

import math

import torch

from archsim.dram import box_layout
from compiler import compile_graph
from compiler.ir.ops import Load, MatMul, Unary
from compiler.kernels.vector_tiles import balanced
from compiler.views import Piece, dense_parts, place_box
from compiler_helpers import config


def test_a_merged_dim_cut_mid_row_is_one_strided_piece_per_digit() -> None:
    # columns 0:64 of [256, 144] viewed from [256, 4, 36]: head 0 whole (36 wide), head 1's
    # first 28; each spans all 128 rows, 64 elements apart in the tile's buffer
    pieces = place_box((256, 144), (256, 4, 36), ((0, 128), (0, 64)))
    assert pieces == [Piece(((0, 128), (0, 1), (0, 36)), 0, (64, 0, 1)),
                      Piece(((0, 128), (1, 2), (0, 28)), 36, (64, 0, 1))]
    # 64:128 is the rest of head 1 (8), head 2 (36) and head 3's first 20
    assert [(p.base_box[1:], p.offset) for p in
            place_box((256, 144), (256, 4, 36), ((0, 128), (64, 128)))] == [
        (((1, 2), (28, 36)), 0), (((2, 3), (0, 36)), 8), (((3, 4), (0, 20)), 44)]


def test_whole_rows_are_one_dense_piece_and_dense_parts_are_rows() -> None:
    assert place_box((256, 144), (256, 4, 36), ((3, 9), (0, 144))) == [
        Piece(((3, 9), (0, 4), (0, 36)), 0)]
    # the dense form of a strided piece: one run per row, at its place in the buffer
    piece = Piece(((0, 3), (1, 2), (0, 28)), 36, (64, 0, 1))
    assert dense_parts(piece) == [(((0, 1), (1, 2), (0, 28)), 36),
                                  (((1, 2), (1, 2), (0, 28)), 100),
                                  (((2, 3), (1, 2), (0, 28)), 164)]


def test_a_base_dim_merging_a_cut_dim_is_cut_per_row() -> None:
    # [6, 4] of [24]: rows 0:2, columns 0:3 are not one box of the base: a row each
    assert place_box((6, 4), (24,), ((0, 2), (0, 3))) == [
        Piece(((0, 3),), 0), Piece(((4, 7),), 3)]


class HeadMerge(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.o = torch.nn.Linear(144, 144)

    def forward(self, ctx: torch.Tensor) -> torch.Tensor:
        return self.o(ctx.permute(0, 2, 1, 3).reshape(4, 256, 144))


def _charged(load: Load, tensors: dict, granule: int) -> int:
    tensor = tensors[load.src.tensor]
    count, run = box_layout(load.src, tensor)
    return (count // run) * -(-run * tensor.dtype.itemsize // granule) * granule


def test_head_merge_feeding_a_linear_loads_whole_head_columns() -> None:
    torch.manual_seed(0)
    cfg = config("atom")
    model = HeadMerge().eval()
    ctx = torch.randn(4, 4, 256, 36)
    compiled = compile_graph(torch.export.export(model, (ctx,)).run_decompositions(), cfg)
    (out,), _ = compiled.run(ctx)
    torch.testing.assert_close(out, model(ctx), rtol=1e-4, atol=1e-4)
    program = compiled.program
    merged = {c.op.src.tensor for c in program.commands if isinstance(c.op, Load)
              and program.tensor(c.op.src.tensor).shape == (4, 256, 4, 36)}
    assert len(merged) == 1  # the permute's output [4, 256, 4, 36], read as [4, 256, 144]
    loads = [c.op for c in program.commands
             if isinstance(c.op, Load) and c.op.src.tensor in merged]
    multiplies = sum(isinstance(c.op, MatMul) for c in program.commands)
    # a k-step's A tile [rows, <= 64] of K = 4 heads x 36 crosses at most two head
    # boundaries: at most 3 pieces, each all the tile's rows (was one per row and
    # power-of-two run: 10,259 loads)
    assert len(loads) <= 3 * multiplies
    assert all(ld.src.shape[1] > 1 for ld in loads)
    # runs of 8-36 f32 (32-144 B) rounded up to 32-B granules: at most 1.2x the data
    tensors = {t.name: t for t in program.tensors}
    charged = sum(_charged(ld, tensors, cfg.dram.access_granularity_bytes) for ld in loads)
    data = sum(math.prod(ld.src.shape) * 4 for ld in loads)
    assert charged <= 1.2 * data


class T5Bias(torch.nn.Module):
    def forward(self, v: torch.Tensor) -> torch.Tensor:
        return v.permute(2, 0, 1).unsqueeze(0) + 0.0


class SegPerm(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 1).reshape(1, 32, 64, 64) + 0.0


def test_permute_tiles_read_their_input_in_whole_rows() -> None:
    cfg = config("tpu-v4")
    granule = cfg.dram.access_granularity_bytes
    for model, x in ((T5Bias(), torch.randn(128, 128, 8)), (SegPerm(), torch.randn(1, 4096, 32))):
        compiled = compile_graph(torch.export.export(model, (x,)).run_decompositions(), cfg)
        (out,), _ = compiled.run(x)
        torch.testing.assert_close(out, model(x), rtol=0, atol=0)
        tensors = {t.name: t for t in compiled.program.tensors}
        loads = [c.op for c in compiled.program.commands if isinstance(c.op, Load)]
        # every load reads runs of whole input rows (8 or 32 f32: 32 or 128 B, whole
        # granules); split on the output's leading dim it read one element per row
        # (4 B charged as 32: 8x)
        for ld in loads:
            assert _charged(ld, tensors, granule) <= 1.1 * math.prod(ld.src.shape) * 4, ld
        # the input crosses DRAM once
        inputs = [ld for ld in loads if tensors[ld.src.tensor].role == "in"]
        assert sum(math.prod(ld.src.shape) for ld in inputs) == x.numel()


def test_gelu_rows_split_evenly_over_two_cores() -> None:
    # [1, 128, 3072] f32 on tpu-v4 (2 cores): the per-core target asks for a quarter of
    # the 3 MiB a tile (32 rows) and the buffers' padding made it 31: 31, 31, 31, 31, 4.
    # Evened: four tiles of 32 rows, two per core.
    cfg = config("tpu-v4")
    x = torch.randn(1, 128, 3072)
    model = torch.nn.GELU()
    compiled = compile_graph(torch.export.export(model, (x,)).run_decompositions(), cfg)
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    tiles = [(c.engine.split(".")[0], c.op.dst.shape) for c in compiled.program.commands
             if isinstance(c.op, Unary)]
    assert sorted(tiles) == [("core0", (1, 32, 3072))] * 2 + [("core1", (1, 32, 3072))] * 2


def test_balanced_evens_a_tail_and_a_one_row_sliver() -> None:
    def anything(tile: tuple[int, ...]) -> bool:
        return True

    # 128 rows in 31s on 2 cores: the busiest core has 66 rows in 3 tiles; 32s give 64
    # in 2 (16s give 64 too, in 4: more tiles cost more)
    assert balanced((1, 128, 3072), (1, 31, 3072), 1, 2, anything, 1.0, 10.0) == \
        (1, 32, 3072)
    # GPT-2's head permute: [12 heads, 128 rows] in tiles of 127 rows are 127, 1 per
    # head; dealt to 8 cores in turn every long tile lands on an even core (3 x 127
    # rows). Whole heads (64-row tiles too small to be allowed) give 2 x 128.
    def whole_rows(tile: tuple[int, ...]) -> bool:
        return tile[2] >= 127

    assert balanced((1, 12, 128, 64), (1, 1, 127, 64), 2, 8, whole_rows, 1.0, 10.0) == \
        (1, 1, 128, 64)
    # a core with a single tile cannot pipeline: 2 tiles of 64 on 2 cores are not taken
    # for 4 of 32 even when tiles are expensive
    assert balanced((128, 64), (32, 64), 0, 2, anything, 1.0, 1000.0) == (32, 64)
