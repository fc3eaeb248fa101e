"""Max-min fair sharing of links, worked out by hand (water-filling), as exact cycles.

Water-filling: every flow not yet fixed gets an equal share of what is left of each
link it crosses; a flow whose cap (its solo rate) is below that share keeps its cap,
and what it does not use goes to the others; the flows of the link that fills first
get its share. A wrong fill shows up as a flow moving faster or slower than derived
here, so as a different end cycle.
"""

from __future__ import annotations

import simpy

from archsim.bandwidth import FlowNetwork
from archsim.config import load_config
from archsim.simulator import Simulator
from compiler.ir import DType, Load, SramRef
from compiler.ir.builder import ProgramBuilder


def end_cycles(capacities: tuple[float, ...],
               flows: dict[int, tuple[tuple[int, ...], float, float]]) -> dict[int, int]:
    """Each token's end cycle when ``flows`` (token: (links, bytes, cap)) all start in
    cycle 0 on links of ``capacities`` bytes/cycle."""
    env = simpy.Environment()
    ends: dict[int, int] = {}

    def finished(tokens: list[int]) -> None:
        for token in tokens:
            ends[token] = env.now

    network = FlowNetwork(env, capacities, finished)
    for token, (links, nbytes, cap) in flows.items():
        network.transfer(links, nbytes, cap, 0, token)
    env.run()
    return ends


def test_unequal_caps_on_one_link_share_what_the_slow_flow_leaves() -> None:
    """One 16 B/cycle link; caps 4, 8 and 16 (demand 28: oversubscribed).

    - An equal share is 16/3 = 5.33; flow 0's cap 4 is below it, so it runs at 4 and
      leaves 12 for the other two: 6 each (both caps above 6). 4 + 6 + 6 = 16.
    - Flow 0 (40 B) ends at 40/4 = 10. By then flow 1 moved 60 of 124 B, flow 2 60 of
      236 B.
    - From 10: demand 8 + 16 = 24 > 16; the equal share 8 is flow 1's cap, so 8 each.
      Flow 1: 64 B / 8 = 8 -> ends at 18; flow 2 moved 64 more, 112 B left.
    - From 18: flow 2 alone at 16: 112/16 = 7 -> ends at 25.

    (A fill that forgot to take the slow flow's 4 out of the link would run flows 1
    and 2 at 8 each from cycle 0: 20 B/cycle through a 16 B/cycle link.)
    """
    flows = {0: ((0,), 40.0, 4.0), 1: ((0,), 124.0, 8.0), 2: ((0,), 236.0, 16.0)}
    assert end_cycles((16.0,), flows) == {0: 10, 1: 18, 2: 25}


def test_two_bottleneck_links_fill_the_narrower_first() -> None:
    """Link 0 carries 16 B/cycle, link 1 carries 12. Flow 1 crosses only link 0, flow 2
    both, flow 3 only link 1; every cap is 16 (demand 32 on each: both oversubscribed).

    - Equal shares: link 0 16/2 = 8, link 1 12/2 = 6. Link 1 fills first: flows 2 and
      3 get 6. Link 0 has 16 - 6 = 10 left for flow 1 alone: 10 (below its cap).
      Link 0 carries 10 + 6 = 16, link 1 6 + 6 = 12.
    - Flow 2 (60 B) ends at 60/6 = 10; flow 1 moved 100 of 200 B, flow 3 60 of 120 B.
    - From 10: flow 1 alone on link 0 at 16: 100/16 = 6.25 -> ends at ceil(16.25) = 17;
      flow 3 alone on link 1 at 12: 60/12 = 5 -> ends at 15.
    """
    flows = {1: ((0,), 200.0, 16.0), 2: ((0, 1), 60.0, 16.0), 3: ((1,), 120.0, 16.0)}
    assert end_cycles((16.0, 12.0), flows) == {2: 10, 3: 15, 1: 17}


F32 = DType.f32
# tiny with four 16 B/cycle channels (64 B/cycle of DRAM, 64 B interleave) and an
# engine and NoC fast enough that only the channels a transfer touches limit it
WIDE = load_config("tiny").with_overrides({
    "dram.channels": 4, "core.dma.bandwidth_bytes_per_cycle": 64,
    "noc.link_bandwidth_bytes_per_cycle": 64})


def test_a_small_transfer_reaches_only_the_channels_it_interleaves_over() -> None:
    """Fixed cost 10 setup + 20 DRAM + 5 NoC = 35 cycles (tests/archsim/test_timing.py).

    - 64 B (4x4 f32) is one 64 B interleave unit: one channel, 16 B/cycle: 35 + 4 = 39.
    - 128 B: two channels, 32 B/cycle: 35 + 4 = 39.
    - 1024 B: all four channels, 64 B/cycle: 35 + 16 = 51.
    Run one after the other on one engine, so nothing is shared: 0-39, 39-78, 78-129.
    (A transfer credited all four channels would take 35 + 1 for 64 B.)
    """
    b = ProgramBuilder("interleave")
    b.tensor("x", (16, 16), F32, "in")
    b.add("core0.dma0", Load(b.ref("x", (0, 1), (0, 16)), SramRef("sram0", 0, (1, 16), F32)))
    b.add("core0.dma0", Load(b.ref("x", (0, 2), (0, 16)), SramRef("sram0", 64, (2, 16), F32)))
    b.add("core0.dma0", Load(b.ref("x"), SramRef("sram0", 1024, (16, 16), F32)))
    result = Simulator(WIDE).run(b.build())
    assert [(e.engine, e.start, e.end) for e in result.trace] == [
        ("core0.dma0", 0, 39), ("core0.dma0", 39, 78), ("core0.dma0", 78, 129)]
