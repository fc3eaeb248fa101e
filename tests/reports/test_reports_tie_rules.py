"""The critical path's tie rules and which dependency an idle engine waited on, on
hand-built tiny programs with exact cycles.

tiny: a 256 B load alone costs 35 fixed + 256 / 16 = 51 cycles; two at once on core0's
two DMA engines share the 16 B/cycle DRAM channel at 8 each: 35 + 32 = 67, both; an
8x8 f32 vector op costs 2 + 64 / 4 lanes = 18; an 8x8x8 ws matmul on the 4x4 array
(2*4 + 4 + 8 - 2) * 2 * 2 = 72.
"""

from __future__ import annotations

from archsim.config import load_config
from archsim.simulator import Simulator
from compiler.ir import Binary, BinaryKind, DType, Load, MatMul, SramRef, Unary, UnaryKind
from compiler.ir.builder import ProgramBuilder
from reports.critical_path import critical_path, engine_times

F32 = DType.f32
TINY = load_config("tiny")


def tile(offset: int, shape: tuple[int, ...], space: str = "sram0") -> SramRef:
    return SramRef(space, offset, shape, F32)


def test_ties_go_to_the_later_command_in_program_order() -> None:
    """0: core1.vpu neg of 4x83 = 332 elements: 2 + 83 = 85 cycles, 0-85.
    1, 2: two 256 B loads on core0.dma0 and core0.dma1, sharing DRAM: both 0-67.
    3: core0.vpu add of the two, after 1 and 2: 67-85.
    Two commands end last (0 and 3, at 85): the path ends at the later one, 3. Its
    two dependencies end together (67): the path goes through the later one, 2."""
    b = ProgramBuilder("ties")
    b.tensor("x", (8, 8), F32, "in")
    b.add("core1.vpu", Unary(UnaryKind.neg, tile(0, (4, 83), "sram1"),
                             tile(0x1000, (4, 83), "sram1")))
    first = b.add("core0.dma0", Load(b.ref("x"), tile(0, (8, 8))))
    second = b.add("core0.dma1", Load(b.ref("x"), tile(0x100, (8, 8))))
    b.add("core0.vpu", Binary(BinaryKind.add, tile(0, (8, 8)), tile(0x100, (8, 8)),
                              tile(0x200, (8, 8))), [first, second])
    result = Simulator(TINY).run(b.build())
    assert [(e.engine, e.start, e.end) for e in result.trace] == [
        ("core1.vpu", 0, 85), ("core0.dma0", 0, 67), ("core0.dma1", 0, 67),
        ("core0.vpu", 67, 85)]
    path = critical_path(result)
    assert [(s.command, s.engine, s.start, s.end, s.via) for s in path.steps] == [
        (2, "core0.dma1", 0, 67, "start"), (3, "core0.vpu", 67, 85, "dep")]


def test_an_idle_engine_waits_on_the_dependency_that_finished_last() -> None:
    """0: load x -> sram0[0], 0-51. 1: matmul of that tile by itself after 0, 51-123.
    2: core0.vpu add of the load's and the matmul's tiles after 0 and 1: 123-141.
    The vector engine is free from 0 and waits 123 cycles: on the load until 51, but
    the dependency that finished last is the matmul, so all 123 are waiting on mxu.
    The array waits 51 cycles on dma."""
    b = ProgramBuilder("waiting")
    b.tensor("x", (8, 8), F32, "in")
    load = b.add("core0.dma0", Load(b.ref("x"), tile(0, (8, 8))))
    mm = b.add("core0.mxu0", MatMul(tile(0, (8, 8)), tile(0, (8, 8)), tile(0x100, (8, 8))),
               [load])
    b.add("core0.vpu", Binary(BinaryKind.add, tile(0, (8, 8)), tile(0x100, (8, 8)),
                              tile(0x200, (8, 8))), [load, mm])
    result = Simulator(TINY).run(b.build())
    assert [(e.engine, e.start, e.end) for e in result.trace] == [
        ("core0.dma0", 0, 51), ("core0.mxu0", 51, 123), ("core0.vpu", 123, 141)]
    times = {t.engine: t for t in engine_times(result)}
    vpu, mxu = times["core0.vpu"], times["core0.mxu0"]
    assert (vpu.busy, vpu.waiting, dict(vpu.waiting_on), vpu.nothing_to_do) == \
        (18, 123, {"mxu": 123}, 0)
    assert (mxu.busy, mxu.waiting, dict(mxu.waiting_on), mxu.nothing_to_do) == \
        (72, 51, {"dma": 51}, 18)
