"""An op's roofline on compulsory bytes (reports.roofline_gap): hand-derived on `tiny`
(1 GHz; 2 cores of one 4x4 array: 64 matrix FLOP/cycle; 2 x 4 vector lanes: 8
FLOP/cycle; DRAM 16 B/cycle; 256 KiB shared SRAM, its port 64 B/cycle)."""

from __future__ import annotations

import torch

from archsim.app.pipeline import run
from archsim.app.workload import Workload
from compiler.ir.ops import Copy
from compiler.options import CompileOptions
from reports.data import report_data
from reports.ops import op_rows
from reports.roofline_gap import Traffic, compulsory_traffic, op_gaps, roofline_cycles

F32 = 4
X = 1 * 1024 * F32  # x [1, 1024] and exp(x), the temp handed to the matmul
W = 1024 * 8 * F32  # w [1024, 8]
OUT = 1 * 8 * F32


class _ExpThenMm(torch.nn.Module):
    """exp is a kernel of its own; the matmul after it reads its result (a temp)."""

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x.exp() @ w


def _run(on_chip: bool):
    torch.manual_seed(0)
    workload = Workload.of_module(_ExpThenMm(), (torch.randn(1, 1024), torch.randn(1024, 8)))
    return run(workload, "tiny", mode="functional",
               options=CompileOptions(on_chip_temps=on_chip))


def test_compulsory_bytes_split_by_where_the_cheapest_schedule_keeps_each_tensor():
    unplaced = _run(False).program
    # exp reads x (a program input: DRAM), writes its result (a 4 KiB temp: fits the
    # shared SRAM); the matmul reads that temp and w (input) and writes the output.
    assert dict(compulsory_traffic(unplaced, 256 << 10)) == {
        "exp": Traffic(dram_bytes=X, on_chip_bytes=X),
        "mm": Traffic(dram_bytes=W + OUT, on_chip_bytes=X)}
    # A shared SRAM one byte too small for the temp: it must go through DRAM.
    assert dict(compulsory_traffic(unplaced, X - 1)) == {
        "exp": Traffic(dram_bytes=2 * X), "mm": Traffic(dram_bytes=X + W + OUT)}


def test_the_roofline_stays_put_when_the_temp_moves_to_shared_sram():
    unplaced, placed = _run(False), _run(True)
    assert any(isinstance(c.op, Copy) for c in placed.program.commands)  # it did move
    gaps = {}
    for result in (unplaced, placed):
        for gap in op_gaps(result, unplaced.program):
            gaps.setdefault(gap.source, []).append(gap)
    (exp_before, exp_after), (mm_before, mm_after) = gaps["exp"], gaps["mm"]
    # exp: 1024 FLOPs / 8 = 128 cycles; x at DRAM speed 4096 / 16 = 256; its result
    # on chip 4096 / 64 = 64: 256 cycles, in both runs.
    assert exp_before.roofline_cycles == exp_after.roofline_cycles == 256
    # On its own bytes: x and its result through DRAM (8192 / 16 = 512), then x only
    # (256): the old yardstick halved for the same time (exp's vector work bounds it
    # in both), so its gap doubled; the new one did not move.
    assert (exp_before.own_bytes_roofline_cycles, exp_after.own_bytes_roofline_cycles) \
        == (512, 256)
    assert exp_after.cycles == exp_before.cycles
    assert exp_after.own_bytes_gap == 2 * exp_before.own_bytes_gap
    assert exp_after.gap == exp_before.gap
    # mm: 2 x 1024 x 8 = 16384 FLOPs / 64 = 256 cycles; w and the output through DRAM
    # (32768 + 32) / 16 = 2050; the temp on chip 64: 2050 cycles.
    assert mm_before.roofline_cycles == mm_after.roofline_cycles == 2050
    assert exp_after.gap == exp_after.cycles / 256


def test_on_chip_bytes_bound_at_the_shared_sram_port():
    result = _run(True)
    data = report_data(result)
    exp = next(r for r in op_rows(data) if r.source == "exp")
    # 64 KiB through a 64 B/cycle port (1024 cycles) outweighs exp's 128 FLOP cycles.
    assert roofline_cycles(exp, Traffic(on_chip_bytes=64 << 10), data, 64) == 1024
    assert roofline_cycles(exp, Traffic(), data, 64) == 128


def test_a_matmuls_flops_may_run_on_the_arrays_and_the_vector_units():
    # tiny: two cores of one 4x4 array (2 x 16 x 2 = 64 FLOPs a cycle) and of 4 vector
    # lanes (8 a cycle, a multiply-add two FLOPs: 16): the matmul's 16,384 FLOPs bound
    # it at 16,384 / (64 + 16) cycles, which any split of its columns meets
    result = _run(True)
    data = report_data(result)
    mm = next(r for r in op_rows(data) if r.source == "mm")
    assert mm.matmul_flops == 16384
    assert roofline_cycles(mm, Traffic(), data, 64) == 16384 / (64 + 16)
