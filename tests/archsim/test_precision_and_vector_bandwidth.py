"""The f32 matmul precision policy and the vector unit's scratchpad-bandwidth bound,
on `tiny` (vector: 4 lanes, latency 2; elementwise 1 cycle/element/lane), every number
derived by hand."""

from __future__ import annotations

import pytest

from archsim.config import load_config
from archsim.errors import ConfigError
from archsim.matrix import matmul_cycles
from archsim.simulator import Simulator
from compiler.ir import Binary, BinaryKind, DType, MatMul, SramRef
from compiler.ir.builder import ProgramBuilder

TINY = load_config("tiny")
BF16_ARRAY = TINY.with_overrides({"core.matrix.input_dtype": "bf16"})
FOLD = 8 + 4 + 4 - 2  # one fold of a 4x4 tile on the 4x4 array: 2R + C + T - 2


@pytest.mark.parametrize(("precision", "passes"), [("default", 1), ("high", 3),
                                                   ("highest", 6)])
def test_f32_precision_sets_the_bf16_passes(precision: str, passes: int) -> None:
    matrix = BF16_ARRAY.with_overrides({"core.matrix.f32_precision": precision}).core.matrix
    assert matrix.f32_passes == passes
    assert matmul_cycles(4, 4, 4, matrix, DType.f32) == passes * FOLD
    assert matmul_cycles(4, 4, 4, matrix, DType.bf16) == FOLD


def test_precision_is_ignored_on_an_f32_array() -> None:
    matrix = TINY.with_overrides({"core.matrix.f32_precision": "highest"}).core.matrix
    assert matmul_cycles(4, 4, 4, matrix, DType.f32) == FOLD


def test_tpu_presets_default_to_xla_default_precision() -> None:
    for name in ("tpu-v3", "tpu-v4"):
        assert load_config(name).core.matrix.f32_precision == "default"


def test_an_unknown_precision_is_named() -> None:
    with pytest.raises(ConfigError, match=r"core\.matrix\.f32_precision: 'bf16x9' is not one "
                                          r"of default, high, highest"):
        TINY.with_overrides({"core.matrix.f32_precision": "bf16x9"})


def test_simulated_f32_matmul_follows_the_policy() -> None:
    b = ProgramBuilder("mm")
    a, w, out = (SramRef("sram0", off, (4, 4), DType.f32) for off in (0, 64, 128))
    b.add("core0.mxu0", MatMul(a, w, out))
    program = b.build()
    for precision, passes in (("default", 1), ("highest", 6)):
        config = BF16_ARRAY.with_overrides({"core.matrix.f32_precision": precision})
        assert Simulator(config).run(program).total_cycles == passes * FOLD


def _add_16x4() -> object:
    b = ProgramBuilder("add")
    x, y, z = (SramRef("sram0", off, (16, 4), DType.f32) for off in (0, 256, 512))
    b.add("core0.vpu", Binary(BinaryKind.add, x, y, z))
    return b.build()


def test_vector_ops_are_compute_bound_without_a_scratchpad_bandwidth() -> None:
    # 64 elements / 4 lanes * 1 cycle + latency 2
    assert Simulator(TINY).run(_add_16x4()).total_cycles == 2 + 16


def test_vector_ops_stream_their_operands_through_the_scratchpad() -> None:
    # reads 2 x 256 B and writes 256 B: 768 B / 16 B per cycle = 48 > 16 compute cycles
    config = TINY.with_overrides({"core.vector.sram_bandwidth_bytes_per_cycle": 16})
    assert Simulator(config).run(_add_16x4()).total_cycles == 2 + 48
    # a wide enough port leaves the op compute-bound again
    wide = TINY.with_overrides({"core.vector.sram_bandwidth_bytes_per_cycle": 1024})
    assert Simulator(wide).run(_add_16x4()).total_cycles == 2 + 16


def test_scratchpad_bandwidth_must_be_positive() -> None:
    with pytest.raises(ConfigError, match=r"core\.vector\.sram_bandwidth_bytes_per_cycle: "
                                          r"must be > 0, got 0"):
        TINY.with_overrides({"core.vector.sram_bandwidth_bytes_per_cycle": 0})
