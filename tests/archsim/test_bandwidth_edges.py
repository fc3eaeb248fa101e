"""The flow network's edges, each found by a mutant of ``archsim/bandwidth.py`` that the
other tests let live (``benchmarks/mutation.py``): links registered one by one, empty and
sub-cycle flows, a wake-up made stale by a flow joining, demand after an unthrottled
finish, and water-filling with a flow held below the fair share by its own cap.

Every expected cycle is derived by hand in the test."""

from __future__ import annotations

import pytest
import simpy

from archsim.bandwidth import FlowNetwork, cycles_to_move, solo_rate

Flow = tuple[int, int, tuple[int, ...], float, float]
"""(token, start cycle, links, bytes, solo rate in bytes/cycle)."""


def run(links: list[float], flows: list[Flow]) -> tuple[dict[int, int], list[tuple[int, list]]]:
    """Links registered with ``add_link``; returns each token's end cycle and every
    ``on_finish`` call as (cycle, tokens)."""
    env = simpy.Environment()
    calls: list[tuple[int, list]] = []
    network = FlowNetwork(env, on_finish=lambda tokens: calls.append((env.now, list(tokens))))
    for i, capacity in enumerate(links):
        assert network.add_link(f"l{i}", capacity) == i
    for token, start, path, nbytes, solo in flows:
        network.transfer(path, nbytes, solo, start, token)
    env.run()
    ends = {token: cycle for cycle, tokens in calls for token in tokens}
    return ends, calls


def test_solo_rate_is_the_cap_or_the_narrowest_link() -> None:
    assert solo_rate((0, 1), 16.0, [8.0, 32.0]) == 8.0
    assert solo_rate((1,), 16.0, [8.0, 32.0]) == 16.0
    assert solo_rate((), 4.0, []) == 4.0


def test_add_link_names_the_link_and_refuses_no_bandwidth() -> None:
    network = FlowNetwork(simpy.Environment())
    assert network.add_link("dram", 0.5) == 0  # under a byte per cycle is a bandwidth
    assert network.names == ["dram"]
    with pytest.raises(ValueError, match=r"link 'noc': bandwidth must be > 0, got 0"):
        network.add_link("noc", 0)


def test_flows_on_added_links_share_them() -> None:
    # two 32 B flows wanting 16 B/cycle on one 16 B/cycle link: 8 each, both end at 4
    ends, _ = run([16.0], [(1, 0, (0,), 32.0, 16.0), (2, 0, (0,), 32.0, 16.0)])
    assert ends == {1: 4, 2: 4}


def test_an_empty_flow_finishes_at_once_and_the_flows_after_it_still_share() -> None:
    # token 0 moves nothing: reported once, in its start cycle; 1 and 2, started with it,
    # share the 16 B/cycle link at 8 (32 B: end at 4) and are reported together
    _, calls = run([16.0], [(0, 0, (0,), 0.0, 16.0), (1, 0, (0,), 32.0, 16.0),
                            (2, 0, (0,), 32.0, 16.0)])
    assert calls == [(0, [0]), (4, [1, 2])]


def test_a_flow_of_a_byte_or_less_takes_a_cycle() -> None:
    # 1 B and 0.5 B at 16 B/cycle: 1/16 and 1/32 of a cycle, rounded up to 1; each
    # reported once
    _, calls = run([16.0], [(1, 0, (0,), 1.0, 16.0), (2, 5, (0,), 0.5, 16.0)])
    assert calls == [(1, [1]), (6, [2])]


def test_a_byte_started_beside_an_empty_flow_still_moves() -> None:
    # the empty flow 0 is reported at once; flow 1 (1 B) takes its cycle
    _, calls = run([16.0], [(0, 0, (0,), 0.0, 16.0), (1, 0, (0,), 1.0, 16.0)])
    assert calls == [(0, [0]), (1, [1])]


def test_a_flow_joining_makes_the_first_wake_up_stale() -> None:
    # 1 alone at 16 B/cycle would end at 4; 2 joins at 2 and both run at 8: 1 has 32 B
    # left, ends at 2 + 4 = 6; 2 has 32 B left then and runs alone: 6 + 2 = 8
    ends, _ = run([16.0], [(1, 0, (0,), 64.0, 16.0), (2, 2, (0,), 64.0, 16.0)])
    assert ends == {1: 6, 2: 8}


def test_a_flow_that_ends_unthrottled_gives_back_its_own_demand() -> None:
    # 16 B/cycle link. 1 (4 B/cycle, 8 B) and 2 (8 B/cycle, 200 B) fit: 1 ends at 2.
    # 3 (12 B/cycle, 120 B) joins at 3: 8 + 12 > 16, so max-min fair gives 2 its 8 and
    # 3 the other 8: 120 / 8 = 15 cycles, ends at 18. 2 runs at 8 throughout:
    # 200 / 8 = 25.
    ends, _ = run([16.0], [(1, 0, (0,), 8.0, 4.0), (2, 0, (0,), 200.0, 8.0),
                           (3, 3, (0,), 120.0, 12.0)])
    assert ends == {1: 2, 3: 18, 2: 25}


def test_water_filling_keeps_a_capped_flow_at_its_cap() -> None:
    # two 16 B/cycle links, both oversubscribed. Link 0: 1 and 2 want 16, 3 only 2;
    # link 1: 4 and 5 want 16. Fair share on link 0 is 16/3 > 2, so 3 runs at 2 and 1,
    # 2 split the other 14 (7 each); link 1 splits 8 and 8. Bytes chosen so all take
    # 10 cycles: 70, 70, 20, 80, 80.
    ends, calls = run([16.0, 16.0], [
        (1, 0, (0,), 70.0, 16.0), (2, 0, (0,), 70.0, 16.0), (3, 0, (0,), 20.0, 2.0),
        (4, 0, (1,), 80.0, 16.0), (5, 0, (1,), 80.0, 16.0)])
    assert ends == {1: 10, 2: 10, 3: 10, 4: 10, 5: 10}
    assert len(calls) == 1


def test_cycles_to_move_is_the_ceiling_of_bytes_over_rate() -> None:
    # 33 B at 16 B/cycle: 2.06 cycles, so 3; 32 B: exactly 2; float noise above an
    # integer is forgiven (0.3 / 0.1 = 3.0000000000000004)
    assert cycles_to_move(33, 16.0) == 3
    assert cycles_to_move(32, 16.0) == 2
    assert cycles_to_move(0.3, 0.1) == 3
