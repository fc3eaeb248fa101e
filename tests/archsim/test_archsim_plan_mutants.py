"""archsim.plan where its mutants survived (issue 34): programs whose command ids are
not their positions, each distinct shape costed once (and its bytes counted per
command), integer per-command counts, and the plan cache (verification once per
program object, its entry gone with the program)."""

from __future__ import annotations

import dataclasses
import gc

import numpy as np

from archsim.config import load_config
from archsim.plan import _CACHE, plan_for
from archsim.simulator import Simulator
from compiler.ir import DType, Load, SramRef
from compiler.ir.builder import ProgramBuilder
from archsim_programs import copy_program

TINY = load_config("tiny")
F32 = DType.f32


TIMELINE = [(0, 184), (184, 235), (235, 301), (301, 352), (352, 536)]


def test_command_ids_need_not_be_positions() -> None:
    program = copy_program()
    # ids 100, 101, ... (dependencies renamed with them): the run indexes by position
    shifted = dataclasses.replace(program, commands=tuple(
        dataclasses.replace(c, id=c.id + 100, deps=tuple(d + 100 for d in c.deps))
        for c in program.commands))
    result = Simulator(TINY).run(shifted, verify=False)
    assert list(zip(result.starts.tolist(), result.ends.tolist())) == TIMELINE


def test_each_distinct_shape_is_costed_once_and_its_bytes_counted_per_command() -> None:
    b = ProgramBuilder("three loads")
    b.tensor("x", (8, 8), F32, "in")
    for n in range(3):  # the same 256-byte load into three places
        b.add("core0.dma0", Load(b.ref("x"), SramRef("sram0", 256 * n, (8, 8), F32)))
    plan = plan_for(b.build(), TINY, verify=False)
    assert len(plan.timings) == 1 and plan.kinds == [0, 0, 0]
    assert plan.link_bytes["dram"] == 3 * 256
    assert plan.dram_read == 3 * 256


def test_per_command_bytes_and_flops_are_integers() -> None:
    result = Simulator(TINY).run(copy_program())
    assert result.command_bytes.dtype == result.command_flops.dtype == np.int64
    # bytes each command moves over links (8 x 8 f32); the exp moves none
    assert result.command_bytes.tolist() == [256, 256, 0, 256, 256]
    assert result.command_flops.tolist() == [0, 0, 64, 0, 0]  # exp: one a value


def test_programs_run_in_turn_are_each_verified_once(monkeypatch) -> None:
    import compiler.ir.verify as verify_module

    calls = []
    real = verify_module.verify
    monkeypatch.setattr(verify_module, "verify",
                        lambda p, c: (calls.append(p.name), real(p, c)))
    first, second = copy_program(), dataclasses.replace(copy_program(), name="other")
    for program in (first, second, first, second):
        Simulator(TINY).run(program)
    assert calls == ["copy", "other"]


def test_a_programs_plans_go_with_it() -> None:
    program = copy_program()
    plan_for(program, TINY, verify=False)
    key = id(program)
    assert _CACHE[key].program() is program
    del program
    gc.collect()
    assert key not in _CACHE
