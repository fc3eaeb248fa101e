"""Strided SRAM views: a load into the interior of a bigger buffer (padding by
addressing) and a matmul operand that skips rows, printed, parsed, verified and run."""

from __future__ import annotations

import numpy as np
import pytest

from archsim.config import load_config
from archsim.errors import VerifyError
from archsim.simulator import Simulator
from compiler.ir import DType, Load, MatMul, SramRef, Store
from compiler.ir.builder import ProgramBuilder
from compiler.ir.text import print_program, parse_program
from compiler.ir.verify import find_problems, verify

F32 = DType.f32
TINY = load_config("tiny")


def padded_matmul_program():
    """x [4, 6] lands inside a zeroed [6, 8] buffer (one row and column of border); the
    matmul reads rows 1 and 3 of it (a [2, 8] view with a row stride of 16) times w."""
    b = ProgramBuilder("strided")
    b.tensor("x", (4, 6), F32, "in")
    b.tensor("zeros", (6, 8), F32, "in")
    b.tensor("w", (8, 3), F32, "in")
    b.tensor("y", (2, 3), F32, "out")
    buf = SramRef("sram0", 0, (6, 8), F32)
    fill = b.add("core0.dma0", Load(b.ref("zeros"), buf))
    interior = SramRef("sram0", (8 + 1) * 4, (4, 6), F32, (8, 1))
    load = b.add("core0.dma0", Load(b.ref("x"), interior), [fill])
    w = SramRef("sram0", 256, (8, 3), F32)
    load_w = b.add("core0.dma1", Load(b.ref("w"), w))
    rows = SramRef("sram0", 8 * 4, (2, 8), F32, (16, 1))
    out = SramRef("sram0", 512, (2, 3), F32)
    mm = b.add("core0.mxu0", MatMul(rows, w, out), [load, load_w])
    b.add("core0.dma1", Store(out, b.ref("y")), [mm])
    return b.build()


def test_runs_like_numpy_and_round_trips_as_text() -> None:
    program = padded_matmul_program()
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 6), np.float32), rng.standard_normal((8, 3), np.float32)
    result = Simulator(TINY).run(program, {"x": x, "zeros": np.zeros((6, 8), np.float32),
                                           "w": w})
    padded = np.zeros((6, 8), np.float32)
    padded[1:5, 1:7] = x
    np.testing.assert_allclose(result.outputs["y"], padded[[1, 3]] @ w, rtol=1e-5)
    text = print_program(program)
    assert "sram0[0x000024] f32[4,6] strides=(8,1)" in text
    assert parse_program(text) == program


def test_footprint_is_the_span_and_bad_strides_are_named() -> None:
    assert SramRef("sram0", 36, (4, 6), F32, (8, 1)).end == 36 + (3 * 8 + 5 + 1) * 4
    verify(padded_matmul_program(), TINY)
    b = ProgramBuilder("bad")
    b.tensor("x", (4, 6), F32, "in")
    b.add("core0.dma0", Load(b.ref("x"), SramRef("sram0", 0, (4, 6), F32, (8,))))
    with pytest.raises(VerifyError, match=r"strides \(8,\) of f32\[4,6\]: expected one "
                                          r"non-negative stride per dimension"):
        verify(b.build(), TINY)
    big = TINY.core.scratchpad.size_bytes // 4
    b = ProgramBuilder("too far")
    b.tensor("x", (2, 2), F32, "in")
    b.add("core0.dma0", Load(b.ref("x"), SramRef("sram0", 0, (2, 2), F32, (big, 1))))
    assert any("exceeds sram0 capacity" in p for p in find_problems(b.build(), TINY))
