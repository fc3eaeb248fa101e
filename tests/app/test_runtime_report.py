"""``archsim run``'s report of the config's runtime (issue 27): a run called once pays a
dispatch and a launch per kernel the compiler made, shown apart from the hardware's
latency; a config whose runtime costs nothing shows nothing. atom's 1 GHz makes one us
1,000 cycles."""

from __future__ import annotations

from archsim.app.pipeline import run
from archsim.app.workload import Workload
from archsim.config import load_config
from reports import from_json, summary, to_json

LAUNCH, DISPATCH = 7_000, 3_000


def _config():
    return load_config("atom").with_overrides(
        {"runtime.kernel_launch_us": 7.0, "runtime.op_dispatch_us": 3.0})


def test_one_gemm_is_one_kernel_one_launch_one_dispatch():
    result = run(Workload.parse("gemm_64x64x64"), _config(), mode="performance")
    assert (result.kernels, result.runtime_overhead_cycles) == (1, LAUNCH + DISPATCH)
    line = next(x for x in summary(result).splitlines() if x.lstrip().startswith("runtime"))
    hardware_us = result.total_cycles / 1000
    assert "+10.00 us for 1 kernel launch + a dispatch" in line
    assert f"= {hardware_us + 10:.2f} us a call" in line


def test_extended_layers_count_their_kernels_and_json_keeps_them():
    whole = run(Workload.parse("gpt2", layers=4), _config(), mode="performance")
    first = run(Workload.parse("gpt2", layers=3), _config(), mode="performance")
    assert whole.layers is not None and whole.layers.simulated < whole.layers.total
    # a layer more adds a middle layer's kernels: the same number each time
    more = run(Workload.parse("gpt2", layers=5), _config(), mode="performance")
    assert more.kernels - whole.kernels == whole.kernels - first.kernels > 0
    assert whole.runtime_overhead_cycles == whole.kernels * LAUNCH + DISPATCH
    data = from_json(to_json(whole))
    assert (data.kernels, data.runtime_overhead_cycles) == \
        (whole.kernels, whole.runtime_overhead_cycles)


def test_no_runtime_no_line():
    result = run(Workload.parse("gemm_64x64x64"), "atom", mode="performance")
    assert result.kernels == 1 and result.runtime_overhead_cycles == 0
    assert not any(x.lstrip().startswith("runtime") for x in summary(result).splitlines())
