"""Collectives (all-reduce, all-gather, reduce-scatter) as steps of chip-to-chip
transfers on a :class:`archsim.interconnect.Fabric`.

A step is a set of transfers that start together; the next step starts when all of
them have arrived (each chip needs what it received before it can forward it). The
reductions themselves (adding a received chunk) are not timed: the vector unit adds
far faster than a link delivers.

- ring (bandwidth-optimal): the group in ring order (a snake through a torus, so
  consecutive chips are neighbours), each chip sending to the next.
  all-reduce = reduce-scatter + all-gather: 2(n-1) steps of nbytes/n each;
  all-gather and reduce-scatter: n-1 steps of nbytes/n (nbytes: the whole tensor).
  On an idle ring of one-hop neighbours a step takes latency + (nbytes/n)/bandwidth:
  the alpha-beta cost.
- bidir_ring: two rings at once in opposite directions, each with half the data, so
  every chip sends on two links per step: latency + (nbytes/2n)/bandwidth per step.
- tree (latency-optimal, all-reduce only): reduce up a binary tree (ceil(log2 n)
  steps of nbytes), then broadcast back down the same tree.
- auto (:func:`choose_algorithm`): per collective, the one of these with the lowest
  alpha-beta cost for its size, as communication libraries pick trees for small
  messages and rings for large ones.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

from archsim.errors import CollectiveError

COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter")
ALGORITHMS: tuple[str, ...] = ("ring", "bidir_ring", "tree")

Transfer = tuple[int, int, int, int]
"""(source chip, destination chip, bytes, preferred direction +1/-1 on ties)."""


def choose_algorithm(op: str, chips: int, nbytes: int, latency_cycles: float,
                     bytes_per_cycle: float) -> str:
    """The algorithm with the lowest alpha-beta cost (steps x (latency + bytes per step /
    link bandwidth)) for ``op`` of ``nbytes`` over ``chips`` one-hop neighbours."""
    if chips <= 1:
        return "bidir_ring"
    steps = 2 * (chips - 1) if op == "all_reduce" else chips - 1
    cost = {"ring": steps * (latency_cycles + nbytes / chips / bytes_per_cycle),
            "bidir_ring": steps * (latency_cycles + nbytes / chips / 2 / bytes_per_cycle)}
    if op == "all_reduce":
        depth = 2 * math.ceil(math.log2(chips))
        cost["tree"] = depth * (latency_cycles + nbytes / bytes_per_cycle)
    return min(cost, key=lambda a: (cost[a], a != "bidir_ring"))


def collective_steps(op: str, algorithm: str, group: tuple[int, ...],
                     nbytes: int) -> list[list[Transfer]]:
    """The transfers of ``op`` over the chips of ``group`` (in ring order), step by
    step; ``nbytes`` is the size of the whole tensor on each chip."""
    if op not in COLLECTIVES:
        raise CollectiveError(f"unknown collective {op!r}; known: {', '.join(COLLECTIVES)}")
    if algorithm not in ALGORITHMS:
        raise CollectiveError(f"unknown collective algorithm {algorithm!r}; known: "
                              f"{', '.join(ALGORITHMS)}")
    n = len(group)
    if n <= 1 or nbytes <= 0:
        return []
    count = 2 * (n - 1) if op == "all_reduce" else n - 1
    if algorithm == "ring":
        chunk = math.ceil(nbytes / n)
        ring = [(group[i], group[(i + 1) % n], chunk, 1) for i in range(n)]
        return [list(ring) for _ in range(count)]
    if algorithm == "bidir_ring":
        half = math.ceil(nbytes / n / 2)
        both = ([(group[i], group[(i + 1) % n], half, 1) for i in range(n)]
                + [(group[i], group[i - 1], half, -1) for i in range(n)])
        return [list(both) for _ in range(count)]
    if op != "all_reduce":
        raise CollectiveError(f"the tree algorithm implements all_reduce only, not {op}; "
                              f"use ring")
    reduce_steps = []
    stride = 1
    while stride < n:
        reduce_steps.append([(group[i + stride], group[i], nbytes, 1)
                             for i in range(0, n, 2 * stride) if i + stride < n])
        stride *= 2
    broadcast = [[(dst, src, size, 1) for src, dst, size, _ in step]
                 for step in reversed(reduce_steps)]
    return reduce_steps + broadcast


def run_collective(fabric: Any, op: str, algorithm: str, group: tuple[int, ...],
                   nbytes: int) -> Generator[Any, Any, None]:
    """A SimPy process: the collective's steps, one after the other, on ``fabric``."""
    env = fabric.env
    if algorithm != "tree":
        group = fabric.interconnect.ring_order(group)
    for step in collective_steps(op, algorithm, group, nbytes):
        yield env.all_of([fabric.send(*transfer) for transfer in step])


__all__ = ["ALGORITHMS", "COLLECTIVES", "CollectiveError", "collective_steps", "run_collective"]
