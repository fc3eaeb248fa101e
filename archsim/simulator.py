"""Runs a scheduled program on a configured chip.

Each engine walks its queue in program order; a command starts when its engine is
free and its dependencies have finished. Costs are decided before the run
(:mod:`archsim.timing`) in a :class:`~archsim.plan.Plan`, built once per (program, config) and
reused when the same program object runs again (compiled programs are cached and
re-run: eager ops, repeated graphs). Compute has fixed durations and shares nothing,
so its end is known as soon as its start is; transfers share links, so they are
simulated in SimPy by the flow network (:mod:`archsim.bandwidth`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import simpy

from archsim.bandwidth import FlowNetwork
from archsim.config.model import NpuConfig
from archsim.errors import SimulationError
from archsim.functional import HostFunction
from archsim.functional_steps import FunctionalExecutor
from archsim.plan import Plan, plan_for
from archsim.result import SimResult
from compiler.ir.collector import paused
from compiler.ir.ops import Program


MAX_CYCLES = 2 ** 62
"""The longest run archsim reports (timelines are int64 arrays)."""


class Simulator:
    """``Simulator(config).run(program, inputs=None) -> SimResult``.

    With ``inputs`` (a mapping from DRAM tensor names to arrays) the run is functional
    and ``SimResult.outputs`` holds every DRAM tensor's final value; without, it is
    performance-only: no data is allocated and the cycles are the same.
    """

    def __init__(self, config: NpuConfig) -> None:
        self.config = config

    def run(self, program: Program, inputs: Mapping[str, Any] | None = None, *,
            host_functions: Mapping[str, HostFunction] | None = None,
            verify: bool = True) -> SimResult:
        with paused():  # see compiler.ir.collector
            plan = plan_for(program, self.config, verify)
            return _Run(plan, inputs, host_functions or {}).execute()


class _Engine:
    """One engine's in-order queue."""

    __slots__ = ("queue", "length", "pos", "free_at", "busy", "slots", "flying", "waiting",
                 "saving")

    def __init__(self, queue: list[int], slots: int = 1, saving: int = 0) -> None:
        self.queue = queue
        self.length = len(queue)
        self.pos = 0
        self.free_at = 0
        """Cycle at which the next command may start: the last resolved command's end,
        or, with transfers in flight, the last one's start (issue is in order)."""
        self.busy = False
        """As many transfers are in flight as the engine keeps (``slots``)."""
        self.slots = slots
        self.saving = saving
        """Cycles a compute command saves when it starts the cycle the previous ends."""
        self.flying = 0
        self.waiting: deque[int] = deque()
        """Transfers in flight whose data waits for the one streaming (their latency
        ends at their start plus their fixed cycles)."""


class _Run:
    """State of one simulation (kept off the Simulator so runs cannot leak into each
    other)."""

    def __init__(self, plan: Plan, inputs: Mapping[str, Any] | None,
                 host_functions: Mapping[str, HostFunction]) -> None:
        self.plan = plan
        self.program = plan.program
        self.config = plan.config
        self.env = simpy.Environment()
        self.network = FlowNetwork(self.env, plan.link_capacities, self._transferred)
        self.n = plan.n
        self.deps = plan.deps
        self.steps = plan.run_steps
        self.queues = plan.queues
        self.starts = [0] * self.n
        self.ends = [-1] * self.n
        """A command's end cycle; -1 until it is resolved."""
        self.waiters: list[list[_Engine] | None] = [None] * self.n
        """Per command, the engines waiting for it to end (a list: indexing is cheaper
        than a dict's get and pop, which every command did)."""
        self.engines = [_Engine(queue, plan.in_flight[name], plan.saving[name])
                        for name, queue in self.queues.items()]
        self.engine_of = plan.engine_index
        """Per command, its engine's number in ``engines``."""
        self.ready: list[_Engine] = []
        self.executor: FunctionalExecutor | None = None
        if inputs is not None:
            self.executor = plan.executor(inputs, host_functions)

    def execute(self) -> SimResult:
        self.ready.extend(self.engines)
        self._drain()
        self.env.run()
        # the network calls back into this run (a reference cycle): cut it so the run's
        # per-command lists are freed as soon as the result is built, not by a later
        # cyclic collection that would walk them first
        self.network.on_finish = None
        ends: np.ndarray | None
        try:
            ends = np.fromiter(self.ends, np.int64, self.n)
        except OverflowError:  # an end past int64 (so past MAX_CYCLES)
            ends = None
        if -1 in self.ends if ends is None else self.n and ends.min() < 0:
            raise SimulationError(self._stuck_message())
        last = max(self.ends) if ends is None else int(ends.max()) if self.n else 0
        if last > MAX_CYCLES:  # (always so when ends is None)
            raise SimulationError(f"simulation of {self.program.name!r} ends at cycle {last:.3g},"
                                  f" past the {MAX_CYCLES:.3g} cycles (2**62) archsim counts; "
                                  f"check the cycle counts of host ops and the config's "
                                  f"latencies and bandwidths")
        return self._result(ends, last)

    # A command's start is max(its engine's previous end, its dependencies' ends).
    # Compute (matrix, vector, host) has a fixed duration and shares nothing, so its
    # end is known as soon as its start is: it is resolved on the spot, without an
    # event. Transfers share links, so their end comes from the flow network.

    def _drain(self) -> None:
        """Advance every ready engine through its queue until it starts a transfer,
        waits on a dependency or runs out of commands (one loop for all of them: this
        is the simulator's innermost code)."""
        deps, starts, ends, steps = self.deps, self.starts, self.ends, self.steps
        waiters, ready, transfer = self.waiters, self.ready, self.network.transfer
        functional = self.executor is not None
        while ready:
            engine = ready.pop()
            if engine.busy:
                continue
            queue = engine.queue
            pos = engine.pos
            free = engine.free_at
            count = engine.length
            while pos < count:
                i = queue[pos]
                start = free
                for d in deps[i]:
                    end = ends[d]
                    if end < 0:  # wait: the engine is ready again when d ends
                        woken = waiters[d]
                        if woken is None:  # (usually the only one waiting on d)
                            waiters[d] = [engine]
                        else:
                            woken.append(engine)
                        break
                    if end > start:
                        start = end
                else:
                    starts[i] = start
                    if functional:
                        self.execute_command(i)
                    fixed, links, nbytes, solo, tracked = steps[i]
                    if links:  # in flight until the flow network says it ended
                        flying = engine.flying
                        if flying:  # its data streams after the one before
                            engine.waiting.append(i)
                        else:
                            transfer(links, nbytes, solo, start + fixed, i, tracked)
                        pos += 1
                        free = start
                        engine.flying = flying = flying + 1
                        if flying == engine.slots:
                            engine.busy = True
                            break
                        continue
                    saving = engine.saving
                    if saving and pos and start == free:  # back to back
                        fixed = fixed - saving if fixed - saving > 1 else 1
                    free = ends[i] = start + fixed
                    woken = waiters[i]
                    if woken is not None:  # (no one waits on it again: it has ended)
                        ready.extend(woken)
                    pos += 1
                    continue
                break
            engine.pos, engine.free_at = pos, free

    def _transferred(self, finished: list[int]) -> None:
        """Transfers that ended this cycle free their engines and wake their waiters."""
        now = self.env.now
        ends, ready, waiters = self.ends, self.ready, self.waiters
        engines, engine_of = self.engines, self.engine_of
        starts, steps, transfer = self.starts, self.steps, self.network.transfer
        for i in finished:
            engine = engines[engine_of[i]]
            ends[i] = now
            engine.flying -= 1
            if engine.waiting:
                j = engine.waiting.popleft()
                fixed, links, nbytes, solo, tracked = steps[j]
                at = starts[j] + fixed  # its latency ends
                transfer(links, nbytes, solo, at if at > now else now, j, tracked)
            if engine.busy:  # a slot is free again: the next command may start now
                engine.busy = False
                engine.free_at = now
                ready.append(engine)
            woken = waiters[i]
            if woken is not None:
                ready.extend(woken)
        self._drain()

    def execute_command(self, i: int) -> None:
        self.executor.execute_command(self.program.commands[i])

    def _stuck_message(self) -> str:
        commands = self.program.commands
        lines = []
        for engine, queue in self.queues.items():
            head = next((i for i in queue if self.ends[i] < 0), None)
            if head is None:
                continue
            waiting = [commands[d].id for d in self.deps[head] if self.ends[d] < 0]
            lines.append(f"command {commands[head].id} on {engine} waits on "
                         f"{', '.join(map(str, waiting))}")
        stuck = self.ends.count(-1)
        return (f"simulation of {self.program.name!r} cannot finish: {stuck} commands never "
                f"started; " + "; ".join(lines))

    def _result(self, ends: np.ndarray, last: int) -> SimResult:
        plan = self.plan
        starts = np.fromiter(self.starts, np.int64, self.n)
        busy = {engine: busy_cycles(starts[queue], ends[queue], plan.in_flight[engine])
                for engine, queue in plan.queue_arrays.items()}
        outputs = None
        if self.executor is not None:
            outputs = MappingProxyType(self.executor.memory.output_values())
        return SimResult(
            program=self.program,
            config=self.config,
            total_cycles=last,
            starts=starts,
            ends=ends,
            command_bytes=plan.nbytes,
            command_flops=plan.flops,
            engine_busy_cycles=MappingProxyType(busy),
            dram_bytes_read=plan.dram_read,
            dram_bytes_written=plan.dram_written,
            host_link_bytes=plan.host_bytes,
            matmul_flops=plan.matmul_flops,
            flops=int(plan.flops.sum()),
            link_bytes=plan.link_bytes,
            outputs=outputs,
        )


def busy_cycles(starts: np.ndarray, ends: np.ndarray, in_flight: int) -> int:
    """Cycles an engine had at least one command running (commands start in queue
    order; with several in flight their spans overlap and are counted once)."""
    if in_flight == 1 or len(starts) == 0:
        return int((ends - starts).sum())
    reach = np.maximum.accumulate(ends)
    before = np.concatenate(([starts[0]], reach[:-1]))
    return int(np.maximum(reach - np.maximum(starts, before), 0).sum())
