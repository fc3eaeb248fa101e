"""Replay: new data through a program whose timing is already known.

A run's cycles depend only on the program and the config — every command's shape,
address and cost is fixed at compile time, so a performance-only run and a functional
run of the same program give the same cycles (see :class:`~archsim.simulator.Simulator`).
An eager device that runs the same cached program on new tensors therefore need not
rebuild the event simulation: :func:`replay` executes the commands functionally in
dependency order and returns the earlier result's timing with the new outputs. The
commands are bound once to buffers kept with the program's plan
(:class:`~archsim.functional_steps.BoundProgram`), so a replay costs the arithmetic and
little else.

What invalidates a timing: a different program object (another op, shape, dtype or
argument) or a different config. Both are checked; the data never is, because it cannot
change the timing.

    >>> first = Simulator(config).run(program, inputs)
    >>> again = replay(program, config, other_inputs, first)   # same cycles, new outputs
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from archsim.config.model import NpuConfig
from archsim.errors import SimulationError
from archsim.functional import HostFunction
from archsim.result import SimResult
from archsim.plan import plan_for
from compiler.ir.ops import Program


def replay(program: Program, config: NpuConfig, inputs: Mapping[str, Any], timing: SimResult,
           host_functions: Mapping[str, HostFunction] | None = None) -> SimResult:
    """``timing`` (a result of ``program`` on ``config``) with the outputs of running
    ``program`` on ``inputs``: the same cycles, new numbers, no event simulation."""
    if timing.program is not program or (timing.config is not config
                                          and timing.config != config):
        raise SimulationError(f"replay of {program.name!r}: the timing given is of "
                              f"{timing.program.name!r} on {timing.config.name}, not of this "
                              f"program on {config.name}; run the simulator instead")
    outputs = plan_for(program, config, verify=False).bound().run(inputs, host_functions or {})
    return timing.with_outputs(outputs)


__all__ = ["replay"]
