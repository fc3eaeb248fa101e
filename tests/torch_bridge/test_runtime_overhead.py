"""The runtime's launch and dispatch cost on the npu device (issue 27): each call issued
from Python pays one dispatch (``runtime.op_dispatch_us``) and one launch per kernel it
runs (``runtime.kernel_launch_us``), as a ``runtime`` event of its own before the call's
device work; with the runtime zeroed nothing is recorded and the hardware time is what
it was. Costs are chosen so cycles are exact on atom (1 GHz: 1 us = 1,000 cycles)."""

from __future__ import annotations

import pytest
import torch

import torch_bridge
from archsim.config import load_config
from torch_bridge import runtime

LAUNCH_US, DISPATCH_US = 7.0, 3.0
LAUNCH, DISPATCH = 7_000, 3_000  # cycles at atom's 1 GHz


@pytest.fixture
def overhead():
    config = load_config("atom").with_overrides(
        {"runtime.kernel_launch_us": LAUNCH_US, "runtime.op_dispatch_us": DISPATCH_US})
    assert config.clock_hz == 1_000_000_000
    with runtime.use_config(config):
        yield config


def _session(fn) -> torch_bridge.profiler.ProfileResult:
    with torch_bridge.profile() as prof:
        fn()
    return prof.result


def _device_inputs():
    return torch.randn(32, 48).to("npu"), torch.randn(48, 16).to("npu")


def test_each_eager_op_pays_one_dispatch_and_one_launch(overhead):
    a, b = _device_inputs()
    session = _session(lambda: (a @ b).relu())
    launches = [e.event for e in session.events if e.event.kind == "runtime"]
    assert [(e.op, e.cycles) for e in launches] == [
        ("aten.mm", LAUNCH + DISPATCH), ("aten.relu", LAUNCH + DISPATCH)]
    # each launch sits right before its op's device work, nothing overlaps
    kinds = [e.event.kind for e in session.events]
    assert kinds == ["runtime", "device", "runtime", "device"]
    assert session.runtime_cycles == 2 * (LAUNCH + DISPATCH)
    assert session.total_cycles == session.device_cycles + session.runtime_cycles


def test_a_compiled_graph_pays_one_dispatch_and_a_launch_per_kernel(overhead):
    a, b = _device_inputs()
    c = torch.randn(16, 8).to("npu")
    # two matmuls are two kernels (the compiler fuses elementwise epilogues into a
    # matmul's kernel, never two matmuls): relu rides on the first, + 1 on the second
    f = torch.compile(lambda x, y, z: ((x @ y).relu() @ z) + 1.0, backend="archsim")
    f(a, b, c)  # compile outside the session
    session = _session(lambda: f(a, b, c))
    (launch,) = [e.event for e in session.events if e.event.kind == "runtime"]
    assert launch.cycles == 2 * LAUNCH + DISPATCH
    # eager, the same work is four calls of one kernel each
    eager = _session(lambda: ((a @ b).relu() @ c) + 1.0)
    assert eager.runtime_cycles == 4 * (LAUNCH + DISPATCH)


def test_device_memory_ops_pay_their_launch(overhead):
    a, _ = _device_inputs()
    session = _session(lambda: a.zero_())
    assert [(e.event.op, e.event.kind, e.event.cycles) for e in session.events][0] == \
        ("aten.zero_", "runtime", LAUNCH + DISPATCH)


def test_zero_runtime_records_nothing_and_keeps_hardware_time():
    a, b = _device_inputs()
    with runtime.use_config("atom"):
        bare = _session(lambda: (a @ b).relu())
    config = load_config("atom").with_overrides(
        {"runtime.kernel_launch_us": LAUNCH_US, "runtime.op_dispatch_us": DISPATCH_US})
    with runtime.use_config(config):
        paid = _session(lambda: (a @ b).relu())
    assert bare.runtime_cycles == 0
    assert all(e.event.kind != "runtime" for e in bare.events)
    assert paid.device_cycles == bare.device_cycles
    assert paid.total_cycles - bare.total_cycles == 2 * (LAUNCH + DISPATCH)


def test_reports_show_the_runtime_overhead(overhead):
    a, b = _device_inputs()
    with torch_bridge.profile() as prof:
        (a @ b).relu()
    summary = prof.summary()
    line = next(x for x in summary.splitlines() if x.lstrip().startswith("runtime"))
    assert "20,000 cycles" in line and "runtime overhead: 2 calls at 3 us dispatch + 7 us" \
        in line
    assert "runtime us" in prof.table()
    rows = {r.name: r for r in prof.result.ops}
    assert (rows["aten.mm"].calls, rows["aten.mm"].runtime_cycles) == (1, LAUNCH + DISPATCH)
    trace = torch_bridge.profile_report.perfetto_trace(prof.result)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert "runtime overhead" in names
    slices = [e for e in trace["traceEvents"] if e.get("cat") == "runtime"]
    assert [s["dur"] for s in slices] == [10.0, 10.0]  # us at 1 GHz
