"""Matmul tilings prefer less DRAM traffic among near ties (compiler.cost
choose_matmul_tiling): Llama-2-7B's 2048-token q/k/v projections on tpu-v4."""

from __future__ import annotations

from archsim.config import load_config
from compiler.cost import choose_matmul_tiling
from compiler.ir.dtypes import DType

MIB = 1 << 20


def test_llama_projection_reads_its_operands_fewer_times():
    # x [2048, 4096] @ W [4096, 4096], bf16, one tpu-v4 chip: 2 cores of 4 128x128
    # arrays, 16 MiB of scratchpad each, 2 operand sets, a 2-byte epilogue (the cast).
    config = load_config("tpu-v4")
    t = choose_matmul_tiling(config, 1, 2048, 4096, 4096, DType.bf16, DType.bf16, 2, 4, 2,
                             2, 16 * MIB, DType.bf16)
    # 1024-row blocks by 1024 columns (256 per array), not the 512-row blocks the
    # fewest commands would take at an estimate no faster
    assert (t.mt, t.nt, t.arrays, t.a_resident, t.a_staged) == (1024, 256, 4, False, False)
    assert t.b_staged  # W's 32 MiB fit tpu-v4's 128 MiB of shared SRAM
    # By hand: 2 row blocks x 4 column tiles. Each tile reads its A row block
    # (1024 x 4096 x 2 B = 8 MiB) and its B column block (4096 x 1024 x 2 B = 8 MiB),
    # and writes its output once (16 MiB in all): 8 x 16 + 16 = 144 MiB, 2.25x the
    # compulsory 64 MiB (x 16, W 32, out 16). The 512-row tiling: 16 tiles of 4 + 8
    # MiB, 208 MiB (3.25x).
    # and the second row block copies W's tiles from shared SRAM, not DRAM: 144 - 32 =
    # 112 MiB (1.75x)
    assert t.cost.dram_bytes == 112 * MIB
