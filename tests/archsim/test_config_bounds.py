"""Bad numbers never reach the simulator: config fields have physical bounds (absurd,
non-finite or tiny values refused, every problem named at once), runs past 2**62 cycles
and functional runs larger than host memory are named errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from archsim.cli.main import main
from archsim.config import bounds, load_config
from archsim.errors import ConfigError

CASES = {
    "core.matrix.rows": (2 ** 62, "core.matrix.rows: 4.61e+18 is outside 1..65,536 "
                                  "(up to 65,536 PEs per side)"),
    "core.matrix.arrays": (10 ** 9, "core.matrix.arrays: 1000000000 is outside 1..4,096 "
                                    "(up to 4,096 arrays per core)"),
    "cores": (10 ** 308, "cores: 1e+308 is outside 1..1,048,576 "
                         "(up to a million cores per chip)"),
    "dram.latency_cycles": (10 ** 300, "dram.latency_cycles: 1e+300 is outside 0..1e+09 "
                                                    "(up to a second at 1 GHz)"),
    "dram.channel_bandwidth_gb_per_s": (1e-300, "dram.channel_bandwidth_gb_per_s: 1e-300 is "
                                                "outside 0.001..1e+07 (1 MB/s to 10 PB/s)"),
}


@pytest.mark.parametrize("field", sorted(CASES))
def test_out_of_range_values_are_refused_with_field_value_and_range(field: str) -> None:
    value, message = CASES[field]
    with pytest.raises(ConfigError) as info:
        load_config("tiny").with_overrides({field: value})
    assert message in str(info.value)


def test_non_finite_numbers_are_refused() -> None:
    for value in (math.nan, math.inf):
        with pytest.raises(ConfigError, match="dram.channel_bandwidth_gb_per_s: must be a "
                                              "finite number"):
            load_config("tiny").with_overrides({"dram.channel_bandwidth_gb_per_s": value})


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        load_config("tiny").with_overrides({"core.matrix.rows": 2 ** 62,
                                            "core.vector.lanes": float("nan")})
    assert "2 problems" in str(info.value)


def test_every_preset_is_within_bounds_and_the_cli_explains_them(capsys) -> None:
    for name in ("atom", "tpu-v3", "tpu-v4", "ascend-910b", "edge", "tiny"):
        load_config(name)
    assert main(["configs", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "rows                             1..65,536" in out
    # and the fields that take one of a set of values, each with its values
    assert "runtime.kernel_order             overlapped | serial" in out
    assert "core.matrix.dataflow             ws | os | is" in out
    assert "core.matrix.input_dtype          f32 | f16 | bf16 | i8" in out



def test_a_zero_scratchpad_is_out_of_bounds_and_only_shared_sram_may_be_absent() -> None:
    """Every core computes in its scratchpad, so 0 bytes is no chip; a chip without
    shared SRAM is (tpu-v3, edge). The bounds table says so, as `--explain` prints it."""
    assert bounds.check("core.scratchpad.size_bytes", 0) == (
        "core.scratchpad.size_bytes: 0 is outside 1..2**50 (up to 1 PiB)")
    assert bounds.check("shared_sram.size_bytes", 0) is None
    assert bounds.check("shared_sram.size_bytes", 2 ** 51) == (
        "shared_sram.size_bytes: 2.25e+15 is outside 0..2**50 (none, or up to 1 PiB)")
    with pytest.raises(ConfigError, match=r"core\.scratchpad\.size_bytes: must be > 0, got 0"):
        load_config("tiny").with_overrides({"core.scratchpad.size_bytes": 0})
    assert load_config("tiny").with_overrides({"shared_sram.size_bytes": 0}) \
        .shared_sram.size_bytes == 0
    rows = {line.split()[0]: line.split()[1] for line in bounds.explain().splitlines()[1:-1]}
    assert (rows["shared_sram.size_bytes"], rows["size_bytes"]) == ("0..2**50", "1..2**50")

def test_the_cli_answers_a_nan_override_in_one_line(capsys) -> None:
    code = main(["run", "gemm", "--seq", "32", "-c", "tiny", "--set",
                 "dram.channel_bandwidth_gb_per_s=nan"])
    err = capsys.readouterr().err
    assert code != 0 and err.startswith("archsim: error:") and "finite" in err


def test_a_run_past_2_to_the_62_cycles_is_a_simulation_error() -> None:
    from archsim.errors import SimulationError
    from archsim.simulator import Simulator
    from compiler.ir.text import parse_program

    lines = ["program p", "dram %X : f32[4,8] inout", "dram %Y : f32[4,8] out"]
    for i in range(12):  # 12 x (10**18 - 1) cycles overflow int64
        after = f" after {i - 1}" if i else ""
        lines.append(f" {i}: host host_op aten.neg.default (%X) -> (%Y) "
                     f"cycles=999999999999999999{after}")
    with pytest.raises(SimulationError, match=r"ends at cycle 1.2e\+19, past the 4.61e\+18 "
                                              r"cycles \(2\*\*62\)"):
        Simulator(load_config("tiny")).run(parse_program("\n".join(lines) + "\n"))


def test_a_functional_run_larger_than_host_memory_is_refused_before_allocating(
        monkeypatch) -> None:
    from archsim.errors import HostMemoryError
    from archsim.simulator import Simulator
    from compiler.ir.text import parse_program

    program = parse_program("program big\ndram %X : f32[1024,1024] in\n"
                            "dram %Y : f32[1024,1024] out\n"
                            " 0: host host_op aten.neg.default (%X) -> (%Y) cycles=10\n")
    monkeypatch.setenv("ARCHSIM_HOST_MEMORY_BYTES", str(4 << 20))  # two 4 MiB tensors
    with pytest.raises(HostMemoryError, match=r"needs 8.0 MiB .* largest tensor %X "
                                              r"f32\[1024, 1024\] = 4.0 MiB"):
        Simulator(load_config("tiny")).run(program, {"X": np.zeros((1024, 1024), np.float32)})
    # performance-only allocates nothing and runs
    assert Simulator(load_config("tiny")).run(program).total_cycles == 10  # the host op
