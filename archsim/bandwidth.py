"""Shared bandwidth: transfers in flight share links with max-min fairness.

Every shared path element (DRAM, a core's NoC link, a scratchpad port, the shared
SRAM, the host link) is a *link* with a capacity in bytes per cycle. A transfer is a
*flow* over a tuple of links with its own cap (its DMA engine's bandwidth). Whenever a
flow starts or ends, the rates of all flows in flight are recomputed by water-filling
and the next completion is rescheduled. Contention and overlap thus emerge from the
simulation, at a cost of a few events per transfer instead of one per burst.

Time is integer cycles: a flow's completion is scheduled at the ceiling of its exact
finish time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import simpy

_DONE_EPSILON = 1e-6


@dataclass
class _Flow:
    links: tuple[int, ...]
    cap: float
    remaining: float
    done: simpy.Event
    rate: float = 0.0


class FlowNetwork:
    """Links with capacities and the flows crossing them."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.names: list[str] = []
        self.capacity: list[float] = []
        self.bytes_moved: list[float] = []
        self._index: dict[str, int] = {}
        self._flows: list[_Flow] = []
        self._last_update = 0
        self._generation = 0

    def add_link(self, name: str, bytes_per_cycle: float) -> int:
        """Register a link; returns its index (used in flow paths)."""
        if bytes_per_cycle <= 0:
            raise ValueError(f"link {name!r}: bandwidth must be > 0, got {bytes_per_cycle}")
        self._index[name] = len(self.names)
        self.names.append(name)
        self.capacity.append(float(bytes_per_cycle))
        self.bytes_moved.append(0.0)
        return self._index[name]

    def link(self, name: str) -> int:
        return self._index[name]

    def transfer(self, links: tuple[int, ...], nbytes: float, cap: float) -> simpy.Event:
        """Start a flow of ``nbytes`` over ``links`` at most ``cap`` bytes/cycle; the
        returned event fires when the last byte arrives."""
        done = self.env.event()
        for link in links:
            self.bytes_moved[link] += nbytes
        if nbytes <= 0:
            done.succeed()
            return done
        self._advance()
        self._flows.append(_Flow(links, cap, float(nbytes), done))
        self._reschedule()
        return done

    # -- internals ------------------------------------------------------------------
    def _advance(self) -> None:
        """Drain bytes moved since the last update at the current rates."""
        now = self.env.now
        elapsed = now - self._last_update
        if elapsed:
            for flow in self._flows:
                flow.remaining -= flow.rate * elapsed
        self._last_update = now

    def _reschedule(self) -> None:
        self._allocate()
        self._generation += 1
        if not self._flows:
            return
        delay = min(math.ceil(f.remaining / f.rate - 1e-9) for f in self._flows)
        wake = self.env.timeout(max(delay, 0))
        generation = self._generation
        wake.callbacks.append(lambda _event: self._on_wake(generation))

    def _on_wake(self, generation: int) -> None:
        if generation != self._generation:
            return  # superseded by a later start/finish
        self._advance()
        finished = [f for f in self._flows if f.remaining <= _DONE_EPSILON]
        self._flows = [f for f in self._flows if f.remaining > _DONE_EPSILON]
        for flow in finished:
            flow.done.succeed()
        self._reschedule()

    def _allocate(self) -> None:
        """Max-min fair rates (water-filling), each flow also limited by its cap."""
        flows = self._flows
        if len(flows) == 1:
            flow = flows[0]
            flow.rate = min(flow.cap, *(self.capacity[link] for link in flow.links))
            return
        left: dict[int, float] = {}
        users: dict[int, int] = {}
        for f in flows:
            for link in f.links:
                left[link] = self.capacity[link]
                users[link] = users.get(link, 0) + 1
        pending = flows
        while pending:
            share = min(left[link] / n for link, n in users.items() if n)
            fixed = [f for f in pending if f.cap <= share]
            if fixed:
                for f in fixed:
                    f.rate = f.cap
            else:
                tight = {link for link, n in users.items()
                         if n and left[link] / n <= share * (1 + 1e-12)}
                fixed = [f for f in pending if not tight.isdisjoint(f.links)]
                for f in fixed:
                    f.rate = share
            for f in fixed:
                for link in f.links:
                    left[link] -= f.rate
                    users[link] -= 1
            done = set(map(id, fixed))
            pending = [f for f in pending if id(f) not in done]


__all__ = ["FlowNetwork"]
