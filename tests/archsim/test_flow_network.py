"""The flow network on its own: flows started from the finish callback reuse the
objects of flows that just finished, and must not inherit their state."""

from __future__ import annotations

import simpy

from archsim.bandwidth import FlowNetwork


def run(first: list[tuple[int, float]], then: dict[int, tuple[int, float]]
        ) -> dict[int, int]:
    """Flows on one 16 B/cycle link: ``first`` as (token, bytes) from cycle 0; when a
    token in ``then`` finishes, the flow ``then[token]`` starts in that cycle. Returns
    each token's end cycle."""
    env = simpy.Environment()
    ends: dict[int, int] = {}

    def finished(tokens: list[int]) -> None:
        for token in tokens:
            ends[token] = env.now
            if token in then:
                following, nbytes = then[token]
                network.transfer((0,), nbytes, 16.0, env.now, following)

    network = FlowNetwork(env, (16.0,), finished)
    for token, nbytes in first:
        network.transfer((0,), nbytes, 16.0, 0, token)
    env.run()
    return ends


def test_a_chain_of_flows_each_runs_at_full_rate() -> None:
    assert run([(0, 320.0)], {0: (1, 160.0), 1: (2, 160.0), 2: (3, 16.0)}) == {
        0: 20, 1: 30, 2: 40, 3: 41}


def test_a_flow_started_as_another_ends_shares_with_the_one_still_running() -> None:
    # 0 and 1 share the link at 8 B/cycle; 1 ends at 20, 2 starts and shares with 0
    # (80 B at 8: ends at 30); 0 has 80 B left and runs alone at 16 (ends at 35)
    assert run([(0, 320.0), (1, 160.0)], {1: (2, 80.0)}) == {1: 20, 2: 30, 0: 35}
