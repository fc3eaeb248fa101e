"""Double-buffered weights on a weight-stationary array (``matrix.weight_buffers: 2``):
each fold costs max(T, R) and the fill and drain (2R + C - 2) are paid once per matmul,
and not at all by a matmul that starts the cycle the previous one on its array ends.
On ``tiny`` (one 4x4 array per core, f32): hand-derived cycles."""

from __future__ import annotations

from archsim.config import load_config
from archsim.matrix import matmul_cycles
from archsim.simulator import Simulator
from compiler.ir import DType, MatMul, SramRef, Unary, UnaryKind
from compiler.ir.builder import ProgramBuilder

F32 = DType.f32
SINGLE = load_config("tiny")
DOUBLE = SINGLE.with_overrides({"core.matrix.weight_buffers": 2})
EDGE = 2 * 4 + 4 - 2  # fill and drain of the 4x4 array


def test_folds_stream_back_to_back_within_a_matmul() -> None:
    # m=6, k=8, n=8 on 4x4, ws: 2 x 2 folds of T=6
    assert matmul_cycles(6, 8, 8, SINGLE.core.matrix) == 4 * (EDGE + 6)
    assert matmul_cycles(6, 8, 8, DOUBLE.core.matrix) == 4 * 6 + EDGE
    # a fold shorter than the array's rows waits for the next weights: max(T, R)
    assert matmul_cycles(2, 8, 8, DOUBLE.core.matrix) == 4 * 4 + EDGE
    # only weight-stationary arrays hold weights
    os_double = DOUBLE.with_overrides({"core.matrix.dataflow": "os"}).core.matrix
    assert matmul_cycles(6, 8, 8, os_double) == matmul_cycles(
        6, 8, 8, SINGLE.with_overrides({"core.matrix.dataflow": "os"}).core.matrix)


def _two_matmuls(gap: bool):
    b = ProgramBuilder("two")
    a, w = SramRef("sram0", 0, (6, 4), F32), SramRef("sram0", 256, (4, 4), F32)
    out1, out2 = SramRef("sram0", 512, (6, 4), F32), SramRef("sram0", 768, (6, 4), F32)
    deps = []
    if gap:  # the second matmul waits for a vector op that ends after the first one
        slow = b.add("core0.vpu", Unary(UnaryKind.exp, SramRef("sram0", 1024, (8, 16), F32),
                                        SramRef("sram0", 2048, (8, 16), F32)))
        deps = [slow]
    b.add("core0.mxu0", MatMul(a, w, out1))
    b.add("core0.mxu0", MatMul(a, w, out2), deps)
    return b.build()


def test_a_matmul_right_behind_another_skips_its_fill_and_drain() -> None:
    one = 6 + EDGE  # one fold of T=6
    trace = Simulator(DOUBLE).run(_two_matmuls(gap=False)).trace
    assert [(e.start, e.end) for e in trace] == [(0, one), (one, one + 6)]
    single = Simulator(SINGLE).run(_two_matmuls(gap=False)).trace
    assert [(e.start, e.end) for e in single] == [(0, one), (one, 2 * one)]
    # exp of 128 elements on 4 lanes: 2 + 32 x exp's cost; the matmul waits past `one`
    gapped = [e for e in Simulator(DOUBLE).run(_two_matmuls(gap=True)).trace
              if e.engine == "core0.mxu0"]
    assert gapped[0].end == one and gapped[1].start > one
    assert gapped[1].end - gapped[1].start == one  # a gap: fill and drain again
