"""Small hand-built programs several simulator tests share."""

from __future__ import annotations

from compiler.ir import DType, HostTransfer, Load, Program, SramRef, Store, Unary, UnaryKind
from compiler.ir.builder import ProgramBuilder

F32 = DType.f32


def copy_program() -> Program:
    """Host -> DRAM -> SRAM, exp, back: on tiny, host link 184 cycles each way (100
    latency + 20 DRAM latency + 256 B at 4 B/cycle), load and store 51, exp 66 (derived
    in ``test_simulator.py``)."""
    b = ProgramBuilder("copy")
    b.tensor("x", (8, 8), F32, "in")
    b.tensor("y", (8, 8), F32, "out")
    t0, t1 = SramRef("sram0", 0, (8, 8), F32), SramRef("sram0", 256, (8, 8), F32)
    up = b.add("hdma", HostTransfer(b.ref("x"), to_device=True), source="to_device")
    load = b.add("core0.dma0", Load(b.ref("x"), t0), [up], source="exp")
    exp = b.add("core0.vpu", Unary(UnaryKind.exp, t0, t1), [load], source="exp")
    store = b.add("core0.dma0", Store(t1, b.ref("y")), [exp], source="exp")
    b.add("hdma", HostTransfer(b.ref("y"), to_device=False), [store], source="to_host")
    return b.build()
