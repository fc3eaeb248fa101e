"""A tiles staged in shared SRAM (``MatmulTiling.a_staged``,
``compiler/kernels/matmul_staging.py``): the cores of a round that multiply the same A
row block get it from one task-DMA load instead of one DRAM read each."""

from __future__ import annotations

import torch

from archsim.app.pipeline import run
from archsim.app.workload import Workload
from archsim.config import load_config
from compiler import compile_op
from compiler.cost import choose_matmul_tiling
from compiler.ir import DType
from compiler.ir.ops import Copy, Load

TINY = load_config("tiny")  # 2 cores, 256 KiB shared SRAM


class _Mm(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def test_each_rounds_a_tile_crosses_dram_once() -> None:
    # 16x4 @ 4x16 f32 on tiny: 8x8 output tiles (two m blocks x two n blocks), one k
    # step; round 0 is tiles 0 and 1 (rows 0-7, both column blocks) on cores 0 and 1,
    # round 1 rows 8-15. Each round's A tile [8, 4] is loaded once by the task DMA and
    # copied into both scratchpads; no core DMA reads A.
    a, b = torch.randn(16, 4), torch.randn(4, 16)
    program = compile_op(torch.ops.aten.mm.default, (a, b), {}, TINY).program
    a_name = program.tensors[0].name
    tdma = [c.op for c in program.commands if c.engine == "tdma"]
    assert [type(op) for op in tdma] == [Load, Load]
    assert [op.src.tensor for op in tdma] == [a_name, a_name]
    assert sum(op.dst.nbytes for op in tdma) == 16 * 4 * 4  # A once
    copies = [c for c in program.commands if isinstance(c.op, Copy)]
    assert sorted(c.engine.split(".")[0] for c in copies) == ["core0", "core0", "core1", "core1"]
    assert all(c.op.src.space == "shared" and c.op.dst.space == c.engine.split(".")[0]
               .replace("core", "sram") for c in copies)
    assert not [c for c in program.commands if c.engine != "tdma"
                and isinstance(c.op, Load) and c.op.src.tensor == a_name]


def test_staged_numbers_match_torch() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(64, 64), torch.randn(64, 16)  # 64x8 tiles, 16 k steps: staged
    # a functional run compares the output with torch's on CPU (NumericsError if not)
    result = run(Workload.of_module(_Mm(), (a, b)), TINY, mode="functional")
    assert any(c.engine == "tdma" for c in result.program.commands)


def test_atom_stages_a_large_int8_gemm_and_not_without_shared_sram() -> None:
    atom = load_config("atom")
    args = (1, 4096, 4096, 4096, DType.i8, DType.i32, 8, 1, 2, 0,
            atom.core.scratchpad.size_bytes)
    staged = choose_matmul_tiling(atom, *args)
    assert staged.a_staged
    # DRAM: A once per round of 8 tiles sharing one row block, B per tile, int32 out
    mt, nt, kt = staged.mt, staged.nt, staged.kt
    tiles = (4096 // mt) * (4096 // nt)
    sharing = min(4096 // nt, 8)
    assert staged.cost.dram_bytes == tiles * (4096 // kt) * (mt * kt / sharing + kt * nt) + \
        4096 * 4096 * 4
    unshared = atom.with_overrides({"shared_sram.size_bytes": 0})
    assert not choose_matmul_tiling(unshared, *args).a_staged
