"""The matmul kernel's tiling on `tiny`, derived by hand from the cost model
(compiler/cost.py) and the timing model (DESIGN.md, "Timing model").

tiny: 2 cores, one 4x4 ws array (f32 native), 2 DMA engines of 16 B/cycle per core;
DRAM 16 B/cycle; DMA setup 10 + DRAM latency 20 + NoC latency 5 = 35 fixed cycles.
"""

from __future__ import annotations

import pytest
import torch

from archsim.config import load_config
from archsim.simulator import Simulator
from compiler import compile_op
from compiler.cost import choose_matmul_tiling
from compiler.ir import DType, MatMul

TINY = load_config("tiny")


def test_an_8x8x8_matmul_takes_two_k_steps_on_one_core() -> None:
    """The cost model's numbers for mt=8 kt=4 nt=8 (one tile, one core):

    - load_bw = min(one spare DMA engine's 16, DRAM 16 * 0.85 / 1 tile) = 13.6 B/cycle
    - a step: A 8x4 + B 4x8 = 256 B; transfer 256 / 13.6 = 18.82; mxu (ws, Sr=k=4,
      Sc=n=8, T=m=8) (2*4 + 4 + 8 - 2) * 1 * 2 = 36; 2 steps: mxu 72
    - 3 operand sets: exposed = max(0, 35 + 18.82 - 2 * 36) = 0, dma = 512 / 13.6 = 37.65
    - epilogue: no cast (f32 out) but one pass over the tile, 64 / 4 lanes = 16 vpu
    - store 64 * 4 / 16 + 35 = 51; 2 accumulator sets: no stall
    - serial = setup 35 + first load 18.82 + vpu 16 + store 51 = 120.82
    - DRAM 512 + 256 = 768 B / 13.6 = 56.47
    - estimate = max(72, 16, 37.65, 56.47) + 120.82 = 192.82
    A whole-k tile (kt=8) costs max(72, 16, 37.65, 56.47) + 35 + 37.65 + 16 + 51 =
    211.65, over 5% slower. The fastest estimate, mt=4 kt=4 nt=8 (two tiles, one per
    core: load_bw 6.8, DRAM 1024 B -> 75.29, serial 35 + 28.24 + 8 + 43 = 114.24) is
    189.5: within 5% (COMMAND_TOLERANCE), and it issues 2 * 2 * 3 = 12 commands to
    this tiling's 1 * 2 * 3 = 6, so this one is chosen.
    """
    tiling = choose_matmul_tiling(TINY, 1, 8, 8, 8, DType.f32, DType.f32, 2, 1, 2, 0,
                                  TINY.core.scratchpad.size_bytes)
    assert (tiling.mt, tiling.kt, tiling.nt, tiling.arrays, tiling.acc_sets, tiling.op_sets,
            tiling.a_resident, tiling.k_steps) == (8, 4, 8, 1, 2, 3, False, 2)
    cost = tiling.cost
    assert (cost.mxu_cycles, cost.vpu_cycles, cost.dram_bytes) == (72, 16, 768)
    assert cost.dma_cycles == pytest.approx(512 / 13.6)
    assert cost.serial_cycles == pytest.approx(35 + 256 / 13.6 + 16 + 51)
    assert cost.estimate(TINY) == pytest.approx(72 + 35 + 256 / 13.6 + 16 + 51)


def test_the_8x8x8_schedule_runs_in_the_cycles_the_timing_model_gives() -> None:
    """Four 128 B loads (A and B of each k step) one after the other on dma0: 35 + 128 /
    16 = 43 each; the first matmul waits for step 0's loads (86), the second for step
    1's (172), each (8 + 4 + 8 - 2) * 2 = 36 cycles (see above); the 256 B store on
    dma1: 35 + 16 = 51 after the last matmul: 208 + 51 = 259."""
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    program = compile_op(torch.ops.aten.mm.default, (a, b), {}, TINY).program
    result = Simulator(TINY).run(program)
    assert sorted((e.engine, e.start, e.end) for e in result.trace) == [
        ("core0.dma0", 0, 43), ("core0.dma0", 43, 86), ("core0.dma0", 86, 129),
        ("core0.dma0", 129, 172), ("core0.dma1", 208, 259),
        ("core0.mxu0", 86, 122), ("core0.mxu0", 172, 208)]
    assert result.total_cycles == 259


def test_a_core_alternates_its_accumulator_sets_over_its_own_tiles() -> None:
    """16x4x16 is 8 output tiles of 8x4 (two accumulator sets), dealt to the 2 cores in
    turn: core 0 gets tiles 0, 2, 4, 6. Its k-loop is one step, so each tile is one
    matmul. Tile t must use set (t // cores) % 2 -- the core's own tile count -- so
    that a core's next tile never waits for the store of the one before: core 0's
    matmuls go set 0, 1, 0, 1 (not t % 2, which would put all of core 0's tiles in
    set 0)."""
    a, b = torch.randn(16, 4), torch.randn(4, 16)
    program = compile_op(torch.ops.aten.mm.default, (a, b), {}, TINY).program
    per_core: dict[str, list[int]] = {}
    for cmd in program.commands:
        if isinstance(cmd.op, MatMul):
            per_core.setdefault(cmd.engine, []).append(cmd.op.out.offset)
    assert sorted(per_core) == ["core0.mxu0", "core1.mxu0"]
    for offsets in per_core.values():
        first, second = offsets[0], offsets[1]
        assert first != second
        assert offsets == [first, second, first, second]


def test_a_resident_row_block_is_loaded_once_per_core_and_rotates_its_sets() -> None:
    # 256x32 @ 32x32 f32 on tiny: 128-row blocks (2) by 8 columns (4 tiles), 8 k steps
    # of 4, A resident: tiles 0..7 alternate cores, so each core meets both row blocks
    # and loads each once (every k step's A tile), keeping it across its two column
    # tiles; the second block takes the other resident set. Numbers against torch.
    from archsim.app.pipeline import run
    from archsim.app.workload import Workload
    from compiler.ir.ops import Load

    tiling = choose_matmul_tiling(TINY, 1, 256, 32, 32, DType.f32, DType.f32, 2, 1, 2, 0,
                                  TINY.core.scratchpad.size_bytes)
    assert (tiling.mt, tiling.kt, tiling.nt, tiling.a_resident, tiling.op_sets) == \
        (128, 4, 8, True, 2)

    class Mm(torch.nn.Module):
        def forward(self, a, b):
            return a @ b
    torch.manual_seed(3)
    result = run(Workload.of_module(Mm(), (torch.randn(256, 32), torch.randn(32, 32))),
                 TINY, mode="functional")  # NumericsError if a wrong A tile is used
    a_name = result.program.tensors[0].name
    loads = [c.op for c in result.program.commands if isinstance(c.op, Load)
             and c.op.src.tensor == a_name]
    assert sum(op.dst.nbytes for op in loads) == 2 * 256 * 32 * 4  # once per core
    assert len({op.dst.offset for op in loads}) == 2 * 8  # two sets of 8 k-step tiles


def test_one_array_a_core_when_multi_array_is_off() -> None:
    from compiler.options import CompileOptions

    tpu = load_config("tpu-v4")
    x, w = torch.randn(256, 256), torch.randn(256, 1024)
    engines = {c.engine for c in compile_op(torch.ops.aten.mm.default, (x, w), {}, tpu,
                                            CompileOptions(multi_array=False)).program.commands
               if isinstance(c.op, MatMul)}
    assert engines == {"core0.mxu0", "core1.mxu0"}


def test_a_linears_loads_are_its_own_and_run_on_the_load_engines() -> None:
    # nn.Linear's weight [N, K] is loaded transposed by the DMA; tpu-v4 keeps dma3 of
    # each core for stores
    from compiler.ir.ops import Load

    tpu = load_config("tpu-v4")
    program = compile_op(torch.ops.aten.linear.default,
                         (torch.randn(512, 256), torch.randn(384, 256)), {}, tpu).program
    loads = [c for c in program.commands if isinstance(c.op, Load)]
    weight = program.tensors[1].name
    assert {c.op.src.tensor for c in loads} == {program.tensors[0].name, weight}
    assert {c.source for c in loads} == {c.source for c in program.commands
                                         if isinstance(c.op, MatMul)} != {None}
    assert {c.engine.split(".")[1] for c in loads} <= {"dma0", "dma1", "dma2"}
