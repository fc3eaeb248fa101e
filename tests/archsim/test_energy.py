"""Energy and power from the trace: hand-derived joules on the ``tiny`` preset (built at
the 45 nm, 0.9 V reference, so its energies are the public reference figures), and the
physical sanity a model of power must keep."""

from __future__ import annotations

import math

import pytest

from archsim.area import COMPONENTS, static_power_w
from archsim.config import load_config
from archsim.config.energy_reference import energy_table
from archsim.energy import run_energy
from archsim.simulator import Simulator
from compiler.ir.builder import ProgramBuilder
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.ir.ops import Copy, Load, MatMul, Program, Store

F32 = DType.f32

# Public 45 nm figures (Horowitz, ISSCC 2014), restated here so the test does not read
# them from the code it checks.
FP32_MAC_PJ = 3.7 + 0.9            # fp32 multiply + add
ARRAY_MACS = 1 + 7                 # the MAC + its PE's register and neighbour moves
SRAM_8KB_PJ_PER_BYTE = 10 / 8      # a 64-bit read of an 8 KB SRAM
TINY_BANK = 65536 / 4              # tiny's scratchpad: 64 KiB in 4 banks
SCRATCHPAD_PJ = SRAM_8KB_PJ_PER_BYTE * math.sqrt(TINY_BANK / 8192)
DDR_PJ_PER_BYTE = 15 * 8           # DDR: 15 pJ/bit
NOC_PJ_PER_BYTE = 2.0              # one NoC hop


def load_matmul_store() -> Program:
    """Load X (8x8 f32), Y = X @ X on the array, store Y."""
    b = ProgramBuilder("load_matmul_store")
    b.tensor("X", (8, 8), F32, "in")
    b.tensor("Y", (8, 8), F32, "out")
    x = SramRef("sram0", 0, (8, 8), F32)
    y = SramRef("sram0", 256, (8, 8), F32)
    load = b.add("core0.dma0", Load(b.ref("X"), x))
    mm = b.add("core0.mxu0", MatMul(x, x, y), [load])
    b.add("core0.dma0", Store(y, b.ref("Y")), [mm])
    return b.build()


def matmul_only() -> Program:
    b = ProgramBuilder("matmul_only")
    x = SramRef("sram0", 0, (64, 64), F32)
    y = SramRef("sram0", 16384, (64, 64), F32)
    b.add("core0.mxu0", MatMul(x, x, y))
    return b.build()


def simulate(program: Program, config="tiny"):
    config = load_config(config) if isinstance(config, str) else config
    return Simulator(config).run(program, verify=False)


def test_tiny_program_energy_by_hand():
    energy = run_energy(simulate(load_matmul_store()))
    transfer = 256 * (DDR_PJ_PER_BYTE + NOC_PJ_PER_BYTE + SCRATCHPAD_PJ)  # DRAM, hop, port
    matmul = 8 * 8 * 8 * FP32_MAC_PJ * ARRAY_MACS + 3 * 256 * SCRATCHPAD_PJ  # a, b, out
    assert energy.command_j.tolist() == pytest.approx(
        [transfer * 1e-12, matmul * 1e-12, transfer * 1e-12], rel=1e-12)
    assert energy.dynamic_j["arrays"] == pytest.approx(512 * 36.8e-12, rel=1e-12)
    assert energy.dynamic_j["dram"] == pytest.approx(2 * 256 * 120e-12, rel=1e-12)
    assert energy.engine_j == pytest.approx({"core0.dma0": 2 * transfer * 1e-12,
                                             "core0.mxu0": matmul * 1e-12}, rel=1e-12)
    # static: every component's static power over the run's 174 cycles at 1 GHz
    static = sum(static_power_w(load_config("tiny")).values()) * 174e-9
    assert energy.static_total_j == pytest.approx(static, rel=1e-12)
    assert energy.energy_j == pytest.approx(static + (2 * transfer + matmul) * 1e-12)


def test_energy_is_the_integral_of_power():
    result = simulate(load_matmul_store())
    energy = run_energy(result)
    assert energy.energy_until([energy.seconds])[0] == pytest.approx(energy.energy_j, rel=1e-9)
    edges, watts = energy.power_over_time(bins=37)
    assert float((watts * (edges[1:] - edges[:-1])).sum()) == pytest.approx(
        energy.energy_j, rel=1e-9)
    # power while only the matmul runs (cycles 51..123): idle + its energy over its time
    matmul_power = energy.idle_power_w + energy.command_j[1] / 72e-9
    assert energy.energy_until([0.1e-6])[0] - energy.energy_until([0.06e-6])[0] == \
        pytest.approx(matmul_power * 0.04e-6, rel=1e-9)


def test_doubling_the_clock_at_fixed_voltage_doubles_dynamic_power():
    slow = simulate(matmul_only())
    fast_config = load_config("tiny").with_overrides({"clock_hz": 2_000_000_000})
    fast = simulate(matmul_only(), fast_config)
    assert fast.total_cycles == slow.total_cycles  # same cycles, half the time
    e_slow, e_fast = run_energy(slow), run_energy(fast)
    assert e_fast.seconds == pytest.approx(e_slow.seconds / 2)
    assert e_fast.dynamic_total_j == pytest.approx(e_slow.dynamic_total_j)  # C V² per op
    dynamic_power = [e.dynamic_total_j / e.seconds for e in (e_slow, e_fast)]
    assert dynamic_power[1] == pytest.approx(2 * dynamic_power[0])
    assert e_fast.idle_power_w == pytest.approx(e_slow.idle_power_w)  # static ~ V, not f


def test_voltage_scales_dynamic_energy_by_its_square_and_static_linearly():
    base = load_config("tiny")
    low = base.with_overrides({"energy.voltage_v": 0.45})
    assert energy_table(low).mac_pj["f32"] == pytest.approx(energy_table(base).mac_pj["f32"] / 4)
    on_die = ("arrays", "vector", "sram", "uncore")
    assert sum(static_power_w(low)[c] for c in on_die) == pytest.approx(
        sum(static_power_w(base)[c] for c in on_die) / 2)


def test_a_byte_from_dram_costs_more_than_one_from_sram():
    b = ProgramBuilder("moves")
    b.tensor("X", (16, 16), F32, "in")
    tile = SramRef("sram0", 0, (16, 16), F32)
    b.add("core0.dma0", Load(b.ref("X"), tile))
    b.add("core0.dma1", Copy(SramRef("shared", 0, (16, 16), F32),
                             SramRef("sram0", 1024, (16, 16), F32)))
    energy = run_energy(simulate(b.build()))
    from_dram, from_shared = energy.command_j.tolist()
    assert from_dram > 10 * from_shared  # 120 pJ/B of DDR vs a few pJ/B of SRAM


def test_int8_mac_costs_less_than_bf16_and_bf16_less_than_f32():
    mac = energy_table(load_config("tiny")).mac_pj
    assert mac["i8"] == pytest.approx((0.2 + 0.1) * ARRAY_MACS)
    assert mac["i8"] < mac["bf16"] < mac["f16"] < mac["f32"]


def test_power_gating_charges_idle_compute_its_gated_share():
    config = load_config("tiny").with_overrides({"power.gating": "compute"})
    result = simulate(load_matmul_store(), config)
    energy = run_energy(result)
    static = static_power_w(config)
    gated = 0.1  # the default gated_fraction
    assert energy.idle_power_w == pytest.approx(
        sum(static.values()) - (1 - gated) * (static["arrays"] + static["vector"]))
    # the array (one of two, one per core) is awake for the matmul's 72 cycles only
    awake = (1 - gated) * static["arrays"] / 2 * 72e-9
    assert energy.static_j["arrays"] == pytest.approx(gated * static["arrays"] * 174e-9 + awake)


def test_every_component_is_reported():
    energy = run_energy(simulate(load_matmul_store()))
    assert tuple(energy.dynamic_j) == COMPONENTS == tuple(energy.static_j)


@pytest.mark.parametrize("rate, charged", [(2, "i8"), (0, "bf16")])
def test_an_int8_matmul_costs_int8_macs_where_the_array_has_an_int8_mode(rate, charged):
    """tpu-v3's arrays are bf16; with ``rates.i8`` they run int8 on a narrow datapath,
    without it the compiler's int8 inputs are widened and cost bf16 MACs."""
    config = load_config("tpu-v3").with_overrides({"core.matrix.rates.i8": rate})
    b = ProgramBuilder("int8_matmul")
    a = SramRef("sram0", 0, (128, 128), DType.i8)
    out = SramRef("sram0", 65536, (128, 128), DType.i32)
    b.add("core0.mxu0", MatMul(a, a, out))
    energy = run_energy(simulate(b.build(), config))
    assert energy.dynamic_j["arrays"] == pytest.approx(
        128 ** 3 * energy_table(config).mac_pj[charged] * 1e-12, rel=1e-12)
