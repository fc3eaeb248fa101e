"""Reports of an extended run (layers or matmul panels counted but not simulated), on a
hand-built case: the chain program (tiny preset, hand-derived in
test_reports_critical_path: load 0-51 on dma0, multiply 51-69 on the vector unit,
store 69-120 on dma1) as the window that 2 more units repeat, 240 cycles after it."""

from __future__ import annotations

import dataclasses
import json
import re
from types import MappingProxyType

import pytest

from reports.critical_path import critical_path, critical_path_text, engine_times, idle_text
from reports.data import COMPUTE_KINDS, ReportData, report_data
from reports.extended import ExtendedSpan, apportion
from reports.json_report import from_json, to_json
from reports.ops import op_table
from reports.perfetto import perfetto_trace
from reports.summary import summary
from reports.text import distinct_labels, shorten_middle

ADDED = {"core0.dma0": 102, "core0.vpu": 36, "core0.dma1": 102}
"""Busy cycles the 2 extended units add: twice the chain's."""


@pytest.fixture(scope="module")
def extended(chain_result) -> ReportData:
    data = report_data(chain_result)
    span = ExtendedSpan("blocks", "layer", first_unit=3, units=2, unit_cycles=120,
                        start_cycle=120, cycles=240, window=(0, 120),
                        busy_cycles=MappingProxyType(ADDED))
    busy = {e: b + ADDED.get(e, 0) for e, b in data.engine_busy_cycles.items()}
    return dataclasses.replace(data, total_cycles=360, extended=(span,),
                               run_busy_cycles=MappingProxyType(busy))


def test_labels_name_the_units_not_simulated():
    layers = ExtendedSpan("model.layers", "layer", 3, 29, 10, 0, 290, (0, 10))
    assert layers.label == "model.layers.3-31 (29 layers, extended)"
    assert layers.unit_label(0) == "model.layers.3 (extended)"
    panels = ExtendedSpan("mm", "panel", 3, 61, 10, 0, 610, (0, 10))
    assert panels.label == "mm panels 3-63 (61 panels, extended)"
    one = ExtendedSpan("model.layers", "layer", 3, 1, 10, 0, 10, (0, 10))
    assert one.label == "model.layers.3 (1 layer, extended)"


def test_units_tile_the_span_exactly():
    span = ExtendedSpan("s", "layer", 3, 3, 3, 100, 10, (0, 5))
    assert [span.unit_bounds(i) for i in range(3)] == [(100, 103), (103, 106), (106, 110)]


def test_apportion_sums_exactly():
    assert apportion(10, {"a": 1, "b": 1, "c": 1}) == {"a": 4, "b": 3, "c": 3}
    assert apportion(7, {"a": 0.0, "b": 2.0}) == {"b": 7}
    assert apportion(5, {"a": 0}) == {}


def test_critical_path_continues_through_the_extension(extended):
    path = critical_path(extended)
    assert path.length_cycles == 360
    # the chain repeated twice: load 102 on dma, multiply 36 on the vector unit, store 102
    assert dict(path.cycles_by("kind")) == {"dma": 102 + 204, "vpu": 18 + 36}
    assert dict(path.cycles_by("source")) == {
        "blocks.3-4 (2 layers, extended)": 240, "x": 51, "aten.mul": 69}
    (part,) = path.extended
    assert part.commands == 6


def test_critical_path_text_has_a_row_per_extension_and_adds_up(extended):
    text = critical_path_text(extended)
    assert "3 commands simulated + 2 layers extended, 360 cycles" in text
    row = next(line for line in text.splitlines() if "(2 layers, extended)" in line)
    assert row.split()[-5:] == ["~6", "120", "360", "240", "66.7%"]
    shares = [float(re.search(r"([\d.]+)%\)?$", line).group(1)) for line in _table(text)]
    assert sum(shares) == pytest.approx(100, abs=0.2)
    kinds = text.split("Path time by engine kind: ")[1]
    assert kinds == "dma 85.0%, vpu 15.0%"


def test_idle_buckets_add_up_to_the_run_and_busy_to_utilization(extended):
    times = {t.engine: t for t in engine_times(extended)}
    # dma0: load 0-51 then nothing; the extension adds 102 busy, the rest nothing to do
    dma0 = times["core0.dma0"]
    assert (dma0.busy, dma0.contention, dma0.waiting, dma0.nothing_to_do) == (153, 0, 0, 207)
    # vector unit: waits 51 on dma, busy 18, nothing 51; extension: 36 busy, 204 idle
    # split like its window (51 waiting, 51 nothing)
    vpu = times["core0.vpu"]
    assert (vpu.busy, vpu.waiting, vpu.nothing_to_do) == (54, 153, 153)
    assert dict(vpu.waiting_on) == {"dma": 153}
    for t in times.values():
        assert t.busy + t.contention + t.waiting + t.nothing_to_do == t.total == 360
        assert t.busy_including_contention == extended.engine_busy_cycles[t.engine]
    text = idle_text(extended)
    assert "blocks.3-4 (2 layers, extended)" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("core0.dma0"))
    assert row.split()[1] == f"{100 * extended.utilization['core0.dma0']:.1f}%" == "42.5%"


def test_perfetto_marks_each_extended_unit(extended):
    events = perfetto_trace(extended)["traceEvents"]
    marks = [e for e in events if e.get("cat") == "extended"]
    us = 1e6 / extended.clock_hz
    assert [(e["name"], e["ts"], e["dur"]) for e in marks] == [
        ("blocks.3 (extended)", 120 * us, 120 * us), ("blocks.4 (extended)", 240 * us, 120 * us)]
    last = max(e["ts"] + e["dur"] for e in events if e["ph"] == "X")
    assert last == pytest.approx(360 * 1e6 / extended.clock_hz)


def test_op_table_says_what_it_covers(extended):
    text = op_table(extended)
    assert "of which 120 simulated" in text
    assert "+ blocks.3-4 (2 layers, extended): 240 cycles (66.7% of the run)" in text


def test_json_round_trip_keeps_the_extension(extended):
    document = json.loads(json.dumps(to_json(extended)))
    assert document["extended"][0]["label"] == "blocks.3-4 (2 layers, extended)"
    assert document["critical_path"]["length_cycles"] == 360
    loaded = from_json(document)
    assert loaded.extended == extended.extended
    for report in (summary, critical_path_text, idle_text, op_table):
        assert report(loaded) == report(extended)


def test_compute_commands_take_their_uncontended_time(mm_result):
    """Per-command costs are each command's own (they were once read per cost kind, so
    most commands got another command's)."""
    commands = report_data(mm_result).commands
    assert any(c.kind in COMPUTE_KINDS for c in commands)
    for c in commands:
        if c.kind in COMPUTE_KINDS or c.kind == "host":
            assert c.uncontended_cycles == c.cycles, c
        else:
            assert c.uncontended_cycles <= c.cycles, c


def test_distinct_names_keep_distinct_labels():
    names = [f"model.layers.{i}.self_attn.q_proj:mm_{7 * i}" for i in range(12)]
    labels = distinct_labels(names, 28)
    assert len(set(labels.values())) == len(names)
    assert all(len(label) <= 28 for label in labels.values())
    assert labels["model.layers.11.self_attn.q_proj:mm_77"].endswith("q_proj:mm_77")
    # labels that would read alike are shown whole
    alike = ["blocks.0.attention.out", "blocks.1.attention.out"]  # differ in the middle
    assert shorten_middle(alike[0], 12) == shorten_middle(alike[1], 12)
    assert distinct_labels([*alike, "other"], 12) == {n: n for n in [*alike, "other"]}
    # a shortened label never reads like another whole name
    whole = shorten_middle("abcdefghijklmnop", 10)
    labels = distinct_labels(["abcdefghijklmnop", whole], 10)
    assert labels["abcdefghijklmnop"] == "abcdefghijklmnop"
    assert shorten_middle("short", 10) == "short"


def _table(text: str) -> list[str]:
    """The rows of the critical-path table and its folded line."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.strip().startswith("---"))
    rows = []
    for line in lines[rule + 1:]:
        if line.startswith("Across") or line.startswith("Path time"):
            break
        rows.append(line)
    return rows


def test_op_table_rows_of_long_module_paths_stay_distinct(chain_result):
    """Sources that share a long prefix (Hugging Face module paths) used to be cut from
    the end, so every row read ``model.layers.1.self_attn...``."""
    data = report_data(chain_result)
    prefix = "model.layers.1.self_attn.rotary_embedding"
    commands = tuple(dataclasses.replace(c, source=f"{prefix}:mul_{c.id}")
                     for c in data.commands)
    text = op_table(dataclasses.replace(data, commands=commands))
    rows = text.splitlines()[3:]
    names = [row.split()[0] for row in rows]
    assert len(names) == 3 and len(set(names)) == 3
    assert all(name.endswith(f":mul_{i}") for i, name in zip((0, 1, 2), sorted(names)))


def test_two_extensions_follow_each_other(extended):
    """Panels of a final matmul, then layers of a stack: each after the one before."""
    first = extended.extended[0]
    panels = dataclasses.replace(first, name="head:mm", unit="panel", units=1, cycles=120,
                                 start_cycle=360, busy_cycles=MappingProxyType(
                                     {e: b // 2 for e, b in ADDED.items()}))
    busy = {e: b + ADDED.get(e, 0) // 2 for e, b in extended.engine_busy_cycles.items()}
    data = dataclasses.replace(extended, total_cycles=480, extended=(first, panels),
                               run_busy_cycles=MappingProxyType(busy))
    path = critical_path(data)
    assert path.length_cycles == 480
    assert dict(path.cycles_by("kind")) == {"dma": 102 + 204 + 102, "vpu": 18 + 36 + 18}
    for t in engine_times(data):
        assert t.busy + t.contention + t.waiting + t.nothing_to_do == 480
        assert t.busy_including_contention == busy[t.engine]
    marks = [e for e in perfetto_trace(data)["traceEvents"] if e.get("cat") == "extended"]
    assert [e["name"] for e in marks] == ["blocks.3 (extended)", "blocks.4 (extended)",
                                          "head:mm panel 3 (extended)"]
