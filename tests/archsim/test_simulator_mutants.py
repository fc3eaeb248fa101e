"""The simulator where its mutants survived (issue 34): the message of a program that
cannot finish (with an engine that did finish, a command done at cycle 0, a command
waiting on two others, an end past int64), a zero-cycle command, several engines
waiting on one command, the 2**62-cycle limit and busy cycles of overlapping spans.
Host ops of a stated cycle count make every expected cycle plain."""

from __future__ import annotations

import numpy as np
import pytest

from archsim.config import load_config
from archsim.errors import SimulationError
from archsim.simulator import Simulator, busy_cycles
from compiler.ir import DType, HostOp, Load, MatMul, SramRef, Unary, UnaryKind
from compiler.ir.builder import ProgramBuilder

TINY = load_config("tiny")
F32 = DType.f32


def test_a_stuck_program_names_only_unfinished_commands_and_what_they_wait_on() -> None:
    b = ProgramBuilder("stuck")
    b.tensor("x", (8, 8), F32, "in")
    t0, t1 = SramRef("sram0", 0, (8, 8), F32), SramRef("sram0", 256, (8, 8), F32)
    u0, u1 = SramRef("sram1", 0, (8, 8), F32), SramRef("sram1", 256, (8, 8), F32)
    # command 0 takes no time: it ends at cycle 0, finished, on an engine with nothing
    # left; 1 waits on 0 (done) and on 2 and 3, which both wait on 1
    b.add("host", HostOp("noop", ("x",), ("x",), cycles=0))
    b.add("core0.vpu", Unary(UnaryKind.exp, t0, t1), [0, 2, 3])
    b.add("core1.vpu", Unary(UnaryKind.exp, u0, u1), [1])
    b.add("core1.dma0", Load(b.ref("x"), u0), [1])
    with pytest.raises(SimulationError) as info:
        Simulator(TINY).run(b.build(), verify=False)
    assert str(info.value) == (
        "simulation of 'stuck' cannot finish: 3 commands never started; "
        "command 1 on core0.vpu waits on 2, 3; command 2 on core1.vpu waits on 1; "
        "command 3 on core1.dma0 waits on 1")


def host_ops(name: str, *cycles: int, chained: bool = True):
    """Host ops of the given cycle counts on the one host engine, each depending on
    the previous one when ``chained``."""
    b = ProgramBuilder(name)
    b.tensor("x", (8, 8), F32, "in")
    for n, count in enumerate(cycles):
        b.add("host", HostOp(f"op{n}", ("x",), ("x",), cycles=count),
              [n - 1] if chained and n else [])
    return b


def test_a_command_may_end_at_cycle_0_and_timelines_are_int64() -> None:
    result = Simulator(TINY).run(host_ops("zero", 0, 5).build(), verify=False)
    assert result.starts.tolist() == [0, 0] and result.ends.tolist() == [0, 5]
    assert result.starts.dtype == result.ends.dtype == np.int64
    assert result.total_cycles == 5


def test_every_engine_waiting_on_one_command_is_woken() -> None:
    b = host_ops("fan-out", 10)
    # exp over 8 x 8 f32 on tiny's vector unit: 66 cycles (test_simulator.py)
    b.add("core0.vpu", Unary(UnaryKind.exp, SramRef("sram0", 0, (8, 8), F32),
                             SramRef("sram0", 256, (8, 8), F32)), [0])
    b.add("core1.vpu", Unary(UnaryKind.exp, SramRef("sram1", 0, (8, 8), F32),
                             SramRef("sram1", 256, (8, 8), F32)), [0])
    result = Simulator(TINY).run(b.build(), verify=False)
    assert list(zip(result.starts.tolist(), result.ends.tolist())) == [
        (0, 10), (10, 76), (10, 76)]


def test_a_run_may_end_at_cycle_2_to_the_62_but_not_later() -> None:
    assert Simulator(TINY).run(host_ops("longest", 2**62).build(),
                               verify=False).total_cycles == 2**62
    with pytest.raises(SimulationError) as info:  # past int64 even
        Simulator(TINY).run(host_ops("too long", 2**63).build(), verify=False)
    assert str(info.value) == (
        "simulation of 'too long' ends at cycle 9.22e+18, past the 4.61e+18 cycles "
        "(2**62) archsim counts; check the cycle counts of host ops and the config's "
        "latencies and bandwidths")


def test_a_stuck_program_is_reported_as_stuck_even_past_int64() -> None:
    b = host_ops("stuck and long", 2**63)
    t0, t1 = SramRef("sram0", 0, (8, 8), F32), SramRef("sram0", 256, (8, 8), F32)
    b.add("core0.dma0", Load(b.ref("x"), t0), [2])
    b.add("core0.vpu", Unary(UnaryKind.exp, t0, t1), [1])
    with pytest.raises(SimulationError) as info:
        Simulator(TINY).run(b.build(), verify=False)
    assert str(info.value) == (
        "simulation of 'stuck and long' cannot finish: 2 commands never started; "
        "command 1 on core0.dma0 waits on 2; command 2 on core0.vpu waits on 1")


@pytest.mark.parametrize("starts, ends, busy", [
    ([0, 10], [20, 30], 30),  # overlapping: the union 0..30
    ([0, 5], [20, 10], 20),  # the second inside the first adds nothing
    ([0, 30], [10, 40], 20),  # a gap of 20 cycles is not busy
])
def test_busy_cycles_of_transfers_in_flight_count_overlaps_once(starts, ends, busy) -> None:
    assert busy_cycles(np.array(starts), np.array(ends), 2) == busy


@pytest.mark.parametrize("rows, timeline", [
    # 2 x 4 ws array, double-buffered weights: fill and drain 2 x 2 + 4 - 2 = 6; one fold
    # of T = 2 rows costs max(2, 2) + 6 = 8, and 2 right behind the first
    (2, [(0, 8), (8, 10)]),
    # 1 x 4: fill and drain 4; T = 1: 1 + 4 = 5, then the 1 cycle left of it
    (1, [(0, 5), (5, 6)]),
])
def test_a_matmul_right_behind_another_keeps_its_streaming_cycles(rows: int, timeline) -> None:
    config = TINY.with_overrides({"core.matrix.weight_buffers": 2, "core.matrix.rows": rows})
    b = ProgramBuilder("two")
    a, w = SramRef("sram0", 0, (rows, rows), F32), SramRef("sram0", 256, (rows, 4), F32)
    b.add("core0.mxu0", MatMul(a, w, SramRef("sram0", 512, (rows, 4), F32)))
    b.add("core0.mxu0", MatMul(a, w, SramRef("sram0", 768, (rows, 4), F32)))
    result = Simulator(config).run(b.build())
    assert list(zip(result.starts.tolist(), result.ends.tolist())) == timeline


def test_a_transfer_waiting_in_flight_shares_the_dram_channel_when_it_streams() -> None:
    # tiny: 35 cycles of latency, one DRAM channel of 16 B/cycle. core0.dma0 keeps 2
    # loads of 256 B in flight, core1.dma0 loads 512 B: from cycle 35 two flows get 8
    # B/cycle each; core0's first ends at 35 + 32 = 67, its second (latency long over)
    # streams from 67 beside core1's last 256 B, 8 B/cycle each: both end at 99
    config = TINY.with_overrides({"core.dma.outstanding": 2})
    b = ProgramBuilder("in flight")
    b.tensor("x", (8, 16), F32, "in")
    b.add("core0.dma0", Load(b.ref("x", (0, 4), (0, 16)), SramRef("sram0", 0, (4, 16), F32)))
    b.add("core0.dma0", Load(b.ref("x", (4, 8), (0, 16)), SramRef("sram0", 256, (4, 16), F32)))
    b.add("core1.dma0", Load(b.ref("x"), SramRef("sram1", 0, (8, 16), F32)))
    result = Simulator(config).run(b.build())
    assert list(zip(result.starts.tolist(), result.ends.tolist())) == [
        (0, 67), (0, 99), (0, 99)]
