"""A large final matmul compiled and simulated in its first panels of output tiles and
extended to the whole (compiler.kernels.matmul_panels, archsim.repeated.extend_tiles):
the panel arithmetic by hand, and the extended result against simulating every tile."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import archsim
import compiler
from archsim.config import load_config
from archsim.errors import ArchsimError, LoweringError
from archsim.repeated import extend_tiles
from compiler.kernels.matmul_panels import KEEP_PANELS, panel_plan
from compiler.options import CompileOptions
from reports.json_report import from_json, to_json
from reports.summary import summary

IN_PART = CompileOptions(partial_matmul_commands=1)
"""Every matmul that falls into panels is compiled in part, however small."""


class MatMul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


class MatMulThenSum(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a @ b).sum(dim=0)


def _exported(module: nn.Module, *shapes: tuple[int, ...], dtype=torch.float16):
    with torch.device("meta"):
        inputs = tuple(torch.empty(s, dtype=dtype) for s in shapes)
    return compiler.export_model(module, inputs)


def _plan(tiles=512, cores=8, full=True, acc_sets=1, op_sets=2, k_steps=256,
          resident=False, col_tiles=64, commands=400_000, limit=1):
    return panel_plan(tiles, cores, full, acc_sets, op_sets, k_steps, resident, col_tiles,
                      commands, limit)


class TestPanelPlan:
    def test_a_round_of_one_tile_per_core_is_a_panel(self):
        # 16384^3 on atom: 8 x 64 tiles of 2048 x 256, 256 k-steps, 8 cores
        plan = _plan()
        assert (plan.tiles_per_panel, plan.total, plan.kept, plan.remainder) == \
            (8, 64, KEEP_PANELS, 0)
        tiles = list(range(512))
        assert plan.emitted(tiles) == tiles[:8 * KEEP_PANELS]
        assert [plan.panel_of(i) for i in (0, 7, 8, 23)] == [0, 0, 1, 2]

    def test_tiles_past_the_last_whole_panel_go_with_it_as_the_tail(self):
        # 16384^3 on ascend-910b: 4,096 tiles over 20 cores, 204 panels and 16 tiles
        plan = _plan(tiles=4096, cores=20)
        assert (plan.tiles_per_panel, plan.total, plan.remainder) == (20, 204, 16)
        tiles = list(range(4096))
        kept = plan.emitted(tiles)
        head = 20 * (KEEP_PANELS - 1)
        assert kept == tiles[:head] + tiles[4096 - 36:]
        assert (4096 - 36) % 20 == 0  # the tail meets the cores the head's panels do
        assert [plan.panel_of(i) for i in (0, head - 1, head, len(kept) - 1)] == \
            [0, KEEP_PANELS - 2, KEEP_PANELS - 1, KEEP_PANELS - 1]

    def test_buffer_rotation_sets_the_period(self):
        assert _plan(acc_sets=2).tiles_per_panel == 16  # accumulators alternate per round
        assert _plan(k_steps=255).tiles_per_panel == 16  # operand sets: odd k-steps
        assert _plan(tiles=240, op_sets=3, k_steps=256).tiles_per_panel == 24
        assert _plan(op_sets=3, k_steps=3).tiles_per_panel == 8
        assert _plan(tiles=272, op_sets=3, k_steps=256).remainder == 8  # 34 rounds
        # a resident A row block: 64 columns over 8 cores = 8 rounds a block, 2 sets
        assert _plan(tiles=1024, resident=True).tiles_per_panel == 8 * 8 * 2

    def test_runs_whole_when_not_identical_or_not_worth_it(self):
        assert _plan(limit=0) is None                 # not asked
        assert _plan(commands=50_000, limit=50_000) is None  # small enough
        assert _plan(full=False) is None              # edge tiles of another shape
        assert _plan(tiles=56) is None                # 7 panels: fewer than MIN_PANELS
        assert _plan(resident=True, col_tiles=60, tiles=480) is None


CASES = [  # preset, (m, k, n), dtype
    ("atom", (4096, 2048, 8192), torch.float16),
    ("atom", (8192, 1024, 4096), torch.float32),   # f32 as 3 passes on the arrays
    ("tpu-v3", (8192, 4096, 4096), torch.bfloat16),
    ("tpu-v4", (8192, 4096, 4096), torch.bfloat16),
    ("tiny", (1024, 256, 256), torch.float32),
    ("ascend-910b", (4096, 4096, 4096), torch.float16),  # 256 tiles on 20 cores: a tail
]


class TestAgainstFullRuns:
    @pytest.mark.parametrize("preset,shape,dtype", CASES)
    def test_extended_equals_simulating_every_tile(self, preset, shape, dtype):
        m, k, n = shape
        exported = _exported(MatMul(), (m, k), (k, n), dtype=dtype)
        config = load_config(preset)
        full = compiler.compile_graph(exported, config).simulate()
        part = compiler.compile_graph(exported, config, IN_PART).simulate()
        assert full.tiles is None and part.tiles is not None
        tiles = part.tiles
        assert tiles.simulated == KEEP_PANELS and tiles.total >= 8
        assert len(part.program.commands) < len(full.program.commands) * 0.5
        # work, bytes and FLOPs exact
        assert part.matmul_flops == full.matmul_flops == 2 * m * k * n
        assert (part.flops, part.dram_bytes_read, part.dram_bytes_written) == \
            (full.flops, full.dram_bytes_read, full.dram_bytes_written)
        assert dict(part.link_bytes) == dict(full.link_bytes)
        # cycles within 1% (equal on every case here: the schedule is periodic)
        assert part.total_cycles == pytest.approx(full.total_cycles, rel=0.01)
        for engine, busy in full.engine_busy_cycles.items():
            assert part.engine_busy_cycles[engine] == pytest.approx(busy, rel=0.01), engine

    def test_linear_with_bias_and_transposed_weight(self):
        # addmm: the bias add fused into the tiles' epilogue, the weight read as [N, K]
        with torch.device("meta"):
            linear = nn.Linear(1024, 4096, dtype=torch.float16)
        exported = _exported(linear, (16384, 1024))
        config = load_config("atom")
        full = compiler.compile_graph(exported, config).simulate()
        part = compiler.compile_graph(exported, config, IN_PART).simulate()
        assert part.tiles is not None
        assert (part.flops, part.dram_bytes_read) == (full.flops, full.dram_bytes_read)
        assert part.total_cycles == pytest.approx(full.total_cycles, rel=0.01)


class TestWhereItApplies:
    def test_default_options_compile_every_tile(self):
        compiled = compiler.compile_graph(_exported(MatMul(), (4096, 2048), (2048, 8192)),
                                          load_config("atom"))
        assert compiled.tile_panels is None

    def test_a_matmul_another_kernel_reads_runs_whole(self):
        compiled = compiler.compile_graph(
            _exported(MatMulThenSum(), (4096, 2048), (2048, 8192)), load_config("atom"),
            IN_PART)
        assert compiled.tile_panels is None

    def test_a_partial_program_does_not_run_functionally(self):
        compiled = compiler.compile_graph(_exported(MatMul(), (4096, 2048), (2048, 8192)),
                                          load_config("atom"), IN_PART)
        a = torch.zeros(4096, 2048, dtype=torch.float16)
        b = torch.zeros(2048, 8192, dtype=torch.float16)
        with pytest.raises(LoweringError, match="cannot run functionally"):
            compiled.run(a, b)

    def test_too_few_panels_cannot_be_extended(self):
        compiled = compiler.compile_graph(_exported(MatMul(), (4096, 2048), (2048, 8192)),
                                          load_config("atom"), IN_PART)
        result = compiled.simulate()
        panel = np.minimum(compiled.tile_panels.index(len(result.program.commands)), 1)
        with pytest.raises(ArchsimError, match="the first 3 at least"):
            extend_tiles(result, panel, 8, "mm", 8)


class TestEstimate:
    def test_16384_cubed_gemm_in_part_with_the_full_runs_cycles(self):
        """289,453,589 cycles is what simulating all 206,848 commands gives (BENCHMARKS.md,
        Compiler); the estimate simulates 3 of 128 panels."""
        with torch.device("meta"):
            a = torch.empty(16384, 16384, dtype=torch.float16)
        result = archsim.estimate(MatMul(), (a, a), "atom")
        assert result.tiles.describe() == ("3 of 128 panels of mm simulated, 125 extended "
                                           "at 2,261,000 cycles each")
        assert len(result.program.commands) == 3 * 8 * 202
        assert result.total_cycles == 289_453_589
        assert result.matmul_flops == 2 * 16384 ** 3
        text = summary(result)
        assert "tiles           3 of 128 panels of mm simulated" in text
        saved = from_json(to_json(result))
        assert saved.tiles == result.tiles.describe()
        assert saved.engine_busy_cycles["core0.mxu0"] == \
            result.engine_busy_cycles["core0.mxu0"]
