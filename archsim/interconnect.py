"""Chip-to-chip interconnect: the links joining ``chips`` copies of a chip, on a flow
network, and the route a transfer takes between two chips.

Links are directed (one per neighbour direction), so traffic in opposite directions
does not contend. A transfer between chips pays the per-hop latency once per hop and
is then one flow over every link of its route: transfers sharing a link share its
bandwidth max-min fairly (see :mod:`archsim.bandwidth`).
"""

from __future__ import annotations

import math
from itertools import product

import simpy

from archsim.bandwidth import FlowNetwork
from archsim.config.model import InterconnectConfig
from archsim.errors import ConfigError

_DIMENSIONS = {"ring": 1, "torus2d": 2, "torus3d": 3}


def grid_shape(chips: int, dimensions: int) -> tuple[int, ...]:
    """The most nearly square (cubic) grid of ``chips``: the factors closest to each
    other, largest first; e.g. 8 chips in 3 dimensions -> (2, 2, 2), 4 in 3 -> (2, 2, 1)."""
    divisors = [d for d in range(1, chips + 1) if chips % d == 0]
    best: tuple[int, ...] = (chips,) + (1,) * (dimensions - 1)
    for dims in product(divisors, repeat=dimensions):
        if math.prod(dims) == chips and max(dims) - min(dims) < max(best) - min(best):
            best = dims
    return tuple(sorted(best, reverse=True))


class Interconnect:
    """The links of ``chips`` chips joined by ``config``'s topology."""

    def __init__(self, network: FlowNetwork, config: InterconnectConfig, chips: int,
                 clock_hz: int) -> None:
        self.network = network
        self.config = config
        self.chips = chips
        self.latency_cycles = config.latency_cycles
        per_link = config.link_bandwidth_gb_per_s * 1e9 / clock_hz
        self._routes: dict[tuple[int, int, int], tuple[tuple[int, ...], int]] = {}
        if config.topology == "switch":
            port = per_link * config.links_per_chip
            up = [network.add_link(f"chip{c}.up", port) for c in range(chips)]
            down = [network.add_link(f"chip{c}.down", port) for c in range(chips)]
            for a in range(chips):
                for b in range(chips):
                    for prefer in (1, -1):
                        self._routes[a, b, prefer] = ((up[a], down[b]), 1)
            return
        dimensions = _DIMENSIONS[config.topology]
        self.shape = grid_shape(chips, dimensions)
        share = per_link * max(1, config.links_per_chip // (2 * dimensions))
        self._links: dict[tuple[int, int, int], int] = {}
        """(chip, dimension, +1/-1) -> link index."""
        for chip in range(chips):
            for d, size in enumerate(self.shape):
                if size == 1:
                    continue
                for step in (1, -1):
                    self._links[chip, d, step] = network.add_link(
                        f"chip{chip}.d{d}{'+' if step > 0 else '-'}", share)

    def route(self, src: int, dst: int, prefer: int = 1) -> tuple[tuple[int, ...], int]:
        """Links a transfer from chip ``src`` to chip ``dst`` crosses, and its hops:
        dimension by dimension, the shorter way round each (ties go the ``prefer`` way,
        +1 or -1, so two chips of a 2-wide dimension can use both links between them)."""
        for chip in (src, dst):
            if not 0 <= chip < self.chips:
                raise ConfigError([f"chip {chip} is not one of the {self.chips} chips"],
                                  source="interconnect")
        cached = self._routes.get((src, dst, prefer))
        if cached is not None:
            return cached
        here = list(self._coords(src))
        goal = self._coords(dst)
        links: list[int] = []
        for d, size in enumerate(self.shape):
            forward = (goal[d] - here[d]) % size
            backward = size - forward
            step = prefer if forward == backward else (1 if forward < backward else -1)
            for _ in range(min(forward, size - forward)):
                links.append(self._links[self._index(here), d, step])
                here[d] = (here[d] + step) % size
        found = (tuple(links), len(links))
        self._routes[src, dst, prefer] = found
        return found

    def ring_order(self, group: tuple[int, ...]) -> tuple[int, ...]:
        """``group`` reordered so that consecutive chips are grid neighbours where the
        grid allows (a snake through the torus); a switch or ring keeps the order."""
        if self.config.topology in ("switch", "ring"):
            return group
        members = set(group)
        return tuple(c for c in _snake(self.shape) if c in members)

    def _coords(self, chip: int) -> tuple[int, ...]:
        coords = []
        for size in reversed(self.shape):
            coords.append(chip % size)
            chip //= size
        return tuple(reversed(coords))

    def _index(self, coords: list[int]) -> int:
        index = 0
        for c, size in zip(coords, self.shape):
            index = index * size + c
        return index


def _snake(shape: tuple[int, ...]) -> list[int]:
    """Every chip of a grid in boustrophedon order: the last dimension runs back and
    forth, so each chip follows a neighbour of the one before."""
    if len(shape) == 1:
        return list(range(shape[0]))
    inner = _snake(shape[1:])
    stride = math.prod(shape[1:])
    order: list[int] = []
    for i in range(shape[0]):
        row = inner if i % 2 == 0 else inner[::-1]
        order += [i * stride + c for c in row]
    return order


class Fabric:
    """Transfers between chips as SimPy events: each waits its route's latency, then
    flows over its links."""

    def __init__(self, env: simpy.Environment, config: InterconnectConfig, chips: int,
                 clock_hz: int) -> None:
        self.env = env
        self.network = FlowNetwork(env, on_finish=self._finished)
        self.interconnect = Interconnect(self.network, config, chips, clock_hz)
        self._waiting: dict[int, simpy.Event] = {}
        self._next_token = 0
        self.bytes_moved = 0

    def send(self, src: int, dst: int, nbytes: int, prefer: int = 1) -> simpy.Event:
        """An event that fires when ``nbytes`` from chip ``src`` have reached ``dst``
        (``prefer``: see :meth:`Interconnect.route`)."""
        done = self.env.event()
        if src == dst or nbytes <= 0:
            done.succeed()
            return done
        links, hops = self.interconnect.route(src, dst, prefer)
        token = self._next_token
        self._next_token += 1
        self._waiting[token] = done
        self.bytes_moved += nbytes
        rate = min(self.network.capacity[link] for link in links)
        at = self.env.now + hops * self.interconnect.latency_cycles
        self.network.transfer(links, float(nbytes), rate, at, token)
        return done

    def _finished(self, tokens: list[int]) -> None:
        for token in tokens:
            self._waiting.pop(token).succeed()
