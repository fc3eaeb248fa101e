"""int4 weights loaded a stored row at a time over all of a tile's blocks (issue 30): the
DMA commands of a packed k step, hand-derived; the tiling's cost model counting the same
commands; a compiled decode GEMV's loads; and the strided and split-K paths' numbers
against torch's CPU kernel."""

from __future__ import annotations

import collections
import torch

import torch_bridge
from archsim.config import load_config
from compiler import CompileOptions
from compiler import compile as compile_module
from compiler.cost import b_runs, b_strided
from compiler.ir.ops import Load, MatMul
from compiler.ir.verify import find_problems
from compiler.kernels.packed_runs import PackedCommand, packed_commands
from torch_bridge.runtime import use_config

aten = torch.ops.aten
TPU_V4 = load_config("tpu-v4")

# K = 256, blocks of 64 columns: a block is 64 stored rows of 128 bytes (K / 2), each
# holding 4 k rows of the block (32 bytes a k row: 64 codes, two a byte)
K, HALF, ROW = 256, 32, 128


def test_a_step_inside_each_block_row_is_a_strided_command_per_stored_row() -> None:
    # k rows 8..16 of blocks 2..5 are bytes 256..512 of each block: stored rows 2 and 3
    # of each block, i.e. rows 130, 194, 258, 322 and 131, ..., 323 of [N, 128]; in the
    # tile ([4, 8, 32]) block j's bytes start at 256 j, row 3's 128 bytes after row 2's
    assert packed_commands((2, 6), (8, 16), K, HALF, ROW) == [
        PackedCommand((130, 323, 64), (0, 128), 0, (256, 1)),
        PackedCommand((131, 324, 64), (0, 128), 128, (256, 1))]


def test_a_step_starting_mid_row_takes_its_partial_rows_as_commands_of_their_own() -> None:
    # k rows 6..14: bytes 192..448 of a block, the second half of row 1, row 2, the
    # first half of row 3; 3 commands instead of 4 blocks x 3 boxes
    assert packed_commands((2, 6), (6, 14), K, HALF, ROW) == [
        PackedCommand((129, 322, 64), (64, 128), 0, (256, 1)),
        PackedCommand((130, 323, 64), (0, 128), 64, (256, 1)),
        PackedCommand((131, 324, 64), (0, 64), 192, (256, 1))]


def test_fewer_blocks_than_stored_rows_a_step_keep_a_run_per_block() -> None:
    # k rows 0..32 of blocks 0..1: 8 stored rows a block, 2 blocks: 2 runs, dense
    assert packed_commands((0, 2), (0, 32), K, HALF, ROW) == [
        PackedCommand((0, 8, 1), (0, 128), 0), PackedCommand((64, 72, 1), (0, 128), 1024)]
    # all of k: the blocks adjoin, one run
    assert packed_commands((0, 4), (0, K), K, HALF, ROW) == [
        PackedCommand((0, 256, 1), (0, 128), 0)]


def test_the_tilings_cost_model_counts_the_kernels_commands() -> None:
    # K = 4096: a stored row is 64 k rows of a block; a 512-row step is 8 rows a block,
    # so 22 blocks (1408 columns) take 8 strided commands, 8 blocks 8 runs (a tie: runs),
    # a 128-row step 2; plus one for the scales
    assert b_runs(512, 4096, 1408, 64) == 8 + 1
    assert b_runs(512, 4096, 512, 64) == 8 + 1
    assert b_runs(128, 4096, 1408, 64) == 2 + 1
    # K = 11008: a stored row of 5,504 bytes is 172 k rows; the second 512-row step
    # (bytes 16,384..32,768) is the end of row 2, rows 3 and 4, the start of row 5
    assert b_runs(512, 11008, 512, 64) == 4 + 1
    assert b_runs(4096, 4096, 512, 64) == 1 + 1  # all of k
    # strided (one engine an array) where a step has fewer stored rows than blocks
    assert b_strided(512, 4096, 1408, 64) and not b_strided(1024, 4096, 256, 64)
    assert not b_strided(4096, 4096, 512, 64) and not b_strided(512, 4096, 512, 1)


def test_a_decode_gemv_loads_a_stored_row_at_a_time_and_matches_torch() -> None:
    # Llama-2-7B's gate projection on tpu-v4 (M = 1), int4 in groups of 128: plain tiles
    # over every array, then a last round split by K (86 column units of 128 over 8
    # arrays), every column on the arrays (the vector units' share of such a GEMV is
    # tests/quant/test_vector_share.py's)
    n, k, group = 11008, 4096, 128
    torch.manual_seed(3)
    codes = torch.randint(0, 16, (n, k), dtype=torch.int32)
    packed = aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    sz = torch.randn(k // group, n, 2).to(torch.bfloat16)
    x = torch.randn(1, k, dtype=torch.bfloat16)

    class Mm(torch.nn.Module):
        def forward(self, x, w, s):
            return aten._weight_int4pack_mm_for_cpu(x, w, group, s)

    compile_module.clear_cache()
    compiled = compile_module.compile_graph(torch.export.export(Mm(), (x, packed, sz)),
                                            TPU_V4, CompileOptions(vector_share=False))
    assert find_problems(compiled.program, TPU_V4) == []  # no race among the strided
    weight = compiled.input_names[1]
    commands = compiled.program.commands
    loads = [c.op for c in commands if isinstance(c.op, Load) and c.op.src.tensor == weight]
    assert sum(op.dst.nbytes for op in loads) == n * k // 2  # every byte once
    multiplies = collections.Counter(c.op.b.shape for c in commands
                                     if isinstance(c.op, MatMul))
    assert len({kt for _, kt, _ in multiplies}) > 1  # the split tiles' k steps differ
    # each array k step of B [blocks, kt, 32], kt / 64 stored rows a block (2,048 bytes,
    # 64 k rows each), fewer than its blocks, is kt / 64 commands of a row of each
    # block, 64 rows apart; the others a run per block
    wide = [(blocks, kt) for blocks, kt, _ in multiplies if kt // 64 < blocks]
    strided = [op for op in loads if op.src.slices[0].step > 1]
    assert wide
    assert len(strided) == sum(multiplies[(blocks, kt, 32)] * kt // 64
                               for blocks, kt in wide)
    assert all(op.src.slices[0].step == 64 and op.src.slices[1].stop -
               op.src.slices[1].start == 2048 for op in strided)
    # an array's step: its scales, then its strided commands, in turn on the load
    # engines (the emitter tracks each command's 2,048-byte runs exactly, so commands
    # filling interleaved rows of one tile need not wait for each other)
    scales = compiled.input_names[2]
    tiles: list[list] = []
    for c in commands:
        if isinstance(c.op, Load) and c.op.src.tensor == scales:
            tiles.append([c])
        elif isinstance(c.op, Load) and c.op.src.tensor == weight and tiles:
            tiles[-1].append(c)
    strided_tiles = [t for t in tiles if t[-1].op.src.slices[0].step > 1]
    assert sum(len(t) - 1 for t in strided_tiles) == len(strided)
    assert all(len({c.engine for c in t[1:]}) == min(3, len(t) - 1) for t in strided_tiles)
    # over the load engines dma0..dma2 of both cores (dma3 keeps the stores)
    assert {c.engine for t in strided_tiles for c in t} == {
        f"core{i}.dma{j}" for i in range(2) for j in range(3)}
    with use_config(TPU_V4), torch_bridge.profile():
        out = aten._weight_int4pack_mm_for_cpu(x.to("npu"), packed.to("npu"), group,
                                               sz.to("npu"))
    ref = aten._weight_int4pack_mm_for_cpu(x, packed, group, sz)
    # within a bf16 step of the largest output (the arrays round each dequantized weight
    # to bf16 and sum in another order; the same program without the strided loads and
    # the split gives the same numbers): a misplaced block would be off by its size
    torch.testing.assert_close(out.cpu().float(), ref.float(), rtol=0,
                               atol=float(ref.abs().max()) * 2 ** -7)
