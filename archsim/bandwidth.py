"""Shared bandwidth: transfers in flight share links with max-min fairness.

Every shared path element (DRAM, a core's NoC link, a scratchpad port, the shared
SRAM, the host link) is a *link* with a capacity in bytes per cycle. A transfer is a
*flow* over a tuple of links with its own cap (its DMA engine's bandwidth). A flow
alone runs at its *solo* rate: the minimum of its cap and its links' capacities.
While some link is oversubscribed (the solo rates of its flows add up to more than
its capacity), rates are max-min fair (water-filling). Rates are recomputed in each
cycle in which flows start or end (once, however many), and one wake-up is kept
scheduled for the next completion, so contention and overlap emerge from the
simulation at fewer than two events per transfer.

Time is integer cycles: a completion is scheduled at the ceiling of the exact time.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import simpy

_SLACK = 1 + 1e-12
_DONE = 1e-6


def solo_rate(links: tuple[int, ...], cap: float, capacity: list[float]) -> float:
    """The rate a flow gets alone: its cap or its narrowest link."""
    rate = cap
    for link in links:
        if capacity[link] < rate:
            rate = capacity[link]
    return rate


def cycles_to_move(nbytes: float, rate: float) -> int:
    """Whole cycles to move ``nbytes`` at ``rate`` (the ceiling of the exact time)."""
    return whole_cycles(nbytes / rate)


def whole_cycles(exact: float) -> int:
    """The ceiling of an exact time, forgiving float error just above an integer."""
    return max(0, math.ceil(exact - 1e-9))


class _Flow:
    __slots__ = ("links", "tracked", "solo", "remaining", "rate", "token")

    def __init__(self, links: tuple[int, ...], solo: float, nbytes: float, token: int,
                 tracked: tuple[int, ...]) -> None:
        self.links = links
        self.tracked = tracked
        """The links whose demand this flow counts in (see :meth:`FlowNetwork.transfer`)."""
        self.solo = solo
        self.remaining = nbytes
        self.rate = solo
        self.token = token


class FlowNetwork:
    """Links with capacities and the flows crossing them.

    Flows that start in the same cycle join together, and flows that finish in the
    same cycle leave together: rates are recomputed once per cycle in which something
    changes, whatever the number of transfers involved, and ``on_finish`` hears of
    every flow that finished in a cycle at once.
    """

    def __init__(self, env: simpy.Environment, capacities: tuple[float, ...] = (),
                 on_finish: Callable[[list[int]], None] | None = None) -> None:
        """``capacities`` pre-registers unnamed links (a plan made elsewhere knows
        their indices); ``on_finish(tokens)`` is called with the tokens of the flows
        that finished, in the cycle they finished."""
        self.env = env
        self.names: list[str] = [f"link{i}" for i in range(len(capacities))]
        self.capacity: list[float] = [float(c) for c in capacities]
        self.on_finish = on_finish
        self._flows: list[_Flow] = []
        self._spare: list[_Flow] = []
        """Finished flows, reused by later transfers: a run makes an object per transfer
        in flight rather than per transfer."""
        self._starting: dict[int, list[_Flow]] = {}
        """Flows waiting for their start cycle, by cycle (one SimPy event per cycle)."""
        self._demand: list[float] = [0.0] * len(capacities)
        self._limit: list[float] = [c * _SLACK for c in self.capacity]
        """Demand above which a link is oversubscribed (its capacity, less float noise)."""
        self._oversubscribed: set[int] = set()
        """Links whose flows' solo rates add up to more than their capacity."""
        self._updated_at = 0
        self._wake_at = -1
        """Cycle of the next completion (-1: no flows)."""
        self._armed: set[int] = set()
        """Cycles with a wake-up event outstanding. A wake-up that comes too early
        (flows slowed down after it was set) re-arms itself, so rates changing many
        times before a completion cost no extra events."""

    def add_link(self, name: str, bytes_per_cycle: float) -> int:
        """Register a link; returns its index (used in flow paths)."""
        if bytes_per_cycle <= 0:
            raise ValueError(f"link {name!r}: bandwidth must be > 0, got {bytes_per_cycle}")
        self.names.append(name)
        self.capacity.append(float(bytes_per_cycle))
        self._demand.append(0.0)
        self._limit.append(float(bytes_per_cycle) * _SLACK)
        return len(self.names) - 1

    def transfer(self, links: tuple[int, ...], nbytes: float, solo: float, at: int,
                 token: int, tracked: tuple[int, ...] | None = None) -> None:
        """Move ``nbytes`` (a float) over ``links``, at most ``solo`` bytes/cycle (see
        :func:`solo_rate`), starting in cycle ``at`` (not before now); ``token`` is
        handed to ``on_finish`` when the last byte arrives.

        ``tracked`` (by default all of ``links``) are the links whose demand the network
        tracks to find the oversubscribed ones. A caller that knows that some link can
        never be oversubscribed (the solo rates of all the flows that could cross it at
        once fit in its capacity) may leave it out: the rates are the same, and each
        flow costs less to start and to end."""
        if tracked is None:
            tracked = links
        spare = self._spare
        if spare:
            flow = spare.pop()
            flow.links = links
            flow.tracked = tracked
            flow.solo = flow.rate = solo
            flow.remaining = nbytes
            flow.token = token
        else:
            flow = _Flow(links, solo, nbytes, token, tracked)
        batch = self._starting.get(at)
        if batch is None:
            self._starting[at] = [flow]
            self.env.timeout(at - self.env.now).callbacks.append(self._begin)
        else:
            batch.append(flow)

    # -- internals ------------------------------------------------------------------
    def _begin(self, _event: simpy.Event) -> None:
        """The flows due this cycle join; empty ones finish on the spot."""
        now = self.env.now
        batch = self._starting.pop(now)
        self._advance(now)
        demand, limit, over = self._demand, self._limit, self._oversubscribed
        empty = []
        for flow in batch:
            if flow.remaining <= 0:
                empty.append(flow.token)
                continue
            solo = flow.solo
            for link in flow.tracked:  # demand only grows here
                load = demand[link] + solo
                demand[link] = load
                if load > limit[link]:
                    over.add(link)
        self._flows += [f for f in batch if f.remaining > 0] if empty else batch
        if over:
            self._share()
        self._schedule_wake(now)
        if empty:
            self.on_finish(empty)

    def _on_wake(self, _event: simpy.Event) -> None:
        now = self.env.now
        self._armed.discard(now)
        if self._wake_at != now:  # set before flows slowed down (or all left)
            self._arm(now)
            return
        # _advance and the split into finished and continuing flows, in one pass
        elapsed = now - self._updated_at
        self._updated_at = now
        finished, still = [], []
        for f in self._flows:
            rate, remaining = f.rate, f.remaining
            if elapsed:
                remaining -= rate * elapsed
                f.remaining = remaining
            if remaining <= rate * _DONE:
                finished.append(f)
            else:
                still.append(f)
        if finished:
            self._flows = still
            demand, over = self._demand, self._oversubscribed
            if over:
                limit = self._limit
                for flow in finished:
                    for link in flow.tracked:  # demand only shrinks here
                        demand[link] -= flow.solo
                        if demand[link] <= limit[link]:
                            over.discard(link)
                if over:
                    self._share()
                else:  # the last oversubscribed link was relieved: all run alone
                    for f in still:
                        f.rate = f.solo
            else:  # nothing was throttled, so nothing can be relieved (the common case)
                for flow in finished:
                    solo = flow.solo
                    for link in flow.tracked:
                        demand[link] -= solo
        self._schedule_wake(now)
        if finished:
            tokens = [f.token for f in finished]
            self._spare += finished
            self.on_finish(tokens)

    def _share(self) -> None:
        """Max-min fair rates. With one oversubscribed link (the common case: DRAM),
        only its flows are throttled and one sorted pass fills it; otherwise general
        water-filling."""
        if len(self._oversubscribed) > 1:
            self._water_fill()
            return
        (link,) = self._oversubscribed
        sharing = []
        slowest = math.inf
        for f in self._flows:
            if link in f.links:
                sharing.append(f)
                if f.solo < slowest:
                    slowest = f.solo
            else:
                f.rate = f.solo
        left = self.capacity[link]
        count = len(sharing)
        fair = left / count
        if slowest > fair:  # every flow wants more than an equal share: that is the fill
            for f in sharing:
                f.rate = fair
            return
        sharing.sort(key=_solo)
        for k, f in enumerate(sharing):
            share = left / (count - k)
            if f.solo <= share:
                f.rate = f.solo
                left -= f.solo
                continue
            for g in sharing[k:]:
                g.rate = share
            return

    def _advance(self, now: int) -> None:
        """Drain the bytes moved since the last update at the current rates."""
        elapsed = now - self._updated_at
        if elapsed:
            for f in self._flows:
                f.remaining -= f.rate * elapsed
            self._updated_at = now

    def _schedule_wake(self, now: int) -> None:
        """Set the next completion (rates just changed) and make sure a wake-up event
        comes no later."""
        if not self._flows:
            self._wake_at = -1
            return
        # the ceiling is monotone: ceil of the soonest exact finish = the soonest ceil
        self._wake_at = now + whole_cycles(
            min([f.remaining / f.rate for f in self._flows]))
        self._arm(now)

    def _arm(self, now: int) -> None:
        wake_at = self._wake_at
        if wake_at < 0 or (self._armed and min(self._armed) <= wake_at):
            return
        self._armed.add(wake_at)
        self.env.timeout(wake_at - now).callbacks.append(self._on_wake)

    def _water_fill(self) -> None:
        """Max-min fair rates, each flow also limited by its solo rate (its cap, or a
        link it would fill alone)."""
        left = list(self.capacity)
        users = [0] * len(left)
        for f in self._flows:
            for link in f.links:
                users[link] += 1
        used = [link for link, n in enumerate(users) if n]
        pending = self._flows
        while pending:
            share = min(left[link] / users[link] for link in used if users[link])
            fixed = [f for f in pending if f.solo <= share]
            if fixed:
                for f in fixed:
                    f.rate = f.solo
            else:
                limit = share * _SLACK
                fixed = [f for f in pending
                         if any(left[link] / users[link] <= limit for link in f.links)]
                for f in fixed:
                    f.rate = share
            for f in fixed:
                for link in f.links:
                    left[link] -= f.rate
                    users[link] -= 1
            if len(fixed) == len(pending):
                return
            pending = [f for f in pending if f not in fixed]


def _solo(flow: _Flow) -> float:
    return flow.solo


__all__ = ["FlowNetwork"]
