"""What a command costs, decided before the simulation starts.

Each hardware block turns an op into a :class:`CommandTiming`: a fixed part (latency
or compute cycles) and, for data movement, a flow over shared links. The simulator's
inner loop only reads these, so it allocates nothing per command.
"""

from __future__ import annotations

from typing import NamedTuple


class CommandTiming(NamedTuple):
    fixed_cycles: int
    """Cycles the engine spends before (or, without a flow, instead of) moving bytes."""
    links: tuple[int, ...] = ()
    """Flow-network links the transfer crosses; empty for compute."""
    nbytes: float = 0.0
    """Bytes the flow moves (as charged to the links)."""
    cap: float = 0.0
    """The engine's own bandwidth limit, bytes per cycle."""
    flops: int = 0
    dram_read: int = 0
    dram_written: int = 0
    host_bytes: int = 0


def compute(cycles: int, flops: int = 0) -> CommandTiming:
    return CommandTiming(fixed_cycles=cycles, flops=flops)
