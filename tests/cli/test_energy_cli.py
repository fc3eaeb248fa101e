"""``archsim configs`` shows each preset's node, area and TDP; ``--energy PRESET`` its
area, static power and per-operation energies."""

from __future__ import annotations

import re

from archsim.area import area_mm2
from archsim.cli import main
from archsim.config import load_config


def test_configs_lists_node_area_and_tdp(capsys):
    assert main(["configs"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header[-3:] == ["node", "mm²", "TDP"] or header[-4:] == ["node", "mm²", "TDP", "W"]
    tiny = next(line for line in out.splitlines() if line.strip().startswith("tiny"))
    assert f"45 nm  {sum(area_mm2(load_config('tiny')).values()):3.0f}     10" in tiny


def test_configs_energy_sheet(capsys):
    assert main(["configs", "--energy", "tiny"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tiny: 45 nm, 0.9 V, 1 GHz; TDP 10 W; power gating: none")
    # tiny is built at the reference itself: an f32 MAC is (3.7 + 0.9) pJ x 8
    assert re.search(r"\n  mac_f32_pj +36\.8\n", out)
    assert re.search(r"\n  dram_pj_per_byte +120\n", out)  # DDR, 15 pJ/bit


def test_configs_energy_of_an_unknown_preset_is_a_config_error(capsys):
    assert main(["configs", "--energy", "nope"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "archsim: error: nope: 1 problem:"
    assert err[1].startswith("  - unknown preset 'nope'; presets: atom, ")
