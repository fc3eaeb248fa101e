"""Energy in the reports: JSON fields equal to the model's, a round trip through JSON,
the op table's energy column, the TDP warning and the Perfetto power counter."""

from __future__ import annotations

import json

import pytest

from archsim.config import load_config
from archsim.energy import run_energy
from archsim.simulator import Simulator
from reports.energy import energy_summary, format_energy, tdp_warning
from reports.json_report import from_json, to_json
from reports.ops import op_rows
from reports.perfetto import perfetto_trace
from reports.summary import summary


def test_json_run_fields_are_the_models(mm_result):
    energy = run_energy(mm_result)
    run = to_json(mm_result)["run"]
    assert run["energy_j"] == energy.energy_j
    assert run["average_power_w"] == pytest.approx(energy.energy_j / mm_result.seconds)
    assert run["idle_power_w"] == energy.idle_power_w
    assert run["energy_per_inference_j"] == energy.energy_j


def test_json_round_trip_keeps_the_energy_section(mm_result):
    document = json.loads(json.dumps(to_json(mm_result)))
    loaded = from_json(document)
    assert loaded.energy == energy_summary(mm_result)
    assert summary(loaded) == summary(mm_result)


def test_op_energies_add_up_to_the_runs_dynamic_energy(mm_result):
    rows = op_rows(mm_result)
    assert sum(r.energy_j for r in rows) == pytest.approx(
        run_energy(mm_result).dynamic_total_j, rel=1e-12)


def test_a_run_over_its_tdp_is_warned_about(programs):
    config = load_config("tiny").with_overrides({"power.tdp_w": 0.5})
    result = Simulator(config).run(programs.chain(), verify=False)
    summary_ = energy_summary(result)
    average = summary_.average_power_w  # the run is shorter than the 100 us window
    assert tdp_warning(summary_) == (f"warning: average power {average:.1f} W over a 100 us "
                                     f"window exceeds the TDP of 0.5 W")
    assert tdp_warning(summary_) in format_energy(summary_)


def test_no_warning_under_the_tdp(mm_result):
    assert tdp_warning(energy_summary(mm_result)) is None  # tiny's budget is 10 W


def test_perfetto_power_counter_integrates_to_the_runs_energy(mm_result):
    events = [e for e in perfetto_trace(mm_result)["traceEvents"]
              if e["ph"] == "C" and e["name"] == "power (W)"]
    times = [e["ts"] * 1e-6 for e in events]
    joules = sum(e["args"]["W"] * (t1 - t0) for e, t0, t1 in zip(events, times, times[1:]))
    assert joules == pytest.approx(run_energy(mm_result).energy_j, rel=1e-4)  # W rounded


def test_compare_table_sets_energy_power_and_area_side_by_side(mm_result, simulate, programs):
    from archsim.area import area_mm2
    from reports.compare import compare_table
    from reports.energy import format_joules

    other = simulate(programs.matmul_softmax(), "atom")
    rows = {line[:17].strip(): line[17:].split("  ") for line in
            compare_table([mm_result, other]).splitlines()[2:]}
    cells = [c.strip() for c in rows["energy"] if c.strip()]
    assert cells == [format_joules(run_energy(r).energy_j) for r in (mm_result, other)]
    areas = [c.strip() for c in rows["area (est.)"] if c.strip()]
    assert areas == [f"{sum(area_mm2(r.config).values()):.0f} mm²" for r in (mm_result, other)]


def test_component_power_adds_up_to_the_chips(mm_result):
    summary_ = energy_summary(mm_result)
    parts = summary_.power_by_component
    assert set(parts) <= set(summary_.dynamic_j) and "arrays" in parts
    for i, total in enumerate(summary_.power_w):
        assert sum(watts[i] for watts in parts.values()) == pytest.approx(total, rel=1e-9)
    # each component's curve integrates to its energy
    widths = [b - a for a, b in zip(summary_.power_edges_s, summary_.power_edges_s[1:])]
    for name, watts in parts.items():
        joules = sum(w * dt for w, dt in zip(watts, widths))
        assert joules == pytest.approx(summary_.dynamic_j[name] + summary_.static_j[name],
                                       rel=1e-9)
