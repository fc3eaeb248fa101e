"""The vector unit's multiply-add, ``dst = acc + a * b``: one instruction an element (an
elementwise op's time), two arithmetic operations (FLOPs and energy), and the numbers of
a multiply followed by an add (the product rounded to ``dst``'s dtype first). Chained,
the running sum stays in registers: only ``a`` and ``b`` cross the scratchpad."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from archsim.config import load_config
from archsim.energy import run_energy
from archsim.simulator import Simulator
from compiler.ir.builder import ProgramBuilder
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, Slice, SramRef
from compiler.ir.ops import Binary, BinaryKind, Load, MulAdd, Store

TINY = load_config("tiny")  # 4 lanes, vector latency 2


def _refs(dtype: DType = DType.f32) -> tuple[SramRef, ...]:
    size = 16 * 4 * dtype.itemsize
    return tuple(SramRef("sram0", i * size, (16, 4), dtype) for i in range(3))


def _one(op) -> object:
    b = ProgramBuilder("muladd")
    b.add("core0.vpu", op)
    return b.build()


@pytest.mark.parametrize("chained", [False, True])
def test_a_multiply_add_takes_an_elementwise_ops_time(chained: bool) -> None:
    acc, a, b = _refs()
    program = _one(MulAdd(acc, a, b, acc, chained))
    # 64 elements / 4 lanes x 1 cycle + latency 2, as one add; FLOPs: a multiply and
    # an add an element
    result = Simulator(TINY).run(program)
    assert result.total_cycles == 2 + 16
    assert result.flops == 2 * 64
    # through a 16 B/cycle scratchpad port: acc, a, b read and dst written (1,024 B) or,
    # chained, a and b only (512 B)
    narrow = TINY.with_overrides({"core.vector.sram_bandwidth_bytes_per_cycle": 16})
    assert Simulator(narrow).run(program).total_cycles == 2 + (512 if chained else 1024) // 16


def test_a_multiply_add_costs_a_multiply_and_an_adds_energy() -> None:
    acc, a, b = _refs()
    muladd = run_energy(Simulator(TINY).run(_one(MulAdd(acc, a, b, acc, True))))
    add = run_energy(Simulator(TINY).run(_one(Binary(BinaryKind.add, a, b, acc, True))))
    assert muladd.dynamic_j["vector"] == pytest.approx(2 * add.dynamic_j["vector"], rel=1e-12)


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16])
def test_a_multiply_add_rounds_as_a_multiply_then_an_add(dtype: DType) -> None:
    rng = np.random.default_rng(0)
    values = {name: rng.standard_normal((16, 4)).astype(np.float32) for name in "ABC"}
    b = ProgramBuilder("muladd_numbers")
    refs = _refs(dtype)
    for name, ref in zip("ABC", refs):
        b.tensor(name, (16, 4), dtype, "in")
        b.add("core0.dma0", Load(DramRef(name, (Slice(0, 16), Slice(0, 4))), ref))
    b.tensor("O", (16, 4), dtype, "out")
    b.tensor("P", (16, 4), dtype, "out")
    acc, x, w = refs
    product = SramRef("sram0", 3 * acc.nbytes, (16, 4), dtype)
    total = SramRef("sram0", 4 * acc.nbytes, (16, 4), dtype)
    b.add("core0.vpu", MulAdd(acc, x, w, total), (0, 1, 2))
    b.add("core0.vpu", Binary(BinaryKind.mul, x, w, product), (0, 1, 2))
    b.add("core0.vpu", Binary(BinaryKind.add, acc, product, product), (4,))
    b.add("core0.dma1", Store(total, DramRef("O", (Slice(0, 16), Slice(0, 4)))), (3,))
    b.add("core0.dma1", Store(product, DramRef("P", (Slice(0, 16), Slice(0, 4)))), (5,))
    result = Simulator(TINY).run(b.build(), values)
    np.testing.assert_array_equal(result.outputs["O"], result.outputs["P"])
    # torch's: the product rounded to the dtype, then the sum
    kind = torch.bfloat16 if dtype is DType.bf16 else torch.float32
    a, x, w = (torch.from_numpy(values[name]).to(kind) for name in "ABC")
    np.testing.assert_array_equal(result.outputs["O"], (a + x * w).float().numpy())
