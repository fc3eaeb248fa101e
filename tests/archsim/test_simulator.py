"""Simulator behaviour beyond single timelines: statistics, stuck programs."""

from __future__ import annotations

import pytest

from archsim.config import load_config
from archsim.errors import SimulationError
from archsim.simulator import Simulator
from compiler.ir import DType, Load, SramRef, Unary, UnaryKind
from compiler.ir.builder import ProgramBuilder
from archsim_programs import copy_program

TINY = load_config("tiny")
F32 = DType.f32


def test_statistics_add_up() -> None:
    result = Simulator(TINY).run(copy_program())
    # host link: 100 latency + 20 DRAM latency + 256 B at 4 B/cycle = 184 each way;
    # load/store 51 each; exp 66
    assert [(e.engine, e.start, e.end) for e in result.trace] == [
        ("hdma", 0, 184), ("core0.dma0", 184, 235), ("core0.vpu", 235, 301),
        ("core0.dma0", 301, 352), ("hdma", 352, 536)]
    assert result.total_cycles == 536
    assert result.seconds == pytest.approx(536e-9)
    assert result.engine_busy_cycles == {"hdma": 368, "core0.dma0": 102, "core0.vpu": 66}
    assert result.utilization["core0.vpu"] == pytest.approx(66 / 536)
    # DRAM: host writes 256, load reads 256, store writes 256, host reads 256
    assert (result.dram_bytes_read, result.dram_bytes_written) == (512, 512)
    assert result.host_link_bytes == 512
    assert result.flops == 64
    assert result.matmul_flops == 0
    assert result.sram_peak_bytes == {"sram0": 512}
    assert result.link_bytes["dram"] == 1024
    assert result.link_bytes["host_link"] == 512
    assert result.link_bytes["noc.core0"] == result.link_bytes["sram0.port"] == 512
    assert result.link_bytes["noc.core1"] == 0
    by_source = {s.source: s for s in result.by_source}
    assert by_source["exp"].commands == 3
    assert dict(by_source["exp"].busy_cycles) == {"dma": 102, "vpu": 66}
    assert by_source["exp"].span_cycles == 352 - 184


def test_a_program_that_cannot_finish_raises_naming_the_stuck_commands() -> None:
    b = ProgramBuilder("deadlock")
    b.tensor("x", (8, 8), F32, "in")
    t0, t1 = SramRef("sram0", 0, (8, 8), F32), SramRef("sram0", 256, (8, 8), F32)
    b.add("core0.dma0", Load(b.ref("x"), t0), [1])
    b.add("core0.vpu", Unary(UnaryKind.exp, t0, t1), [0])
    with pytest.raises(SimulationError) as info:
        Simulator(TINY).run(b.build(), verify=False)
    assert str(info.value) == (
        "simulation of 'deadlock' cannot finish: 2 commands never started; "
        "command 0 on core0.dma0 waits on 1; command 1 on core0.vpu waits on 0")


def test_empty_program_takes_no_time() -> None:
    result = Simulator(TINY).run(ProgramBuilder("empty").build())
    assert result.total_cycles == 0
    assert result.trace == ()


def test_a_program_is_verified_once_per_config(monkeypatch) -> None:
    import compiler.ir.verify as verify_module

    calls = []
    real = verify_module.verify
    monkeypatch.setattr(verify_module, "verify", lambda p, c: (calls.append(c.name), real(p, c)))
    program = copy_program()
    Simulator(TINY).run(program)
    Simulator(TINY).run(program)
    assert calls == ["tiny"]
    Simulator(TINY.with_overrides({"core.vector.lanes": 8})).run(program)
    assert calls == ["tiny", "tiny"]
    Simulator(TINY).run(copy_program())  # an equal but different object is verified again
    assert calls == ["tiny", "tiny", "tiny"]


def test_rerunning_a_program_reuses_its_plan_and_gives_the_same_result() -> None:
    import numpy as np

    from archsim.plan import plan_for

    program = copy_program()
    first = Simulator(TINY).run(program)
    plan = plan_for(program, TINY, verify=False)
    second = Simulator(TINY).run(program, {"x": np.ones((8, 8), np.float32)})
    assert plan_for(program, TINY, verify=False) is plan
    assert second.starts.tolist() == first.starts.tolist()
    assert second.ends.tolist() == first.ends.tolist()
    np.testing.assert_allclose(second.outputs["y"], np.exp(np.ones((8, 8))), rtol=1e-6)


@pytest.mark.parametrize(("outstanding", "timeline", "busy"), [
    # tiny: 35 cycles of setup + DRAM + NoC latency, then 256 B at 16 B/cycle = 16
    (1, [(0, 51), (51, 102), (102, 153)], 153),
    # the second's latency hides under the first; the third waits for a free slot (51)
    (2, [(0, 51), (0, 67), (51, 102)], 102),
    # all three latencies overlap; the data streams one transfer after the other
    (3, [(0, 51), (0, 67), (0, 83)], 83),
])
def test_dma_transfers_in_flight_overlap_their_latency(outstanding: int, timeline, busy) -> None:
    b = ProgramBuilder("three loads")
    b.tensor("x", (8, 8), F32, "in")
    for n in range(3):
        b.add("core0.dma0", Load(b.ref("x"), SramRef("sram0", 256 * n, (8, 8), F32)))
    config = TINY.with_overrides({"core.dma.outstanding": outstanding})
    result = Simulator(config).run(b.build())
    assert [(e.start, e.end) for e in result.trace] == timeline
    assert result.engine_busy_cycles == {"core0.dma0": busy}


def test_the_plan_tracks_the_load_only_of_links_its_transfers_could_fill() -> None:
    """tiny, one engine with three loads (three shapes) in flight: their data streams
    one after the other, so at most one flow at 16 B/cycle crosses each link. It can
    fill the DRAM channel (16 B/cycle, tracked) but not core0's NoC link (32) or
    scratchpad port (64), which three flows at once would (48): the engine, not the
    transfer, is what counts."""
    from archsim.plan import plan_for

    b = ProgramBuilder("three loads")
    b.tensor("x", (8, 8), F32, "in")
    for n, rows in enumerate((8, 4, 2)):
        b.add("core0.dma0", Load(b.ref("x", (0, rows), (0, 8)),
                                 SramRef("sram0", 256 * n, (rows, 8), F32)))
    config = TINY.with_overrides({"core.dma.outstanding": 3})
    plan = plan_for(b.build(), config, verify=False)
    links = {plan.link_names[k] for _, links, _, _ in plan.steps for k in links}
    tracked = {plan.link_names[k] for *_, links in plan.run_steps for k in links}
    assert links == {"dram", "noc.core0", "sram0.port"}
    assert tracked == {"dram"}
