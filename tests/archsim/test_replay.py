"""Replay: a program's timing depends only on the program and the config, so new data
runs through the commands functionally (no event simulation) with the same cycles —
the eager device's cached ops use it from their second call on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torch_bridge  # noqa: F401 - registers the npu device
from archsim.config import load_config
from archsim.errors import SimulationError
from archsim.replay import replay
from archsim.simulator import Simulator
from compiler.ir.text import parse_program

PROGRAM = """program addrelu target=tiny
dram %A : f32[4,8] in
dram %B : f32[4,8] in
dram %C : f32[4,8] out
 0: core0.dma0 load   %A[0:4, 0:8] -> sram0[0x000000] f32[4,8]
 1: core0.dma1 load   %B[0:4, 0:8] -> sram0[0x000100] f32[4,8]
 2: core0.vpu  binary add sram0[0x000000] f32[4,8], sram0[0x000100] f32[4,8] -> sram0[0x000200] f32[4,8] after 0,1
 3: core0.vpu  unary  relu sram0[0x000200] f32[4,8] -> sram0[0x000300] f32[4,8]
 4: core0.dma0 store  sram0[0x000300] f32[4,8] -> %C[0:4, 0:8] after 3
"""


def test_replay_keeps_the_cycles_and_computes_the_new_data() -> None:
    config = load_config("tiny")
    program = parse_program(PROGRAM)
    rng = np.random.default_rng(0)
    first = Simulator(config).run(program, {"A": rng.standard_normal((4, 8)),
                                            "B": rng.standard_normal((4, 8))})
    a, b = (rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2))
    again = replay(program, config, {"A": a, "B": b}, first)
    simulated = Simulator(config).run(program, {"A": a, "B": b})
    assert again.total_cycles == simulated.total_cycles == first.total_cycles
    assert (again.starts == simulated.starts).all() and (again.ends == simulated.ends).all()
    np.testing.assert_array_equal(again.outputs["C"], np.maximum(a + b, 0))
    np.testing.assert_array_equal(again.outputs["C"], simulated.outputs["C"])


def test_replay_refuses_a_timing_of_another_program_or_config() -> None:
    tiny, atom = load_config("tiny"), load_config("atom")
    program, other = parse_program(PROGRAM), parse_program(PROGRAM)
    first = Simulator(tiny).run(program)
    inputs = {"A": np.zeros((4, 8)), "B": np.zeros((4, 8))}
    with pytest.raises(SimulationError, match=r"replay of 'addrelu': the timing given is of "
                                              r"'addrelu' on tiny, not of this program on "
                                              r"tiny; run the simulator instead"):
        replay(other, tiny, inputs, first)
    with pytest.raises(SimulationError, match=r"not of this program on atom"):
        replay(program, atom, inputs, first)


def test_eager_ops_replay_their_first_simulation(monkeypatch) -> None:
    """The second call of a cached eager op builds no SimPy environment, gives CPU's
    numbers for its new data and is charged the first call's cycles."""
    import simpy

    from torch_bridge import runtime

    x, y = torch.randn(16, 32), torch.randn(16, 32)
    with runtime.use_config("tiny"):  # restored after the test
        with torch_bridge.profile() as prof:
            first = (x.npu() + y.npu()).cpu()
        first_cycles = {op.name: op for op in prof.result.ops}["aten.add.Tensor"].device_cycles
        z = (x.npu() * 2).cpu()
        built = []
        real = simpy.Environment
        monkeypatch.setattr(simpy, "Environment", lambda *a, **k: built.append(1) or real(*a, **k))
        with torch_bridge.profile() as prof:
            second = (y.npu() + z.npu()).cpu()
            third = (x.npu() + y.npu()).cpu()
        torch.testing.assert_close(first, x + y, rtol=0, atol=0)
        torch.testing.assert_close(third, x + y, rtol=0, atol=0)
        torch.testing.assert_close(second, y + z, rtol=0, atol=0)
        ops = {op.name: op for op in prof.result.ops}
        add = ops["aten.add.Tensor"]
        assert add.calls == 2 and add.device_cycles == 2 * first_cycles
        assert not built


def test_replay_follows_dependencies_not_program_order() -> None:
    """Command 0 stores what command 1 loads (``after 1``): program order would store
    zeros; the simulator and replay both load first."""
    config = load_config("tiny")
    program = parse_program("""program backwards target=tiny
dram %A : f32[4,8] in
dram %C : f32[4,8] out
 0: core0.dma1 store  sram0[0x000100] f32[4,8] -> %C[0:4, 0:8] after 1
 1: core0.dma0 load   %A[0:4, 0:8] -> sram0[0x000100] f32[4,8]
""")
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    first = Simulator(config).run(program, {"A": np.ones((4, 8), np.float32)})
    again = replay(program, config, {"A": a}, first)
    np.testing.assert_array_equal(again.outputs["C"], a)
    assert again.total_cycles == first.total_cycles


def test_a_replay_starts_from_zeroed_buffers_as_a_fresh_run_does() -> None:
    """Replays reuse the program's bound buffers: command 0 stores a region that
    command 1 only fills afterwards, and C's last rows are never written. Every replay
    must see zeros there (not the previous replay's data), as a fresh simulation does."""
    config = load_config("tiny")
    program = parse_program("""program stale target=tiny
dram %A : f32[4,8] in
dram %C : f32[4,8] out
dram %D : f32[4,8] out
 0: core0.dma0 store  sram0[0x000100] f32[2,8] -> %C[0:2, 0:8]
 1: core0.dma1 load   %A[0:4, 0:8] -> sram0[0x000100] f32[4,8] after 0
 2: core0.dma0 store  sram0[0x000100] f32[4,8] -> %D[0:4, 0:8] after 1
""")
    first = Simulator(config).run(program, {"A": np.ones((4, 8), np.float32)})
    for seed in range(3):
        a = np.random.default_rng(seed).standard_normal((4, 8)).astype(np.float32)
        again = replay(program, config, {"A": a}, first)
        np.testing.assert_array_equal(again.outputs["C"], np.zeros((4, 8), np.float32))
        np.testing.assert_array_equal(again.outputs["D"], a)
        np.testing.assert_array_equal(again.outputs["A"], a)


def test_replay_runs_host_ops_on_the_new_data() -> None:
    config = load_config("tiny")
    program = parse_program("""program host target=tiny
dram %X : f32[2,4] in
dram %Y : f32[2,4] out
 0: host host_op aten.neg.default (%X) -> (%Y) cycles=10
""")
    host = {"aten.neg.default": np.negative}
    first = Simulator(config).run(program, {"X": np.ones((2, 4))}, host_functions=host)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    again = replay(program, config, {"X": x}, first, host)
    np.testing.assert_array_equal(again.outputs["Y"], -x)
    with pytest.raises(SimulationError, match=r"host op 'aten\.neg\.default' has no host "
                                              r"function for functional mode \(given: none\)"):
        replay(program, config, {"X": x}, first, {})
