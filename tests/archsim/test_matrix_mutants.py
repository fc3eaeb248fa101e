"""The matrix engine's closed forms on hand-sized tiles, where a mutation run over
``archsim/matrix.py`` (``benchmarks/mutation.py``) found them unpinned: the dtype an
engine times a command at, narrow inputs packed into K, a command's FLOPs and the
error for an unknown dataflow. The `tiny` preset's array: 4 x 4, weight-stationary,
one weight buffer, so a fold streaming T rows takes 2R + C + T - 2 = 10 + T cycles."""

from __future__ import annotations

from dataclasses import replace

import pytest

from archsim.config import load_config
from archsim.matrix import MatrixEngine, fold_dims, matmul_cycles
from compiler.ir import DType, MatMul, SramRef

TINY = load_config("tiny").core.matrix
BF16_ARRAY = replace(TINY, input_dtype="bf16", f32_precision="high")
"""A 16-bit array that runs f32 matmuls as bf16x3."""


def command(m: int, k: int, n: int, dtype: DType) -> MatMul:
    return MatMul(SramRef("sram0", 0, (m, k), dtype), SramRef("sram0", 4096, (k, n), dtype),
                  SramRef("sram0", 8192, (m, n), DType.f32))


def test_an_engine_times_a_command_at_its_operands_dtype() -> None:
    engine = MatrixEngine("core0.mxu0", BF16_ARRAY)
    # one fold, 3 rows: 8 + 4 + 3 - 2 = 13 cycles; f32 operands take 3 passes
    assert engine.timing(command(3, 4, 4, DType.bf16)).fixed_cycles == 13
    assert engine.timing(command(3, 4, 4, DType.f32)).fixed_cycles == 39


def test_int8_inputs_pack_k_at_the_arrays_rate() -> None:
    # tiny's int8 rate is 2: K = 8 packs into the 4 rows of one fold (13 cycles);
    # in f32 it takes two folds (26)
    assert TINY.rates.i8 == 2
    engine = MatrixEngine("core0.mxu0", TINY)
    assert engine.timing(command(3, 8, 4, DType.i8)).fixed_cycles == 13
    assert engine.timing(command(3, 8, 4, DType.f32)).fixed_cycles == 26
    assert matmul_cycles(3, 8, 4, TINY, DType.u8) == 13  # u8 counts as int8


def test_a_commands_flops_are_two_per_multiply_accumulate() -> None:
    engine = MatrixEngine("core0.mxu0", TINY)
    assert engine.timing(command(3, 5, 7, DType.f32)).flops == 2 * 3 * 5 * 7


def test_an_unknown_dataflow_is_named() -> None:
    with pytest.raises(ValueError, match="unknown dataflow 'rs'"):
        fold_dims(1, 2, 3, "rs")
