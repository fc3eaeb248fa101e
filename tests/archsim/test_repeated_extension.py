"""What an extension records (archsim.repeated: RepeatedLayers/RepeatedTiles.extension):
where the units not simulated are placed, the cycles and busy cycles they add, and the
window of the trace they repeat, checked against the trace and the totals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import archsim
import compiler
from archsim.config import load_config
from archsim.plan import plan_for
from archsim.repeated import layer_of_commands
from archsim.result import SimResult
from archsim.simulator import busy_cycles
from compiler.options import CompileOptions


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Linear(32, 32) for _ in range(6)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class MatMul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


@pytest.fixture(scope="module")
def stack_result() -> SimResult:
    return archsim.estimate(Stack(), torch.empty(16, 32, device="meta"), "tiny")


@pytest.fixture(scope="module")
def panels_result() -> SimResult:
    with torch.device("meta"):
        inputs = (torch.empty(1024, 256), torch.empty(256, 256))
    exported = compiler.export_model(MatMul(), inputs)
    options = CompileOptions(partial_matmul_commands=1)
    return compiler.compile_graph(exported, load_config("tiny"), options).simulate()


def _trace_busy(result: SimResult) -> dict[str, int]:
    plan = plan_for(result.program, result.config, verify=False)
    return {engine: busy_cycles(result.starts[queue], result.ends[queue],
                                plan.in_flight[engine])
            for engine, queue in plan.queue_arrays.items()}


def _check(result: SimResult, part) -> None:
    ext = part.extension
    trace_end = int(result.ends.max())
    assert ext.first_cycle == trace_end  # placed right after the simulated trace
    assert result.total_cycles == ext.last_cycle == trace_end + ext.cycles
    # the window holds the middle units: mean cycles per unit, times the units added
    middle = part.simulated - 2
    assert ext.window[0] < ext.window[1] <= trace_end
    assert ext.cycles == round((ext.window[1] - ext.window[0]) * (part.total - part.simulated)
                               / middle)
    # the trace's busy cycles plus what the extension added are the result's
    trace = _trace_busy(result)
    for engine, busy in result.engine_busy_cycles.items():
        assert busy == trace[engine] + ext.busy_cycles.get(engine, 0), engine
    assert any(ext.busy_cycles.values())
    assert result.extensions == (part,)


def test_a_layer_stack_records_what_its_missing_layers_add(stack_result):
    layers = stack_result.layers
    assert layers is not None and (layers.simulated, layers.total) == (3, 6)
    _check(stack_result, layers)
    # the window runs from the end of layer 0 to the end of layer 1 (the middle one)
    layer = layer_of_commands(stack_result, layers.path)
    ends = stack_result.ends
    assert layers.extension.window == (int(ends[layer == 0].max()), int(ends[layer == 1].max()))


def test_a_matmul_in_panels_records_what_its_missing_panels_add(panels_result):
    tiles = panels_result.tiles
    assert tiles is not None and tiles.total > tiles.simulated
    _check(panels_result, tiles)


def test_command_costs_are_per_command(stack_result):
    """Every command's uncontended duration is its own kind's: compute commands (never
    slowed by sharing) take exactly it, and no transfer beats it."""
    costs = stack_result.command_costs
    n = len(stack_result.program.commands)
    assert costs.dram_bytes.shape == costs.uncontended_cycles.shape == (n,)
    cycles = stack_result.ends - stack_result.starts
    compute = np.array([".mxu" in c.engine or c.engine.endswith(".vpu")
                        for c in stack_result.program.commands])
    assert compute.any() and (~compute).any()
    assert (costs.uncontended_cycles[compute] == cycles[compute]).all()
    assert (costs.uncontended_cycles[~compute] <= cycles[~compute]).all()
    plan = plan_for(stack_result.program, stack_result.config, verify=False)
    assert int(costs.dram_bytes.sum()) == plan.dram_read + plan.dram_written


def test_the_missing_layers_add_their_share_of_energy(stack_result):
    """Six Linear(32, 32) layers on 16 rows, three simulated: the arrays' energy is six
    layers' MACs at tiny's f32 MAC (4.6 pJ of arithmetic x 8, the 45 nm reference)."""
    from archsim.energy import run_energy

    energy = run_energy(stack_result)
    assert energy.dynamic_j["arrays"] == pytest.approx(6 * 16 * 32 * 32 * 4.6 * 8 * 1e-12,
                                                       rel=1e-9)
    assert energy.extension_j == pytest.approx(energy.dynamic_total_j
                                               - float(energy.command_j.sum()), rel=1e-9)
    assert energy.energy_until([energy.seconds])[0] == pytest.approx(energy.energy_j, rel=1e-9)


class _RunAhead(nn.Module):
    """A layer whose second term needs only its own weights: the vector unit can work
    on every layer's at once, ahead of the matmul chain (as dequantizing int4 weights
    does)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.empty(32, 32))
        self.big = nn.Parameter(torch.empty(256, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w + (self.big * 2.0).exp().sum(dim=1).mean()


class _RunAheadStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[_RunAhead() for _ in range(8)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def test_work_that_runs_ahead_of_its_layer_still_counts_in_each_added_layer() -> None:
    # the simulated layers' span from layer 0's end to layer 1's is short (layer 1's
    # vector work ran under layer 0); each added layer must still add its vector work.
    # Before the bound, the 8-layer estimate was 54,101 cycles against the full run's
    # 125,321 (-57%)
    stack = _RunAheadStack().to("meta")
    x = torch.empty(16, 32, device="meta")
    part = archsim.estimate(stack, x, "tiny")
    full = archsim.estimate(stack, x, "tiny", all_layers=True)
    assert part.layers is not None and part.layers.simulated == 3
    plan = plan_for(part.program, part.config, verify=False)
    unit = layer_of_commands(part, part.layers.path)
    vpu = [j for j in plan.queues["core0.vpu"] if unit[j] == 1]
    middle_vpu = busy_cycles(part.starts[vpu], part.ends[vpu], plan.in_flight["core0.vpu"])
    assert part.layers.extension.cycles >= 5 * middle_vpu
    assert part.total_cycles == pytest.approx(full.total_cycles, rel=0.15)
