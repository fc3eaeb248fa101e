"""A program's plan on a config: everything about a run that does not depend on time.

Per-command costs (each distinct engine and op shape costed once, :mod:`archsim.timing`),
dependencies as indices, engine queues, links and their traffic, and the totals that
follow from the costs alone. A plan is built once per (program object, config) and
reused when the same program runs again (eager ops, repeated graphs, replays); the
simulator (:mod:`archsim.simulator`) walks it in time, :mod:`archsim.replay` executes it
functionally without time.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Mapping
from functools import cached_property
from operator import attrgetter
from types import MappingProxyType
from typing import Any

import numpy as np
import simpy

from archsim.bandwidth import solo_rate
from archsim.chip import Chip
from archsim.config.model import NpuConfig
from archsim.functional import HostFunction, Memory
from archsim.functional_steps import BoundProgram, FunctionalExecutor
from archsim.host_memory import check_host_memory
from archsim.timing import COST_KEY, CommandTiming, no_cost_key
from compiler.ir.ops import MATMUL_OPS, Program


class Plan:
    """Everything about a run that does not depend on time: per-command costs,
    dependencies as indices, engine queues, the links and their traffic, and the
    totals that follow from the costs alone."""

    def __init__(self, program: Program, config: NpuConfig) -> None:
        # weakly: plans are cached per program and must not keep it alive
        self._program = weakref.ref(program)
        self.config = config
        self._bound: BoundProgram | None = None
        commands = program.commands
        self.n = len(commands)
        chip = Chip(simpy.Environment(), config, program.tensor_map)
        capacity = chip.network.capacity
        # Each distinct (engine, op shape) is costed once: loops repeat a few shapes.
        # Per engine, cost key -> cost kind (keys start with the op class).
        shapes: dict[str, dict[Hashable, int]] = {}
        timings: list[CommandTiming] = []
        matmuls: list[bool] = []  # per cost kind: a matmul's (MATMUL_OPS)
        steps: list[Step] = []
        engines: list[str] = []
        kinds: list[int] = [0] * self.n
        deps: list[tuple[int, ...]] = [()] * self.n
        key_of, numbered = COST_KEY, True
        # one pass over the commands (each visit touches several objects: this loop is
        # most of a plan's cost)
        for i, c in enumerate(commands):
            if c.id != i:
                numbered = False
            deps[i] = c.deps
            op = c.op
            engine = c.engine
            known = shapes.get(engine)
            if known is None:
                known = shapes[engine] = {}
            try:
                key_for = key_of[op.__class__]
            except KeyError:  # (it raises the error that says to add one)
                key_for = no_cost_key
            key = key_for(op)
            kind = known.get(key)
            if kind is None:
                kind = known[key] = len(timings)
                timing = chip.timing(engine, op)
                timings.append(timing)
                matmuls.append(op.__class__ in MATMUL_OPS)
                engines.append(engine)
                solo = solo_rate(timing.links, timing.cap, capacity) if timing.links else 0.0
                steps.append((timing.fixed_cycles, timing.links, float(timing.nbytes), solo))
            kinds[i] = kind
        if not numbered:  # dependencies name command ids; the run indexes by position
            index = {c.id: i for i, c in enumerate(commands)}
            deps = [tuple(index[d] for d in ds) for ds in deps]
        self.deps = deps
        self.timings = timings
        """Distinct costs; ``timings[kinds[i]]`` is command i's."""
        self.kinds = kinds
        kind_of = np.asarray(kinds, dtype=np.intp)
        self.queues, self.queue_arrays, self.engine_index = _engine_queues(engines, kind_of)
        """Each engine's queue, as a list (what the run walks) and as an index array (for
        per-engine totals of a run)."""
        self.in_flight = {engine: chip.in_flight(engine) for engine in self.queues}
        """Per engine, transfers it may keep in flight (1: each ends before the next)."""
        self.saving = {engine: chip.back_to_back_saving(engine) for engine in self.queues}
        """Per engine, cycles a command saves when it starts as the previous one ends."""
        fillable = _fillable_links(steps, engines, capacity)
        run_steps = [(*step, tuple(k for k in step[1] if k in fillable)) for step in steps]
        self.run_steps = list(map(run_steps.__getitem__, kinds))
        """Per command: (fixed cycles, links, bytes, solo rate, tracked links) — what the
        run reads. The tracked links are those of its links whose load the flow network
        tracks: the ones the program's transfers could oversubscribe
        (:func:`_fillable_links`)."""
        self.link_names = tuple(chip.network.names)
        self.link_capacities = tuple(capacity)
        counts = np.bincount(kind_of, minlength=len(timings))
        moved = [0.0] * len(self.link_names)
        for timing, count in zip(timings, counts.tolist()):
            for link in timing.links:
                moved[link] += timing.nbytes * count
        self.link_bytes = MappingProxyType({name: int(b) for name, b in
                                           zip(self.link_names, moved)})
        field = {name: np.fromiter(map(attrgetter(name), timings), np.float64, len(timings))
                 for name in ("flops", "nbytes", "dram_read", "dram_written", "host_bytes")}
        self.flops = field["flops"].astype(np.int64)[kind_of]
        self.nbytes = field["nbytes"].astype(np.int64)[kind_of]
        self.dram_read, self.dram_written, self.host_bytes = (
            int(field[name] @ counts) for name in ("dram_read", "dram_written", "host_bytes"))
        self.matmul_flops = int(sum(int(t.flops) * int(count) for t, matmul, count
                                    in zip(timings, matmuls, counts) if matmul))
        """FLOPs of the run's matmuls, on the arrays or on the vector units."""

    @property
    def program(self) -> Program:
        program = self._program()
        if program is None:
            raise ReferenceError("the plan's program is gone")
        return program

    @cached_property
    def steps(self) -> list[Step]:
        """Per command: (fixed cycles, links, bytes, solo rate)."""
        return [step[:4] for step in self.run_steps]

    @cached_property
    def sram_sizes(self) -> dict[str, int]:
        """Bytes to allocate per SRAM space in a functional run: only what the program
        touches."""
        capacity = self.config.sram_capacities
        return {space: min(capacity.get(space, end), end)
                for space, end in self.program.sram_high_water.items()}


    def executor(self, inputs: Mapping[str, Any],
                 host_functions: Mapping[str, HostFunction]) -> FunctionalExecutor:
        """Memory for a functional run of this plan's program (host memory checked
        before anything is allocated) and the executor over it."""
        program = self.program
        check_host_memory(program.name, program.tensors, sum(self.sram_sizes.values()))
        return FunctionalExecutor(Memory(program.tensor_map, self.sram_sizes, inputs),
                                  host_functions)

    def bound(self) -> BoundProgram:
        """The program bound once to buffers kept for later runs (host memory checked
        when first bound); see :func:`archsim.replay.replay`."""
        if self._bound is None:
            program = self.program
            check_host_memory(program.name, program.tensors, sum(self.sram_sizes.values()))
            self._bound = BoundProgram(program.tensor_map, self.sram_sizes, program.commands,
                                       self.functional_order)
        return self._bound

    @cached_property
    def functional_order(self) -> list[int]:
        """Command indices in an order that respects every dependency (program order
        when, as emitted programs do, every command depends only on earlier ones)."""
        deps = self.deps
        if all(d < i for i, ds in enumerate(deps) for d in ds):
            return list(range(self.n))
        waiting = [len(ds) for ds in deps]
        users: list[list[int]] = [[] for _ in range(self.n)]
        for i, ds in enumerate(deps):
            for d in ds:
                users[d].append(i)
        order = [i for i in range(self.n) if not waiting[i]]
        for i in order:  # grows while iterated: Kahn's algorithm
            for u in users[i]:
                waiting[u] -= 1
                if not waiting[u]:
                    order.append(u)
        return order


Step = tuple[int, tuple[int, ...], float, float]
RunStep = tuple[int, tuple[int, ...], float, float, tuple[int, ...]]


def _fillable_links(steps: list[Step], engines: list[str], capacity: list[float]) -> set[int]:
    """Links the program's transfers could oversubscribe: the only ones whose load the
    flow network needs to track (:meth:`~archsim.bandwidth.FlowNetwork.transfer`).

    An engine streams one transfer at a time (the others in flight wait for it,
    :mod:`archsim.simulator`), so at most one flow per engine crosses a link. A link
    can be oversubscribed only if the fastest solo rates of the engines that cross it
    add up to more than its capacity (less a margin for float error: in doubt, a link
    is tracked). ``steps[k]`` is cost kind k's step; ``engines[k]`` its engine."""
    fastest: dict[tuple[int, str], float] = {}  # (link, engine) -> fastest solo rate
    for (_, links, _, solo), engine in zip(steps, engines):
        for link in links:
            if solo > fastest.get((link, engine), 0.0):
                fastest[(link, engine)] = solo
    load = [0.0] * len(capacity)
    for (link, _), solo in fastest.items():
        load[link] += solo
    return {link for link, total in enumerate(load) if total > capacity[link] * (1 - 1e-9)}


def _engine_queues(engines: list[str], kind_of: np.ndarray
                   ) -> tuple[dict[str, list[int]], dict[str, np.ndarray], list[int]]:
    """Each engine's queue (command indices in program order) as a list and as an
    array, engines in order of their first command, and each command's engine number.
    ``engines[k]`` is the engine of cost kind ``k``; ``kind_of[i]`` is command i's kind."""
    numbers: dict[str, int] = {}
    kind_engine = [numbers.setdefault(e, len(numbers)) for e in engines]
    # engine numbers as 16-bit integers when they fit: numpy's stable sort of those is a
    # radix sort, several times faster than the merge sort it runs on wider ones
    small = len(numbers) <= np.iinfo(np.int16).max
    engine_of = np.asarray(kind_engine, dtype=np.int16 if small else np.intp)[kind_of]
    order = np.argsort(engine_of, kind="stable")
    bounds = np.searchsorted(engine_of[order], np.arange(len(numbers) + 1)).tolist()
    arrays = {engine: order[bounds[k]:bounds[k + 1]] for engine, k in numbers.items()}
    return ({engine: queue.tolist() for engine, queue in arrays.items()}, arrays,
            engine_of.tolist())


class _ProgramCache:
    """Plans (and verification) of one program object, per config."""

    __slots__ = ("program", "plans", "verified")

    def __init__(self, program: Program) -> None:
        self.program = weakref.ref(program)
        self.plans: dict[NpuConfig, Plan] = {}
        self.verified: set[NpuConfig] = set()


_CACHE: dict[int, _ProgramCache] = {}
"""By object identity (hashing a program hashes every command); an entry goes away
with its program."""


def plan_for(program: Program, config: NpuConfig, verify: bool) -> Plan:
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
        plan = entry.plans[config] = Plan(program, config)
    return plan
