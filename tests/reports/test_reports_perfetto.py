"""The Chrome trace-event JSON: schema-valid, every command once at the right time."""

from __future__ import annotations

import json

import jsonschema
import pytest

from reports.perfetto import export_perfetto, perfetto_trace, track_name

_ID = {"type": "integer", "minimum": 0}
_TS = {"type": "number", "minimum": 0}

# The subset of the trace-event format (Chrome "Trace Event Format" document) we
# write: metadata, complete events, flow start/finish and counters.
TRACE_SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"oneOf": [
            {"type": "object", "additionalProperties": False,
             "required": ["name", "ph", "pid", "tid", "args"],
             "properties": {
                 "name": {"enum": ["process_name", "process_sort_index", "thread_name",
                                   "thread_sort_index"]},
                 "ph": {"const": "M"}, "pid": _ID, "tid": _ID,
                 "args": {"type": "object", "minProperties": 1, "maxProperties": 1,
                          "properties": {"name": {"type": "string"},
                                         "sort_index": {"type": "integer"}}}}},
            {"type": "object", "additionalProperties": False,
             "required": ["name", "cat", "ph", "ts", "dur", "pid", "tid", "args"],
             "properties": {
                 "name": {"type": "string", "minLength": 1}, "cat": {"type": "string"},
                 "ph": {"const": "X"}, "ts": _TS, "dur": _TS, "pid": _ID, "tid": _ID,
                 "args": {"type": "object",
                          "required": ["command", "op", "source", "operands", "bytes"]}}},
            {"type": "object", "additionalProperties": False,
             "required": ["name", "cat", "ph", "id", "ts", "pid", "tid"],
             "properties": {
                 "name": {"type": "string"}, "cat": {"type": "string"},
                 "ph": {"enum": ["s", "f"]}, "bp": {"const": "e"}, "id": _ID, "ts": _TS,
                 "pid": _ID, "tid": _ID}},
            {"type": "object", "additionalProperties": False,  # the power counter tracks
             "required": ["name", "ph", "ts", "pid", "tid", "args"],
             "properties": {
                 "name": {"enum": ["power (W)", "power by component (W)"]},
                 "ph": {"const": "C"}, "ts": _TS, "pid": _ID, "tid": _ID,
                 "args": {"type": "object", "minProperties": 1,
                          "additionalProperties": {"type": "number", "minimum": 0}}}},
        ]}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
}


@pytest.fixture(scope="module", params=["mm", "chain", "contention"])
def result_and_trace(request, mm_result, chain_result, contention_result):
    result = {"mm": mm_result, "chain": chain_result, "contention": contention_result}[
        request.param]
    return result, perfetto_trace(result)


def test_trace_validates_against_the_schema(result_and_trace):
    _, trace = result_and_trace
    jsonschema.validate(trace, TRACE_SCHEMA)


def test_every_command_once_with_exact_times(result_and_trace):
    result, trace = result_and_trace
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sorted(e["args"]["command"] for e in slices) == [c.id for c in result.program.commands]
    us_per_cycle = 1e6 / result.config.clock_hz
    for e in slices:
        i = e["args"]["command"]
        assert e["ts"] == pytest.approx(result.starts[i] * us_per_cycle, abs=1e-9)
        assert e["dur"] == pytest.approx((result.ends[i] - result.starts[i]) * us_per_cycle,
                                         abs=1e-9)


def test_tracks_are_named_like_a_profiler(mm_result):
    trace = perfetto_trace(mm_result)
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert sorted(processes.values()) == ["chip", "core 0", "core 1", "power"]
    threads = {(processes[e["pid"]], e["args"]["name"]) for e in meta if e["name"] == "thread_name"}
    assert {("core 0", "neural DMA 0"), ("core 0", "neural DMA 1"),
            ("core 1", "neural engine mxu0"), ("core 1", "neural engine vector"),
            ("chip", "task DMA"), ("chip", "host DMA"), ("chip", "host")} <= threads
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    thread_of = {(e["pid"], e["tid"]): e["args"]["name"]
                 for e in meta if e["name"] == "thread_name"}
    for e in slices:
        assert thread_of[(e["pid"], e["tid"])] == track_name(e["args"]["engine"])


def test_flows_pair_up_for_cross_engine_dependencies(mm_result):
    trace = perfetto_trace(mm_result)
    commands = {c.id: c for c in mm_result.program.commands}
    expected = sum(1 for c in commands.values() for d in c.deps
                   if commands[d].engine != c.engine)
    starts = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "s"}
    finishes = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "f"}
    assert len(starts) == len(finishes) == expected
    assert starts.keys() == finishes.keys()
    for fid, s in starts.items():
        assert s["ts"] <= finishes[fid]["ts"]


def test_args_show_operands_and_bytes(chain_result):
    slices = [e for e in perfetto_trace(chain_result)["traceEvents"] if e["ph"] == "X"]
    load = next(e for e in slices if e["args"]["command"] == 0)
    assert load["args"]["bytes"] == 256
    assert "%x[0:8, 0:8]" in load["args"]["operands"]
    assert "sram0[0x000000] f32[8,8]" in load["args"]["operands"]


def test_export_writes_loadable_json(tmp_path, chain_result):
    path = tmp_path / "trace.json"
    export_perfetto(chain_result, path)
    loaded = json.loads(path.read_text())
    jsonschema.validate(loaded, TRACE_SCHEMA)
    assert loaded == json.loads(json.dumps(perfetto_trace(chain_result)))
