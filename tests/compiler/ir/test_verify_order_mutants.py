"""The verifier's ordering checks, pinned where a mutation run of
``compiler/ir/verify_order.py`` found nothing checking them (issue 34): deadlock cycles
reported without the commands that merely wait on them, repeated deps, and when the
happens-before search hands over to vector clocks."""

from __future__ import annotations

import pytest

from archsim.config import NpuConfig
from compiler.ir import verify_order
from compiler.ir.text import parse_program
from compiler.ir.verify import find_problems
from compiler.ir.verify_order import HappensBefore, WaitGraph

RELU = "unary relu sram0[0x0] f32[4] -> sram0[0x100] f32[4]"
COPY_1 = "copy sram0[0x200] f32[4] -> sram1[0x0] f32[4]"
COPY_2 = "copy sram0[0x300] f32[4] -> sram1[0x100] f32[4]"
CYCLE = ("deadlock: command 1 (core0.dma0) waits on command 2 (core0.dma1), which waits "
         "on command 1")


def problems(*lines: str, config: NpuConfig) -> list[str]:
    return find_problems(parse_program("program p target=tiny\n" + "\n".join(lines) + "\n"),
                         config)


class TestDeadlock:
    def test_a_runnable_command_is_not_part_of_the_cycle(self, tiny: NpuConfig) -> None:
        assert problems(f"0: core0.vpu {RELU}", f"1: core0.dma0 {COPY_1} after 2",
                        f"2: core0.dma1 {COPY_2} after 1", config=tiny) == [CYCLE]

    def test_a_command_waiting_on_the_cycle_is_not_part_of_it(self, tiny: NpuConfig) -> None:
        # 0 never runs (it waits on 1) but the cycle is 1 -> 2 -> 1
        assert problems(f"0: core0.vpu {RELU} after 1", f"1: core0.dma0 {COPY_1} after 2",
                        f"2: core0.dma1 {COPY_2} after 1", config=tiny) == [CYCLE]


def test_a_repeated_dep_counts_once(tiny: NpuConfig) -> None:
    graph = WaitGraph.build(parse_program(
        f"program p target=tiny\n0: core0.vpu {RELU}\n1: core0.vpu {RELU}\n"
        "2: core0.dma0 copy sram0[0x100] f32[4] -> sram1[0x0] f32[4] after 1,0,1\n").commands)
    assert graph.deps == [(), (), (1, 0)]
    assert graph.waits == [(), (0,), (1, 0)]
    twice = (f"0: core0.vpu {RELU}",
             "1: core0.dma0 copy sram0[0x100] f32[4] -> sram1[0x0] f32[4] after 0,0")
    program = parse_program("program p target=tiny\n" + "\n".join(twice) + "\n")
    assert WaitGraph.build(program.commands).deps == [(), (0,)]
    assert problems(*twice, config=tiny) == []


# five engines; 0 alone, 1 -> 2 -> 3 -> 4 a chain of deps on the others, 5 after 2 and 3
CHAIN = """\
program p target=tiny
0: core0.vpu unary relu sram0[0x0] f32[4] -> sram0[0x100] f32[4]
1: core0.dma0 copy sram0[0x200] f32[4] -> sram1[0x0] f32[4] after 0
2: core0.dma1 copy sram0[0x200] f32[4] -> sram1[0x100] f32[4] after 1
3: core1.vpu unary relu sram1[0x200] f32[4] -> sram1[0x300] f32[4] after 2
4: core1.dma0 copy sram1[0x300] f32[4] -> sram0[0x400] f32[4] after 3
"""

DIAMOND = """\
program p target=tiny
0: core0.vpu unary relu sram0[0x0] f32[4] -> sram0[0x100] f32[4]
1: core0.dma0 copy sram0[0x200] f32[4] -> sram1[0x0] f32[4]
2: core0.dma1 copy sram0[0x200] f32[4] -> sram1[0x100] f32[4] after 1
3: core1.vpu unary relu sram1[0x200] f32[4] -> sram1[0x300] f32[4] after 1
4: core1.dma0 copy sram1[0x300] f32[4] -> sram0[0x400] f32[4] after 2,3
"""


def happens_before(text: str, base: int, monkeypatch: pytest.MonkeyPatch) -> HappensBefore:
    monkeypatch.setattr(verify_order.HappensBefore, "search_steps", (0, base))
    graph = WaitGraph.build(parse_program(text).commands)
    order, cycles = graph.topological_order()
    assert order == [0, 1, 2, 3, 4] and not cycles
    return HappensBefore(graph, order)


class TestSearchBudget:
    def test_searches_spend_one_step_per_command_visited(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Is 0 before 4? 4 waits on 3, 3 on 2, 2 on 1, 1 on 0: four steps (4, 3, 2
        and 1, whose waits show 0)."""
        hb = happens_before(CHAIN, 4, monkeypatch)
        assert hb.ordered(0, 4)
        assert (hb.budget, hb.clocks) == (0, None)
        # the budget is spent: the next question builds the clocks, once
        assert hb.ordered(1, 3)
        clocks = hb.clocks
        assert clocks is not None
        assert hb.ordered(0, 3) and not hb.ordered(4, 0)
        assert hb.clocks is clocks

    def test_a_budget_of_one_still_searches(self, monkeypatch: pytest.MonkeyPatch) -> None:
        hb = happens_before(CHAIN, 1, monkeypatch)
        assert hb.ordered(0, 4)
        assert (hb.budget, hb.clocks) == (-3, None)

    def test_a_command_reached_twice_is_searched_once(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Is 0 before 4? No: the search visits 4, 3, 1 and 2 (1 again through 2 is
        skipped) and finds no command on 0's engine: four steps."""
        hb = happens_before(DIAMOND, 10, monkeypatch)
        assert not hb.ordered(0, 4)
        assert (hb.budget, hb.clocks) == (6, None)
