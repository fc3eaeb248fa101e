"""The host link (PCIe): host <-> DRAM transfers, on the ``hdma`` engine, and the host
CPU that runs work the NPU cannot do (``host`` engine, timed by the command)."""

from __future__ import annotations

from archsim.bandwidth import FlowNetwork
from archsim.config.model import NpuConfig
from archsim.dram import Dram
from archsim.timing import CommandTiming
from compiler.ir.operands import DramTensor
from compiler.ir.ops import HostOp, HostTransfer


class HostLink:
    """Engine ``hdma``: moves a DRAM box over PCIe."""

    def __init__(self, network: FlowNetwork, config: NpuConfig, dram: Dram) -> None:
        self.latency_cycles = config.host_link.latency_cycles
        self.bytes_per_cycle = config.host_link_bytes_per_cycle
        self.link = network.add_link("host_link", self.bytes_per_cycle)
        self.dram = dram

    def timing(self, op: HostTransfer, tensors: dict[str, DramTensor]) -> CommandTiming:
        charged = self.dram.charged_bytes(op.ref, tensors[op.ref.tensor])
        return CommandTiming(
            fixed_cycles=self.latency_cycles + self.dram.latency_cycles,
            links=(self.link, self.dram.link),
            nbytes=charged,
            cap=self.bytes_per_cycle,
            dram_read=0 if op.to_device else charged,
            dram_written=charged if op.to_device else 0,
            host_bytes=charged,
        )


class Host:
    """Engine ``host``: the host CPU running fallback work for the cycles stated."""

    def timing(self, op: HostOp) -> CommandTiming:
        return CommandTiming(fixed_cycles=op.cycles)
