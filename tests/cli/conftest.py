"""Shared by the CLI and sweep tests: the smallest complete program."""

from __future__ import annotations

import pytest

from compiler.ir import DType, Load, SramRef, Store, Unary, UnaryKind
from compiler.ir.builder import ProgramBuilder
from compiler.ir.ops import Program


@pytest.fixture(scope="session")
def exp8() -> Program:
    """Load 8x8 f32 -> exp -> store, on core 0 (source op ``aten.exp``)."""
    b = ProgramBuilder("exp8")
    b.tensor("x", (8, 8), DType.f32, "in")
    b.tensor("y", (8, 8), DType.f32, "out")
    t0, t1 = SramRef("sram0", 0, (8, 8), DType.f32), SramRef("sram0", 256, (8, 8), DType.f32)
    load = b.add("core0.dma0", Load(b.ref("x"), t0), source="aten.exp")
    exp = b.add("core0.vpu", Unary(UnaryKind.exp, t0, t1), [load], source="aten.exp")
    b.add("core0.dma0", Store(t1, b.ref("y")), [exp], source="aten.exp")
    return b.build()
