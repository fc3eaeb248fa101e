"""Many chips: work already timed on one chip, collectives and point-to-point sends,
run together as a discrete-event simulation over the chip-to-chip interconnect.

A :class:`Compute` occupies its chip for a fixed number of cycles (decided by
simulating the program on one chip); a :class:`Collective` occupies every chip of its
group from the moment all of them reach it until its last transfer arrives, after the
fixed latency of the runtime (``runtime.collective_latency_us``, once per collective
over two chips or more); a :class:`Send` occupies no chip (a DMA engine moves it while
the chip computes); a :class:`Host` occupies the host CPU (one, shared by all chips)
and no chip. Each chip (and the host) runs its tasks in the order they are listed, each
starting when it is free and the task's dependencies (indices of earlier tasks) are
done, so pipeline bubbles, link contention and overlap between sends and compute
emerge.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import simpy

from archsim.collectives import collective_steps, run_collective
from archsim.config.model import NpuConfig
from archsim.errors import ConfigError


@dataclass(frozen=True)
class Compute:
    name: str
    chip: int
    cycles: int
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class Collective:
    name: str
    op: str
    """``all_reduce``, ``all_gather`` or ``reduce_scatter``."""
    chips: tuple[int, ...]
    nbytes: int
    """Size of the whole tensor on each chip."""
    deps: tuple[int, ...] = ()
    algorithm: str = "ring"


@dataclass(frozen=True)
class Send:
    name: str
    src: int
    dst: int
    nbytes: int
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class Host:
    """Work of the host CPU (sampling, scheduling, preparing inputs) for ``cycles``
    chip-clock cycles; the host runs one at a time, in list order."""

    name: str
    cycles: int
    deps: tuple[int, ...] = ()


Task = Compute | Collective | Send | Host


@dataclass(frozen=True)
class Span:
    """When a task ran (cycles)."""

    task: Task
    start: int
    end: int

    @property
    def chips(self) -> tuple[int, ...]:
        task = self.task
        if isinstance(task, Compute):
            return (task.chip,)
        if isinstance(task, Collective):
            return task.chips
        if isinstance(task, Host):
            return ()
        return (task.src, task.dst)


@dataclass(frozen=True)
class ClusterResult:
    chips: int
    total_cycles: int
    spans: tuple[Span, ...]
    """One per task, in task order."""
    link_bytes: int
    """Bytes moved between chips (each transfer counted once, whatever its hops)."""

    def busy_cycles(self, chip: int, kind: type) -> int:
        """Cycles ``chip`` spent in tasks of ``kind`` (Compute or Collective)."""
        return sum(s.end - s.start for s in self.spans
                   if isinstance(s.task, kind) and chip in s.chips)


def run_cluster(tasks: Sequence[Task], config: NpuConfig, chips: int) -> ClusterResult:
    """Simulate ``tasks`` on ``chips`` copies of ``config``'s chip."""
    env = simpy.Environment()
    fabric = None
    if any(_crosses_chips(t) for t in tasks):
        if config.interconnect is None:
            raise ConfigError([f"{config.name} has no interconnect section: it cannot join "
                               f"{chips} chips (add one; see 'interconnect' in README)"],
                              source=config.name)
        from archsim.interconnect import Fabric
        fabric = Fabric(env, config.interconnect, chips, config.clock_hz)
    done = [env.event() for _ in tasks]
    starts = [0] * len(tasks)
    ends = [0] * len(tasks)
    queues: list[list[int]] = [[] for _ in range(chips + 1)]
    """Each chip's tasks, then the host's."""
    fixed = config.us_to_cycles(config.runtime.collective_latency_us)
    arrivals: dict[int, list[simpy.Event]] = {}
    for index, task in enumerate(tasks):
        for dep in task.deps:
            if not 0 <= dep < index:
                raise ValueError(f"task {index} ({task.name}) depends on {dep}, "
                                 f"not an earlier task")
        if isinstance(task, Send):
            env.process(_send(env, fabric, task, index, done, starts, ends))
            continue
        if isinstance(task, Host):
            queues[chips].append(index)
            continue
        members = (task.chip,) if isinstance(task, Compute) else task.chips
        for chip in members:
            if not 0 <= chip < chips:
                raise ValueError(f"task {task.name} uses chip {chip} of {chips}")
            queues[chip].append(index)
        if isinstance(task, Collective):
            collective_steps(task.op, task.algorithm, task.chips, 0)  # a bad name fails here
            arrivals[index] = [env.event() for _ in task.chips]
            env.process(_collective(env, fabric, task, index, arrivals[index], done,
                                    starts, ends, fixed if len(task.chips) > 1 else 0))
    for chip, queue in enumerate(queues):
        env.process(_chip(env, chip, queue, tasks, arrivals, done, starts, ends))
    env.run()
    spans = tuple(Span(t, starts[i], ends[i]) for i, t in enumerate(tasks))
    total = max(ends, default=0)
    return ClusterResult(chips, total, spans, fabric.bytes_moved if fabric else 0)


def _crosses_chips(task: Task) -> bool:
    if isinstance(task, Send):
        return task.src != task.dst and task.nbytes > 0
    return isinstance(task, Collective) and len(task.chips) > 1 and task.nbytes > 0


def _chip(env: simpy.Environment, chip: int, queue: list[int], tasks: Sequence[Task],
          arrivals: dict[int, list[simpy.Event]], done: list[simpy.Event],
          starts: list[int], ends: list[int]) -> Generator[Any, Any, None]:
    for index in queue:
        task = tasks[index]
        deps = [done[d] for d in task.deps]
        if deps:
            yield env.all_of(deps)
        if isinstance(task, (Compute, Host)):
            starts[index] = env.now
            if task.cycles:
                yield env.timeout(task.cycles)
            ends[index] = env.now
            done[index].succeed()
        else:  # a collective: arrive, then wait for the whole group to finish it
            arrivals[index][task.chips.index(chip)].succeed()
            yield done[index]


def _collective(env: simpy.Environment, fabric: Any, task: Collective, index: int,
                arrivals: list[simpy.Event], done: list[simpy.Event], starts: list[int],
                ends: list[int], fixed: int) -> Generator[Any, Any, None]:
    yield env.all_of(arrivals)
    starts[index] = env.now
    if fixed:  # the runtime's launch and handshake, once per collective
        yield env.timeout(fixed)
    if fabric is not None:
        yield env.process(run_collective(fabric, task.op, task.algorithm, task.chips,
                                         task.nbytes))
    ends[index] = env.now
    done[index].succeed()


def _send(env: simpy.Environment, fabric: Any, task: Send, index: int,
          done: list[simpy.Event], starts: list[int], ends: list[int]
          ) -> Generator[Any, Any, None]:
    deps = [done[d] for d in task.deps]
    if deps:
        yield env.all_of(deps)
    starts[index] = env.now
    if fabric is not None:
        yield fabric.send(task.src, task.dst, task.nbytes)
    ends[index] = env.now
    done[index].succeed()


__all__ = ["ClusterResult", "Collective", "Compute", "Host", "Send", "Span", "Task",
           "run_cluster"]
