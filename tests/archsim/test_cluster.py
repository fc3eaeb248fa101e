"""Chip-to-chip links, collectives and the many-chip task simulation, against
hand-computed alpha-beta costs (latency + bytes / bandwidth per step)."""

from __future__ import annotations

import dataclasses

import pytest

from archsim.cluster import Collective, Compute, Send, run_cluster
from archsim.collectives import collective_steps
from archsim.config import load_config
from archsim.errors import CollectiveError, ConfigError
from archsim.interconnect import grid_shape

# tiny: ring, 2 links per chip, 8 GB/s per link and direction at 1 GHz -> 8 B/cycle,
# 100 cycles per hop
TINY = load_config("tiny")
LAT, BW = 100, 8


def test_tiny_preset_has_a_ring_interconnect() -> None:
    link = TINY.interconnect
    assert (link.topology, link.links_per_chip, link.link_bandwidth_gb_per_s,
            link.latency_cycles) == ("ring", 2, 8.0, 100)


def test_ring_all_reduce_matches_alpha_beta_on_an_idle_ring() -> None:
    # 4 chips, 4096 B: 2(n-1) = 6 steps of 100 + 1024/8 = 228 cycles
    result = run_cluster([Collective("ar", "all_reduce", (0, 1, 2, 3), 4096)], TINY, 4)
    assert result.total_cycles == 6 * (LAT + 4096 // 4 // BW) == 1368
    assert result.link_bytes == 6 * 4 * 1024


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_ring_all_gather_and_reduce_scatter_take_n_minus_1_steps(op: str) -> None:
    result = run_cluster([Collective(op, op, (0, 1, 2, 3), 4096)], TINY, 4)
    assert result.total_cycles == 3 * (LAT + 1024 // BW) == 684


def test_all_reduce_is_slower_when_a_send_shares_its_link() -> None:
    # the send 0->1 halves link 0->1 for every ring step: 100 + 1024/4 = 356 per step
    tasks = [Send("bulk", 0, 1, 10**6), Collective("ar", "all_reduce", (0, 1, 2, 3), 4096)]
    result = run_cluster(tasks, TINY, 4)
    assert result.spans[1].end - result.spans[1].start == 6 * (LAT + 1024 // 4) == 2136


def test_tree_all_reduce_on_a_switch() -> None:
    # switch port = 2 links x 8 B/cycle; 4 steps (2 up, 2 down) of 100 + 1600/16
    switch = TINY.with_overrides({"interconnect.topology": "switch"})
    result = run_cluster([Collective("ar", "all_reduce", (0, 1, 2, 3), 1600, (), "tree")],
                         switch, 4)
    assert result.total_cycles == 4 * (LAT + 1600 // 16) == 800
    steps = collective_steps("all_reduce", "tree", (0, 1, 2, 3), 1600)
    assert steps == [[(1, 0, 1600, 1), (3, 2, 1600, 1)], [(2, 0, 1600, 1)],
                     [(0, 2, 1600, 1)], [(0, 1, 1600, 1), (2, 3, 1600, 1)]]


def test_torus_routes_dimension_by_dimension() -> None:
    torus = TINY.with_overrides({"interconnect.topology": "torus3d",
                                 "interconnect.links_per_chip": 6})
    assert grid_shape(8, 3) == (2, 2, 2) and grid_shape(4, 3) == (2, 2, 1)
    assert grid_shape(12, 2) == (4, 3)
    # chip 0 -> chip 7 is one hop in each of the 3 dimensions: 3 x 100 + 800/8
    result = run_cluster([Send("s", 0, 7, 800)], torus, 8)
    assert result.total_cycles == 3 * LAT + 800 // BW == 400


def test_compute_waits_for_its_dependencies_and_its_chip() -> None:
    tasks = [Compute("a", 0, 500), Send("x", 0, 1, 800, (0,)), Compute("b", 1, 300),
             Compute("c", 1, 200, (1,))]
    result = run_cluster(tasks, TINY, 2)
    # the send leaves at 500 and arrives 100 + 100 cycles later; b runs meanwhile
    assert [(s.start, s.end) for s in result.spans] == [(0, 500), (500, 700), (0, 300),
                                                        (700, 900)]


def test_bad_collective_and_missing_interconnect_are_named_errors() -> None:
    with pytest.raises(CollectiveError, match="tree algorithm implements all_reduce only"):
        run_cluster([Collective("g", "all_gather", (0, 1), 64, (), "tree")], TINY, 2)
    with pytest.raises(CollectiveError, match="unknown collective 'broadcast'"):
        run_cluster([Collective("g", "broadcast", (0, 1), 64)], TINY, 2)
    bare = dataclasses.replace(TINY, interconnect=None)
    with pytest.raises(ConfigError, match="has no interconnect section"):
        run_cluster([Send("s", 0, 1, 64)], bare, 2)
    with pytest.raises(ConfigError, match="ring needs at least 2 links per chip"):
        TINY.with_overrides({"interconnect.links_per_chip": 1})


def test_ring_collectives_follow_a_snake_through_the_torus() -> None:
    # 4 chips of a 3-D torus sit on a 2x2x1 grid; ring order 0,1,3,2 makes every ring
    # step one hop, so the all-reduce costs exactly the alpha-beta formula
    torus = TINY.with_overrides({"interconnect.topology": "torus3d",
                                 "interconnect.links_per_chip": 6})
    result = run_cluster([Collective("ar", "all_reduce", (0, 1, 2, 3), 4096)], torus, 4)
    assert result.total_cycles == 6 * (LAT + 1024 // BW) == 1368


@pytest.mark.parametrize("chips", [2, 4])
def test_bidirectional_ring_sends_half_each_way(chips: int) -> None:
    # every chip sends nbytes/2n to each neighbour per step, on two different links
    # (on 2 chips, the two links between them): 6 (or 2) steps of 100 + 4096/2n/8
    result = run_cluster([Collective("ar", "all_reduce", tuple(range(chips)), 4096, (),
                                     "bidir_ring")], TINY, chips)
    assert result.total_cycles == 2 * (chips - 1) * (LAT + 4096 // (2 * chips) // BW)


def test_a_config_file_without_an_interconnect_is_a_single_chip_part(tmp_path) -> None:
    import yaml

    from archsim.config import config_to_dict

    data = config_to_dict(TINY)
    del data["interconnect"]
    path = tmp_path / "solo.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_config(path).interconnect is None
    data["interconnect"] = {**config_to_dict(TINY)["interconnect"], "latency_cycles": 7}
    path.write_text(yaml.safe_dump(data))
    assert load_config(path).interconnect.latency_cycles == 7


def test_auto_picks_a_tree_for_small_all_reduces_and_a_ring_for_large() -> None:
    from archsim.collectives import choose_algorithm

    # 4 chips, 1000-cycle hops, 50 B/cycle: an 8 KiB all-reduce costs the ring
    # 6 x (1000 + 8192/8/50) = 6123, the tree 4 x (1000 + 8192/50) = 4655
    assert choose_algorithm("all_reduce", 4, 8192, 1000, 50) == "tree"
    # 64 MiB: the tree's full-size steps lose to the bidirectional ring's eighths
    assert choose_algorithm("all_reduce", 4, 1 << 26, 1000, 50) == "bidir_ring"
    assert choose_algorithm("all_gather", 4, 8192, 1000, 50) == "bidir_ring"
