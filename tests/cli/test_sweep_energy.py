"""Energy, power and area in sweeps: the costs, DVFS operating points and the two
Pareto figures."""

from __future__ import annotations

import json

import pytest

from archsim.cli import main
from archsim.config import load_config
from archsim.energy import run_energy
from archsim.errors import ConfigError
from archsim.sweep import expand_overrides, sweep
from reports.sweep import pareto_points

GEMM = ("sweep", "gemm", "--config", "tiny", "--seq", "64", "--workers", "1", "-q")


def test_a_dvfs_point_sets_clock_and_voltage_together():
    assert expand_overrides({"dvfs": "2e9:0.45", "dram.channels": 2}) == {
        "dram.channels": 2, "clock_hz": 2_000_000_000, "energy.voltage_v": 0.45}
    with pytest.raises(ConfigError, match=r"dvfs: '2e9' is not CLOCK_HZ:VOLTAGE_V"):
        expand_overrides({"dvfs": "2e9"})


def test_dvfs_points_trade_energy_for_latency():
    points = sweep("gemm", "tiny", {"dvfs": ["1e9:0.9", "2e9:0.9", "1e9:0.45"]}, seq=64,
                   backend="serial")
    base, fast, low = (p.report for p in points)
    # twice the clock: faster, though not twice (DRAM's GB/s do not scale with it)
    assert base.seconds / 2 < fast.seconds < base.seconds
    assert fast.energy.dynamic_j["arrays"] == pytest.approx(base.energy.dynamic_j["arrays"])
    # at half the voltage the on-die dynamic energy is a quarter; DRAM and links are
    # off-chip figures, not scaled
    on_die = ("arrays", "vector", "sram", "noc")
    assert sum(low.energy.dynamic_j[c] for c in on_die) == pytest.approx(
        sum(base.energy.dynamic_j[c] for c in on_die) / 4)


def test_sweep_energy_is_the_runs(capsys, tmp_path):
    code = main([*GEMM, "--grid", "core.matrix.rows=4,8", "--cost", "energy",
                 "--out", str(tmp_path)])
    assert code == 0
    document = json.loads((tmp_path / "sweep.json").read_text())
    assert document["cost"] == "energy"
    assert {p.name for p in tmp_path.iterdir()} >= {"pareto.png", "pareto_area.png"}
    from archsim.app import Workload, run

    config = load_config("tiny").with_overrides({"core.matrix.rows": 8})
    result = run(Workload.builtin("gemm", seq=64), config, mode="performance")
    point = next(p for p in document["points"] if p["overrides"]["core.matrix.rows"] == 8)
    assert point["metrics"]["energy_j"] == pytest.approx(run_energy(result).energy_j)
    assert point["metrics"]["cost"] == pytest.approx(run_energy(result).energy_j * 1e3)


def test_a_bigger_array_costs_area_the_pareto_front_shows():
    points = sweep("gemm", "tiny", {"core.matrix.rows": [4, 8]}, seq=64, backend="serial")
    small, big = (p.report for p in points)
    assert big.energy.area_mm2["arrays"] == pytest.approx(2 * small.energy.area_mm2["arrays"])
    # faster and larger: neither dominates the other on (area, latency)
    assert big.total_cycles < small.total_cycles
    assert pareto_points(points, "area") == {0, 1}
