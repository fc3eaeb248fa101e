"""Runs a scheduled program on a configured chip.

Each engine walks its queue in program order; a command starts when its engine is
free and its dependencies have finished. Costs are decided before the run
(:mod:`archsim.timing`) in a :class:`_Plan`, built once per (program, config) and
reused when the same program object runs again (compiled programs are cached and
re-run: eager ops, repeated graphs). Compute has fixed durations and shares nothing,
so its end is known as soon as its start is; transfers share links, so they are
simulated in SimPy by the flow network (:mod:`archsim.bandwidth`).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Mapping
from operator import attrgetter
from types import MappingProxyType
from typing import Any

import numpy as np
import simpy

from archsim.bandwidth import FlowNetwork
from archsim.chip import Chip
from archsim.config.model import NpuConfig
from archsim.errors import SimulationError
from archsim.functional import FunctionalExecutor, HostFunction, Memory
from archsim.result import SimResult
from archsim.timing import CommandTiming
from compiler.ir.access import sram_operands
from compiler.ir.ops import Op, Program


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
        plan = _plan_for(program, self.config, verify)
        return _Run(plan, inputs, host_functions or {}).execute()


class _Plan:
    """Everything about a run that does not depend on time: per-command costs,
    dependencies as indices, engine queues, the links and their traffic, SRAM
    high-water marks, and the totals that follow from the costs alone."""

    def __init__(self, program: Program, config: NpuConfig) -> None:
        self.program = program
        self.config = config
        commands = program.commands
        self.n = len(commands)
        if all(c.id == i for i, c in enumerate(commands)):
            self.deps = [c.deps for c in commands]
        else:
            index = {c.id: i for i, c in enumerate(commands)}
            self.deps = [tuple(index[d] for d in c.deps) for c in commands]
        chip = Chip(simpy.Environment(), config, program.tensor_map)
        # Double-buffered loops repeat identical commands: cost each distinct one once.
        memo: dict[tuple[str, Op], CommandTiming] = {}
        self.timings: list[CommandTiming] = []
        for c in commands:
            key = (c.engine, c.op)
            timing = memo.get(key)
            if timing is None:
                timing = memo[key] = chip.timing(c.engine, c.op)
            self.timings.append(timing)
        self.queues: dict[str, list[int]] = {}
        for i, c in enumerate(commands):
            self.queues.setdefault(c.engine, []).append(i)
        self.link_names = tuple(chip.network.names)
        self.link_capacities = tuple(chip.network.capacity)
        moved = [0.0] * len(self.link_names)
        for t in self.timings:
            for link in t.links:
                moved[link] += t.nbytes
        self.link_bytes = MappingProxyType({name: int(b) for name, b in
                                           zip(self.link_names, moved)})
        field = {name: np.fromiter(map(attrgetter(name), self.timings), np.float64, self.n)
                 for name in ("flops", "nbytes", "dram_read", "dram_written", "host_bytes")}
        self.flops = field["flops"].astype(np.int64)
        self.nbytes = field["nbytes"].astype(np.int64)
        self.dram_read = int(field["dram_read"].sum())
        self.dram_written = int(field["dram_written"].sum())
        self.host_bytes = int(field["host_bytes"].sum())
        self.matmul_flops = sum(int(self.flops[q].sum()) for e, q in self.queues.items()
                                if ".mxu" in e)
        self.sram_peak = MappingProxyType(_sram_high_water(op for _, op in memo))
        capacity = _space_sizes(config)
        # functional runs allocate only the SRAM the program touches
        self.sram_sizes = {space: min(capacity.get(space, end), end)
                           for space, end in self.sram_peak.items()}


class _ProgramCache:
    """Plans (and verification) of one program object, per config."""

    __slots__ = ("program", "plans", "verified")

    def __init__(self, program: Program) -> None:
        self.program = weakref.ref(program)
        self.plans: dict[NpuConfig, _Plan] = {}
        self.verified: set[NpuConfig] = set()


_CACHE: dict[int, _ProgramCache] = {}
"""By object identity (hashing a program hashes every command); an entry goes away
with its program."""


def _plan_for(program: Program, config: NpuConfig, verify: bool) -> _Plan:
    """The plan of ``program`` on ``config``, verified first when asked — each done
    once per program object and config."""
    key = id(program)
    entry = _CACHE.get(key)
    if entry is None or entry.program() is not program:
        entry = _ProgramCache(program)
        weakref.finalize(program, _CACHE.pop, key, None)
        _CACHE[key] = entry
    if verify and config not in entry.verified:
        from compiler.ir.verify import verify as verify_program

        verify_program(program, config)
        entry.verified.add(config)
    plan = entry.plans.get(config)
    if plan is None:
        plan = entry.plans[config] = _Plan(program, config)
    return plan


class _Engine:
    """One engine's in-order queue."""

    __slots__ = ("queue", "pos", "free_at", "busy")

    def __init__(self, queue: list[int]) -> None:
        self.queue = queue
        self.pos = 0
        self.free_at = 0
        """Cycle at which the last resolved command ends."""
        self.busy = False
        """A transfer is in flight (its end is not known yet)."""


class _Run:
    """State of one simulation (kept off the Simulator so runs cannot leak into each
    other)."""

    def __init__(self, plan: _Plan, inputs: Mapping[str, Any] | None,
                 host_functions: Mapping[str, HostFunction]) -> None:
        self.plan = plan
        self.program = plan.program
        self.config = plan.config
        self.env = simpy.Environment()
        self.network = FlowNetwork(self.env, plan.link_capacities)
        self.n = plan.n
        self.deps = plan.deps
        self.timings = plan.timings
        self.queues = plan.queues
        self.starts = [0] * self.n
        self.ends = [0] * self.n
        self.done = [False] * self.n
        self.waiters: dict[int, list[_Engine]] = {}
        self.engines: list[_Engine] = []
        self.ready: list[_Engine] = []
        self.executor: FunctionalExecutor | None = None
        if inputs is not None:
            memory = Memory(self.program.tensor_map, plan.sram_sizes, inputs)
            self.executor = FunctionalExecutor(memory, host_functions)

    def execute(self) -> SimResult:
        self.engines = [_Engine(queue) for queue in self.queues.values()]
        self.ready: list[_Engine] = list(self.engines)
        self._drain()
        self.env.run()
        if not all(self.done):
            raise SimulationError(self._stuck_message())
        return self._result()

    # A command's start is max(its engine's previous end, its dependencies' ends).
    # Compute (matrix, vector, host) has a fixed duration and shares nothing, so its
    # end is known as soon as its start is: it is resolved on the spot, without an
    # event. Transfers share links, so their end comes from the flow network.

    def _drain(self) -> None:
        ready = self.ready
        while ready:
            self._advance(ready.pop())

    def _advance(self, engine: _Engine) -> None:
        deps, done, ends, timings = self.deps, self.done, self.ends, self.timings
        queue = engine.queue
        while engine.pos < len(queue) and not engine.busy:
            i = queue[engine.pos]
            start = engine.free_at
            for d in deps[i]:
                if not done[d]:
                    self.waiters.setdefault(d, []).append(engine)
                    return
                if ends[d] > start:
                    start = ends[d]
            self.starts[i] = start
            if self.executor is not None:
                self.execute_command(i)
            timing = timings[i]
            if timing.links:
                engine.busy = True
                delay = start - self.env.now + timing.fixed_cycles
                self.network.transfer(timing.links, timing.nbytes, timing.cap, delay,
                                      lambda i=i, engine=engine: self._transferred(i, engine))
                return
            end = start + timing.fixed_cycles
            engine.free_at = end
            engine.pos += 1
            self._resolved(i, end)

    def _transferred(self, i: int, engine: _Engine) -> None:
        engine.busy = False
        engine.free_at = self.env.now
        engine.pos += 1
        self._resolved(i, self.env.now)
        self.ready.append(engine)
        self._drain()

    def _resolved(self, i: int, end: int) -> None:
        self.ends[i] = end
        self.done[i] = True
        waiting = self.waiters.pop(i, None)
        if waiting:
            self.ready.extend(waiting)

    def execute_command(self, i: int) -> None:
        try:
            self.executor.execute(self.program.commands[i].op)
        except SimulationError:
            raise
        except Exception as exc:  # name the command; keep the cause chained
            c = self.program.commands[i]
            raise SimulationError(f"command {c.id} ({c.engine} {c.op.mnemonic}) failed in "
                                  f"functional mode: {type(exc).__name__}: {exc}") from exc

    def _stuck_message(self) -> str:
        commands = self.program.commands
        lines = []
        for engine, queue in self.queues.items():
            head = next((i for i in queue if not self.done[i]), None)
            if head is None:
                continue
            waiting = [commands[d].id for d in self.deps[head] if not self.done[d]]
            lines.append(f"command {commands[head].id} on {engine} waits on "
                         f"{', '.join(map(str, waiting))}")
        stuck = sum(1 for d in self.done if not d)
        return (f"simulation of {self.program.name!r} cannot finish: {stuck} commands never "
                f"started; " + "; ".join(lines))

    def _result(self) -> SimResult:
        plan = self.plan
        starts = np.asarray(self.starts, dtype=np.int64)
        ends = np.asarray(self.ends, dtype=np.int64)
        busy = {engine: int((ends[queue] - starts[queue]).sum())
                for engine, queue in self.queues.items()}
        outputs = None
        if self.executor is not None:
            outputs = MappingProxyType(self.executor.memory.output_values())
        return SimResult(
            program=self.program,
            config=self.config,
            total_cycles=int(ends.max()) if self.n else 0,
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
            sram_peak_bytes=plan.sram_peak,
            link_bytes=plan.link_bytes,
            outputs=outputs,
        )


def _space_sizes(config: NpuConfig) -> dict[str, int]:
    sizes = {f"sram{c}": config.core.scratchpad.size_bytes for c in range(config.cores)}
    if config.shared_sram.size_bytes:
        sizes["shared"] = config.shared_sram.size_bytes
    return sizes


def _sram_high_water(ops: Iterable[Op]) -> dict[str, int]:
    """Per SRAM space, the highest byte address any op touches: the scratchpad a
    schedule needs."""
    peak: dict[str, int] = {}
    for op in ops:
        for _, ref in sram_operands(op):
            if ref.end > peak.get(ref.space, 0):
                peak[ref.space] = ref.end
    return peak
