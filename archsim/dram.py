"""Device DRAM: channels behind one shared link, an access latency, and the cost of
strided access (every contiguous run is rounded up to the access granularity). The
channels run at their sustained rate, ``dram.efficiency`` of the pins' peak."""

from __future__ import annotations

from archsim.bandwidth import FlowNetwork
from archsim.config.model import NpuConfig, ceil_div
from compiler.ir.operands import DramRef, DramTensor


def box_layout(ref: DramRef, tensor: DramTensor) -> tuple[int, int]:
    """``(elements, elements per contiguous run)`` of a box in a row-major tensor."""
    count = 1
    run = 1
    contiguous = True
    for s, size in zip(reversed(ref.slices), reversed(tensor.shape)):
        span = s.stop - s.start
        length = (span + s.step - 1) // s.step if span > 0 else 0
        count *= length
        if contiguous:
            if s.step != 1:
                contiguous = False
            else:
                run *= length
                contiguous = length == size
    return count, max(run, 1)


class Dram:
    def __init__(self, network: FlowNetwork, config: NpuConfig) -> None:
        self.config = config.dram
        self.latency_cycles = config.dram.latency_cycles
        self.channel_bytes_per_cycle = config.dram_channel_bytes_per_cycle * \
            config.dram.efficiency
        self.link = network.add_link("dram", config.dram_sustained_bytes_per_cycle)

    def charged_bytes(self, ref: DramRef, tensor: DramTensor) -> int:
        """Bytes the channels actually move for a box: runs rounded up to the access
        granularity."""
        count, run = box_layout(ref, tensor)
        if count == 0:
            return 0
        run_bytes = run * tensor.dtype.itemsize
        granule = self.config.access_granularity_bytes
        return (count // run) * ceil_div(run_bytes, granule) * granule

    def cap(self, charged_bytes: int) -> float:
        """Bandwidth one transfer can reach: only the channels its bytes interleave
        over."""
        touched = min(self.config.channels, max(1, ceil_div(charged_bytes,
                                                            self.config.interleave_bytes)))
        return touched * self.channel_bytes_per_cycle
