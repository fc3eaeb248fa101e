"""The single-file HTML report and the JSON round trip."""

from __future__ import annotations

import base64
import json
import re

import pytest

from reports.ops import op_rows
from reports.critical_path import critical_path, engine_times
from reports.data import report_data
from reports.figures import FIGURES
from reports.html import SECTIONS, html_report, write_html
from reports.json_report import from_json, read_json, to_json, write_json
from reports.ops import op_table
from reports.perfetto import perfetto_trace
from reports.summary import summary


@pytest.fixture(scope="module")
def page(mm_result) -> str:
    return html_report(mm_result)


def test_html_has_every_section(page):
    for sid, title in SECTIONS:
        assert f'<section id="{sid}"><h2>{title}</h2>' in page
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")


def test_html_embeds_every_figure_as_png(page):
    images = re.findall(r'<figure id="figure-(\w+)"><img alt="\w+" '
                        r'src="data:image/png;base64,([^"]+)"', page)
    assert sorted(name for name, _ in images) == sorted([*FIGURES, "power"])
    for _, data in images:
        assert base64.b64decode(data)[:4] == b"\x89PNG"
    assert "http://" not in page and "https://" not in page  # single file, no assets


def test_html_contains_the_text_reports(page, mm_result):
    assert "Host work: 2 commands" in page
    assert "Ops by time" in page and "aten._softmax" in page
    assert "Critical path:" in page and "nothing to do" in page


def test_write_html(tmp_path, chain_result):
    path = tmp_path / "report.html"
    write_html(chain_result, path)
    assert "chain on tiny" in path.read_text()


def test_json_round_trip(mm_result):
    document = json.loads(json.dumps(to_json(mm_result)))
    data = from_json(document)
    assert data == report_data(mm_result)
    assert summary(data) == summary(mm_result)
    assert op_table(data, sort="bytes") == op_table(mm_result, sort="bytes")
    assert critical_path(data) == critical_path(mm_result)
    assert perfetto_trace(data) == perfetto_trace(mm_result)


def test_json_has_the_numbers_machines_need(mm_result):
    document = to_json(mm_result)
    run = document["run"]
    assert run["total_cycles"] == mm_result.total_cycles
    assert run["achieved_flops"] == pytest.approx(mm_result.achieved_flops)
    assert run["dram_bytes_read"] == mm_result.dram_bytes_read
    engines = dict(zip(document["engines"]["names"], document["engines"]["busy_cycles"]))
    assert {e: b for e, b in engines.items() if b} == dict(mm_result.engine_busy_cycles)
    assert document["trace"]["start"] == mm_result.starts.tolist()
    assert document["trace"]["end"] == mm_result.ends.tolist()
    # in the default order: share of the critical path, then span
    assert [o["source"] for o in document["ops"]] == [r.source for r in op_rows(mm_result)]
    assert sorted(o["source"] for o in document["ops"]) == ["aten._softmax", "aten.argmax",
                                                            "aten.mm", "input.copy_"]
    assert document["critical_path"]["length_cycles"] == mm_result.total_cycles
    assert len(document["engine_time"]) == len(engine_times(mm_result))


def test_json_files(tmp_path, chain_result):
    path = tmp_path / "result.json"
    write_json(chain_result, path)
    assert read_json(path) == report_data(chain_result)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(format="other"), "not an archsim report: format is 'other'"),
    (lambda d: d.update(version=99), "archsim report version 99 is not supported"),
    (lambda d: d["run"].pop("clock_hz"), "run.clock_hz: missing"),
    (lambda d: d["trace"]["start"].pop(), "trace columns have different lengths"),
])
def test_from_json_rejects_bad_documents(chain_result, change, message):
    document = json.loads(json.dumps(to_json(chain_result)))
    change(document)
    with pytest.raises(ValueError, match=re.escape(message)):
        from_json(document)


def test_user_names_cannot_inject_script_into_reports(tmp_path) -> None:
    """An op's source name comes from the user's model (or a .rbln comment): the HTML
    report escapes it and the Perfetto trace keeps it as plain JSON text."""
    from archsim.config import load_config
    from archsim.simulator import Simulator
    from compiler.ir.text import parse_program
    from reports.html import write_html
    from reports.perfetto import export_perfetto

    evil = "</script><script>alert(1)</script>"
    program = parse_program(
        "program p\ndram %X : f32[4,8] inout\ndram %Y : f32[4,8] out\n"
        f" 0: host host_op aten.neg.default (%X) -> (%Y) cycles=100  # {evil}\n")
    result = Simulator(load_config("tiny")).run(program)
    write_html(result, tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text()
    assert "alert(1)" in page and evil not in page and "<script>alert" not in page
    export_perfetto(result, tmp_path / "trace.json")
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert any(evil in json.dumps(e.get("args", {})) + str(e.get("name")) for e in events)


def test_a_partly_simulated_stack_keeps_its_busy_cycles_through_json(tmp_path):
    """Utilization of an extended run is the whole stack's busy time over its latency,
    in the text and after a JSON round trip (not the trace's busy time)."""
    import torch

    import archsim
    from reports.data import report_data
    from reports.json_report import read_json, write_json

    class Stack(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(6)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.blocks(x)

    model = Stack()
    result = archsim.estimate(model, torch.empty(16, 32, device="meta"), "tiny")
    assert result.layers is not None
    data = report_data(result)
    assert data.layers == result.layers.describe()
    for engine, busy in result.engine_busy_cycles.items():
        assert data.engine_busy_cycles[engine] == busy
    path = tmp_path / "r.json"
    write_json(result, path)
    loaded = read_json(path)
    assert loaded.layers == data.layers
    assert dict(loaded.engine_busy_cycles) == dict(data.engine_busy_cycles)
    assert loaded.utilization == data.utilization


def test_a_sustained_dram_rate_is_reported_and_kept_through_json():
    from archsim.config import load_config
    from archsim.simulator import Simulator
    from compiler.ir import DType, Load, SramRef
    from compiler.ir.builder import ProgramBuilder

    b = ProgramBuilder("load")
    b.tensor("x", (8, 8), DType.f32, "in")
    b.add("core0.dma0", Load(b.ref("x"), SramRef("sram0", 0, (8, 8), DType.f32)))
    program = b.build()
    config = load_config("tiny").with_overrides({"dram.efficiency": 0.5})
    data = from_json(json.loads(json.dumps(to_json(Simulator(config).run(program)))))
    assert data.dram_efficiency == 0.5
    # tiny's pins: 16 B/cycle at 1 GHz; half of it sustained
    assert "of 16.0 GB/s peak, 8.00 GB/s sustained (" in summary(data)
    assert "sustained" not in summary(Simulator(load_config("tiny")).run(program))
