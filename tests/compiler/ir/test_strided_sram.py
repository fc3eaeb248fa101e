"""Strided SRAM views: a load into the interior of a bigger buffer (padding by
addressing) and a matmul operand that skips rows, printed, parsed, verified and run."""

from __future__ import annotations

import numpy as np
import pytest

from archsim.config import load_config
from archsim.errors import VerifyError
from archsim.simulator import Simulator
from compiler.emit import Emitter
from compiler.ir import DType, Load, MatMul, SramRef, Store
from compiler.ir.builder import ProgramBuilder
from compiler.ir.operands import EXACT_RUNS, DramRef, Slice
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


U8 = DType.u8


def test_a_strided_refs_bytes_are_its_rows_merged_where_they_touch() -> None:
    # 3 rows of 4 bytes, 10 apart: three runs; 4 apart: one run of 12; a last dim that
    # skips bytes, or more rows than EXACT_RUNS, is tracked by its span (first byte to
    # the end of the last)
    rows = SramRef("sram0", 100, (3, 4), U8, (10, 1))
    assert rows.runs() == rows.intervals() == [(100, 104), (110, 114), (120, 124)]
    assert rows.exact
    assert SramRef("sram0", 100, (3, 4), U8, (4, 1)).runs() == [(100, 112)]
    # leading dims in any order of strides: runs come sorted
    assert SramRef("sram0", 0, (2, 2, 3), U8, (1, 8, 1)).runs() == [(0, 4), (8, 12)]
    skipping = SramRef("sram0", 100, (3, 4), U8, (10, 2))
    assert skipping.runs() is None and not skipping.exact
    assert skipping.intervals() == [(100, skipping.end)] == [(100, 127)]
    many = SramRef("sram0", 0, (EXACT_RUNS + 1, 4), U8, (8, 1))
    assert many.runs() is None and many.intervals() == [(0, many.end)]
    assert SramRef("sram0", 0, (EXACT_RUNS, 4), U8, (8, 1)).exact
    dense = SramRef("sram0", 64, (3, 4), DType.f32)
    assert dense.runs() is None and dense.intervals() == [(64, 112)] and dense.exact


def _interleaved(rows: int) -> tuple[Emitter, list[int]]:
    """Two loads into the even and odd 4-byte halves of 8-byte rows of one buffer (a
    packed tile's blocks), on two engines, then a copy of the whole buffer."""
    em = Emitter("interleaved", TINY)
    em.tensor("w", (2 * rows, 4), U8, "in")
    em.tensor("y", (rows, 8), U8, "out")
    ids = [em.emit(f"core0.dma{i}", Load(DramRef("w", (Slice(i * rows, (i + 1) * rows),
                                                      Slice(0, 4))),
                                         SramRef("sram0", 4 * i, (rows, 4), U8, (8, 1))),
                   "k") for i in range(2)]
    ids.append(em.emit("core0.dma0", Store(SramRef("sram0", 0, (rows, 8), U8),
                                          DramRef("y", (Slice(0, rows), Slice(0, 8)))),
                       "k"))
    return em, ids


def test_loads_into_interleaved_rows_wait_for_nothing_but_readers_wait_for_both() -> None:
    em, (even, odd, store) = _interleaved(4)
    program = em.build()
    assert program.commands[odd].deps == ()  # disjoint bytes: no false write-after-write
    assert set(program.commands[store].deps) == {odd}  # dma0's queue orders the even one
    assert find_problems(program, TINY) == []  # and the verifier sees no race
    # rows beyond EXACT_RUNS: tracked by their spans, so the second load waits
    em, (even, odd, store) = _interleaved(EXACT_RUNS + 1)
    assert em.build().commands[odd].deps == (even,)


def test_the_verifier_still_finds_a_race_inside_a_run() -> None:
    # the odd load shifted by 2 bytes overlaps the even one's runs: unordered, a race
    b = ProgramBuilder("overlap")
    b.tensor("w", (8, 4), U8, "in")
    b.add("core0.dma0", Load(b.ref("w", (0, 4), (0, 4)),
                             SramRef("sram0", 0, (4, 4), U8, (8, 1))))
    b.add("core0.dma1", Load(b.ref("w", (4, 8), (0, 4)),
                             SramRef("sram0", 2, (4, 4), U8, (8, 1))))
    problems = find_problems(b.build(), TINY)
    assert len(problems) == 1 and "neither command waits for the other" in problems[0]


def test_the_verifier_checks_every_run_not_just_the_first_or_last() -> None:
    # three rows 16 bytes apart; the second load touches only the middle one's bytes
    b = ProgramBuilder("middle")
    b.tensor("w", (4, 4), U8, "in")
    b.add("core0.dma0", Load(b.ref("w", (0, 3), (0, 4)),
                             SramRef("sram0", 0, (3, 4), U8, (16, 1))))
    b.add("core0.dma1", Load(b.ref("w", (3, 4), (0, 4)), SramRef("sram0", 18, (1, 4), U8)))
    problems = find_problems(b.build(), TINY)
    assert len(problems) == 1 and "neither command waits for the other" in problems[0]
    # between the runs: no race
    b = ProgramBuilder("gap")
    b.tensor("w", (4, 4), U8, "in")
    b.add("core0.dma0", Load(b.ref("w", (0, 3), (0, 4)),
                             SramRef("sram0", 0, (3, 4), U8, (16, 1))))
    b.add("core0.dma1", Load(b.ref("w", (3, 4), (0, 4)), SramRef("sram0", 22, (1, 4), U8)))
    assert find_problems(b.build(), TINY) == []


def test_a_malformed_strided_ref_is_named_not_a_crash() -> None:
    b = ProgramBuilder("malformed")
    b.tensor("x", (1, 1), U8, "in")
    b.add("core0.dma0", Load(b.ref("x"), SramRef("sram0", 0, (), U8, (1,))))
    program = b.build()
    assert any("strides (1,) of u8[]: expected one non-negative stride per dimension" in p
               for p in find_problems(program, TINY))
    assert SramRef("sram0", 0, (), U8, ()).runs() is None
