"""Calibration on published chip power (shared/data/tpuv3-power.csv, from the TPU v4
paper, ISCA 2023): a TPU v3 chip, two ``tpu-v3`` TensorCores plus the shared parts
(all of its HBM, its ICI links and host interface), draws 262 W at most and 84 W idle.
The preset's energies are the 45 nm reference scaled to 16 nm, not fitted to these."""

from __future__ import annotations

import pytest

from archsim.app import Workload, run
from archsim.config import load_config
from archsim.energy import run_energy

MAX_W, IDLE_W = 262.0, 84.0  # public, per chip
TOLERANCE = 0.15


@pytest.fixture(scope="module")
def chip():
    """Two TensorCores sharing the chip's 32 HBM2 channels (900 GB/s)."""
    return load_config("tpu-v3").with_overrides({"cores": 2, "dram.channels": 32})


@pytest.fixture(scope="module")
def gemm_energy(chip):
    result = run(Workload.builtin("gemm_2048x2048x2048"), chip, mode="performance")
    assert result.matrix_utilization > 0.85  # compute-bound
    return run_energy(result)


def test_compute_bound_bf16_gemm_draws_the_published_max_power(gemm_energy):
    assert gemm_energy.average_power_w == pytest.approx(MAX_W, rel=TOLERANCE)


def test_idle_power_is_the_published_idle_power(gemm_energy):
    assert gemm_energy.idle_power_w == pytest.approx(IDLE_W, rel=TOLERANCE)


def test_a_memory_bound_run_draws_between_idle_and_compute_bound(chip, gemm_energy):
    gemv = run_energy(run(Workload.builtin("gemm_1x2048x2048"), chip, mode="performance"))
    assert gemm_energy.idle_power_w < gemv.average_power_w < gemm_energy.average_power_w
