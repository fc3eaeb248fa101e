"""Runs a scheduled program on a configured chip.

Each engine is one long-lived SimPy process walking its queue in program order; a
command starts when its engine is free and its dependencies have finished. Costs are
decided before the run (:mod:`archsim.timing`), so the loop only waits: on
unfinished dependencies (one event each, created only when someone waits), on a
timeout for compute, and on the flow network for transfers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import simpy

from archsim.chip import Chip
from archsim.config.model import NpuConfig
from archsim.errors import SimulationError
from archsim.functional import FunctionalExecutor, HostFunction, Memory
from archsim.result import SimResult
from archsim.timing import CommandTiming
from compiler.ir.operands import SramRef
from compiler.ir.ops import Command, Op, Program


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
        if verify:
            from compiler.ir.verify import verify as verify_program

            verify_program(program, self.config)
        return _Run(self.config, program, inputs, host_functions or {}).execute()


class _Run:
    """State of one simulation (kept off the Simulator so runs cannot leak into each
    other)."""

    def __init__(self, config: NpuConfig, program: Program, inputs: Mapping[str, Any] | None,
                 host_functions: Mapping[str, HostFunction]) -> None:
        self.config = config
        self.program = program
        self.env = simpy.Environment()
        self.chip = Chip(self.env, config, program.tensor_map)
        commands = program.commands
        self.n = len(commands)
        index = {c.id: i for i, c in enumerate(commands)}
        self.deps = [tuple(index[d] for d in c.deps) for c in commands]
        self.ops: list[Op] = [c.op for c in commands]
        self.timings: list[CommandTiming] = [self.chip.timing(c.engine, c.op) for c in commands]
        self.queues: dict[str, list[int]] = {}
        for i, c in enumerate(commands):
            self.queues.setdefault(c.engine, []).append(i)
        self.starts = [0] * self.n
        self.ends = [0] * self.n
        self.done = [False] * self.n
        self.waiters: dict[int, simpy.Event] = {}
        self.executor: FunctionalExecutor | None = None
        if inputs is not None:
            memory = Memory(program.tensor_map, _space_sizes(config), inputs)
            self.executor = FunctionalExecutor(memory, host_functions)

    def execute(self) -> SimResult:
        for engine, queue in self.queues.items():
            self.env.process(self._engine(queue))
        self.env.run()
        if not all(self.done):
            raise SimulationError(self._stuck_message())
        return self._result()

    def _engine(self, queue: list[int]) -> Iterator[simpy.Event]:
        env, deps, done, waiters = self.env, self.deps, self.done, self.waiters
        timings, starts, ends = self.timings, self.starts, self.ends
        timeout, transfer = env.timeout, self.chip.network.transfer
        executor = self.executor
        for i in queue:
            for d in deps[i]:
                if not done[d]:
                    event = waiters.get(d)
                    if event is None:
                        event = waiters[d] = env.event()
                    yield event
            starts[i] = env.now
            if executor is not None:
                self._execute(executor, i)
            timing = timings[i]
            if timing.fixed_cycles:
                yield timeout(timing.fixed_cycles)
            if timing.links:
                yield transfer(timing.links, timing.nbytes, timing.cap)
            ends[i] = env.now
            done[i] = True
            event = waiters.pop(i, None)
            if event is not None:
                event.succeed()

    def _execute(self, executor: FunctionalExecutor, i: int) -> None:
        try:
            executor.execute(self.ops[i])
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
        starts = np.asarray(self.starts, dtype=np.int64)
        ends = np.asarray(self.ends, dtype=np.int64)
        busy: dict[str, int] = {}
        for engine, queue in self.queues.items():
            busy[engine] = int((ends[queue] - starts[queue]).sum())
        t = self.timings
        flops = np.fromiter((x.flops for x in t), dtype=np.int64, count=self.n)
        nbytes = np.fromiter((int(x.nbytes) for x in t), dtype=np.int64, count=self.n)
        matmul = sum(x.flops for x, c in zip(t, self.program.commands) if c.op.mnemonic == "matmul")
        outputs = None
        if self.executor is not None:
            outputs = MappingProxyType(self.executor.memory.output_values())
        return SimResult(
            program=self.program,
            config=self.config,
            total_cycles=int(ends.max()) if self.n else 0,
            starts=starts,
            ends=ends,
            command_bytes=nbytes,
            command_flops=flops,
            engine_busy_cycles=MappingProxyType(busy),
            dram_bytes_read=sum(x.dram_read for x in t),
            dram_bytes_written=sum(x.dram_written for x in t),
            host_link_bytes=sum(x.host_bytes for x in t),
            matmul_flops=int(matmul),
            flops=int(flops.sum()),
            sram_peak_bytes=MappingProxyType(_sram_high_water(self.program.commands)),
            outputs=outputs,
        )


def _space_sizes(config: NpuConfig) -> dict[str, int]:
    sizes = {f"sram{c}": config.core.scratchpad.size_bytes for c in range(config.cores)}
    if config.shared_sram.size_bytes:
        sizes["shared"] = config.shared_sram.size_bytes
    return sizes


def _sram_high_water(commands: tuple[Command, ...]) -> dict[str, int]:
    """Per SRAM space, the highest byte address any command touches: the scratchpad a
    schedule needs."""
    peak: dict[str, int] = {}
    for c in commands:
        for value in vars(c.op).values():
            if isinstance(value, SramRef) and value.end > peak.get(value.space, 0):
                peak[value.space] = value.end
    return peak
