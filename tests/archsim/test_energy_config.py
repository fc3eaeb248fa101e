"""The energy and power sections of the config: every preset has them, values are
derived from the reference table unless set, and bad values are named errors."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from archsim.area import area_mm2
from archsim.config import load_config, preset_names
from archsim.config.energy_reference import area_factor, energy_factor, energy_table
from archsim.errors import ConfigError


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_states_its_node_voltage_and_power(name):
    text = resources.files("archsim.config.presets").joinpath(f"{name}.yaml").read_text()
    data = yaml.safe_load(text)
    assert {"node_nm", "voltage_v"} <= set(data["energy"])
    assert {"tdp_w", "gating"} <= set(data["power"])
    table = energy_table(load_config(name))
    assert table.dram_pj_per_byte > table.scratchpad_pj_per_byte  # DRAM costs more


def test_node_scaling_passes_through_the_public_anchors():
    assert energy_factor(45, 0.9) == 1.0
    assert energy_factor(7, 0.8) == pytest.approx(0.094)  # Stillmaker & Baas, 7 nm, 0.8 V
    assert area_factor(7) == pytest.approx(0.059)


def test_a_value_set_in_the_config_overrides_the_derived_one():
    config = load_config("tpu-v3").with_overrides({"energy.mac_bf16_pj": 0.5,
                                                   "energy.dram_pj_per_bit": 4.0})
    table = energy_table(config)
    assert table.mac_pj["bf16"] == 0.5
    assert table.dram_pj_per_byte == 32.0


def test_a_smaller_node_has_less_area_and_energy():
    v3 = load_config("tpu-v3")
    shrunk = v3.with_overrides({"energy.node_nm": 7})
    assert area_mm2(shrunk)["arrays"] == pytest.approx(
        area_mm2(v3)["arrays"] * (7 / 16) ** 1.521, rel=1e-3)
    assert energy_table(shrunk).mac_pj["bf16"] < energy_table(v3).mac_pj["bf16"]


def test_bad_energy_values_are_named():
    with pytest.raises(ConfigError) as info:
        load_config("tiny").with_overrides({"energy.voltage_v": 5.0, "power.gating": "all"})
    text = str(info.value)
    assert "energy.voltage_v: 5.0 is outside 0.3..2 (a core supply of 0.3 to 2 V)" in text
    assert "power.gating: 'all' is not one of none, compute" in text


def test_an_unknown_dram_kind_asks_for_its_energy():
    config = load_config("tiny").with_overrides({"dram.kind": "MRAM"})
    with pytest.raises(ConfigError, match="dram.kind: 'MRAM' has no reference energy per bit"):
        energy_table(config)
    assert energy_table(config.with_overrides({"energy.dram_pj_per_bit": 2.0})).dram_pj_per_byte == 16.0
