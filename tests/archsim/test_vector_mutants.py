"""The vector unit's time and FLOPs per op class, pinned where mutation testing found
them loose (``python benchmarks/mutation.py archsim/vector.py --only '*op_class*'
--only '*timing__mutmut*'``, run for the multiply-add): no test timed a divide, a
reduce, a cast or a copy, and only ratios pinned the FLOPs of an op that is not a
multiply-add. tiny: 4 lanes, a pipeline latency of 2 cycles, costs per element of 1
(elementwise, reduce, cast, copy), 2 (divide) and 4 (transcendental)."""

from __future__ import annotations

import pytest

from archsim.config import load_config
from archsim.simulator import Simulator
from compiler.ir.builder import ProgramBuilder
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.ir.ops import (Binary, BinaryKind, Cast, MulAdd, Reduce, ReduceKind, Transpose,
                             Unary, UnaryKind, VCopy)

TINY = load_config("tiny")


def _ref(i: int, shape: tuple[int, ...] = (16, 4), dtype: DType = DType.f32) -> SramRef:
    return SramRef("sram0", i * 1024, shape, dtype)


A, B, C = _ref(0), _ref(1), _ref(2)


@pytest.mark.parametrize("op, cycles, flops", [
    # 64 elements over 4 lanes: 16 steps x the class's cost, + 2 of latency
    (Binary(BinaryKind.add, A, B, C), 2 + 16, 64),
    (MulAdd(A, B, C, C), 2 + 16, 2 * 64),                      # a multiply and an add
    (Binary(BinaryKind.div, A, B, C), 2 + 16 * 2, 64),         # divide: 2 a step
    (Unary(UnaryKind.exp, A, C), 2 + 16 * 4, 64),              # transcendental: 4
    (Binary(BinaryKind.lt, A, B, _ref(2, dtype=DType.bool)), 2 + 16, 0),  # a comparison
    (Cast(A, _ref(2, dtype=DType.bf16)), 2 + 16, 0),
    (VCopy(A, C), 2 + 16, 0),
    (Transpose(A, _ref(2, (4, 16)), (1, 0)), 2 + 16, 0),
    # a reduction's tree: + ceil(log2(length)) steps over the reduced axis
    (Reduce(ReduceKind.sum, A, _ref(2, (16, 1)), 1), 2 + 16 + 2, 64),
    (Reduce(ReduceKind.sum, _ref(0, (16, 2)), _ref(2, (16, 1)), 1), 2 + 8 + 1, 32),
    (Reduce(ReduceKind.sum, _ref(0, (16, 1)), _ref(2, (16, 1)), 1), 2 + 4, 16),
], ids=["add", "muladd", "div", "exp", "lt", "cast", "copy", "transpose", "reduce-4",
        "reduce-2", "reduce-1"])
def test_a_vector_ops_cycles_and_flops(op, cycles: int, flops: int) -> None:
    b = ProgramBuilder("one")
    b.add("core0.vpu", op)
    result = Simulator(TINY).run(b.build())
    assert (result.total_cycles, result.flops) == (cycles, flops)


def test_a_multiply_add_by_a_scalar_multiplies_in_float32() -> None:
    # dst = acc + x * 0.1 in f32, as torch computes it (the scalar taken as an f32):
    # x * 0.1 in float64 and then rounded differs in the last bit for some elements
    import numpy as np
    import torch

    from compiler.ir.operands import DramRef, Scalar, Slice
    from compiler.ir.ops import Load, Store

    rng = np.random.default_rng(0)
    values = {name: rng.standard_normal((16, 4)).astype(np.float32) for name in "AX"}
    b = ProgramBuilder("muladd_scalar")
    for i, name in enumerate("AX"):
        b.tensor(name, (16, 4), DType.f32, "in")
        b.add(f"core0.dma{i}", Load(DramRef(name, (Slice(0, 16), Slice(0, 4))), _ref(i)))
    b.tensor("O", (16, 4), DType.f32, "out")
    b.add("core0.vpu", MulAdd(_ref(0), _ref(1), Scalar(0.1), _ref(2)), (0, 1))
    b.add("core0.dma0", Store(_ref(2), DramRef("O", (Slice(0, 16), Slice(0, 4)))), (2,))
    out = Simulator(TINY).run(b.build(), values).outputs["O"]
    a, x = torch.from_numpy(values["A"]), torch.from_numpy(values["X"])
    np.testing.assert_array_equal(out, (a + x * 0.1).numpy())
    wide = (values["X"].astype(np.float64) * 0.1).astype(np.float32)
    assert not np.array_equal(wide, (x * 0.1).numpy())  # the case tells them apart
