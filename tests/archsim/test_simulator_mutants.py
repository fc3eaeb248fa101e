"""The simulator where its mutants survived (issue 34): the message of a program that
cannot finish, with an engine that did finish, a command done at cycle 0 and a command
waiting on two others."""

from __future__ import annotations

import pytest

from archsim.config import load_config
from archsim.errors import SimulationError
from archsim.simulator import Simulator
from compiler.ir import DType, HostOp, Load, SramRef, Unary, UnaryKind
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
