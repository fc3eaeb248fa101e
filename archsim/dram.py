"""Device DRAM: channels behind one shared link, an access latency, and the cost of
strided access (every contiguous run is rounded up to the access granularity)."""

from __future__ import annotations

from archsim.bandwidth import FlowNetwork
from archsim.config.model import NpuConfig, ceil_div
from compiler.ir.operands import DramRef, DramTensor, numel


def contiguous_run_elements(ref: DramRef, tensor: DramTensor) -> int:
    """Elements per contiguous run of a box in a row-major tensor."""
    run = 1
    for dim in range(len(ref.slices) - 1, -1, -1):
        s = ref.slices[dim]
        if s.step != 1:
            break
        run *= s.length
        if s.length != tensor.shape[dim]:
            break
    return max(run, 1)


class Dram:
    def __init__(self, network: FlowNetwork, config: NpuConfig) -> None:
        self.config = config.dram
        self.latency_cycles = config.dram.latency_cycles
        self.channel_bytes_per_cycle = config.dram_channel_bytes_per_cycle
        self.link = network.add_link("dram", config.dram_bytes_per_cycle)

    def charged_bytes(self, ref: DramRef, tensor: DramTensor) -> int:
        """Bytes the channels actually move for a box: runs rounded up to the access
        granularity."""
        count = numel(ref.shape)
        if count == 0:
            return 0
        run = contiguous_run_elements(ref, tensor)
        run_bytes = run * tensor.dtype.itemsize
        granule = self.config.access_granularity_bytes
        return (count // run) * ceil_div(run_bytes, granule) * granule

    def cap(self, charged_bytes: int) -> float:
        """Bandwidth one transfer can reach: only the channels its bytes interleave
        over."""
        touched = min(self.config.channels, max(1, ceil_div(charged_bytes,
                                                            self.config.interleave_bytes)))
        return touched * self.channel_bytes_per_cycle
