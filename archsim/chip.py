"""The chip: cores, shared SRAM, DRAM, NoC and host link on one flow network, and the
table from engine names to the blocks that time their commands."""

from __future__ import annotations

import simpy

from archsim.bandwidth import FlowNetwork
from archsim.config.model import NpuConfig
from archsim.config.names import SHARED, TDMA
from archsim.core import Core
from archsim.dma import DmaEngine
from archsim.dram import Dram
from archsim.host_link import Host, HostLink
from archsim.noc import Noc
from archsim.sram import SharedSram
from archsim.timing import CommandTiming
from compiler.ir.operands import DramTensor
from compiler.ir.ops import HostOp, HostTransfer, Op


class Chip:
    def __init__(self, env: simpy.Environment, config: NpuConfig,
                 tensors: dict[str, DramTensor]) -> None:
        self.env = env
        self.config = config
        self.tensors = tensors
        self.network = FlowNetwork(env)
        self.dram = Dram(self.network, config)
        self.noc = Noc(self.network, config)
        self.cores = [Core(self, c) for c in range(config.cores)]
        self.shared = (SharedSram(self.network, config.shared_sram)
                       if config.shared_sram.size_bytes else None)
        self.tdma = DmaEngine(TDMA, self, config.shared_sram.tdma_bandwidth_bytes_per_cycle,
                              config.shared_sram.tdma_setup_latency_cycles)
        self.host_link = HostLink(self.network, config, self.dram)
        self.host = Host()
        self._engines = {e.name: e for core in self.cores for e in core.engines}
        self._engines[TDMA] = self.tdma
        self._paths: dict[str, tuple[tuple[int, ...], int]] = {
            core.scratchpad.space: ((self.noc.links[core.index], core.scratchpad.port),
                                    self.noc.latency_cycles)
            for core in self.cores
        }
        self._ports = {core.scratchpad.space: core.scratchpad.port for core in self.cores}
        if self.shared is not None:
            self._paths[SHARED] = ((self.shared.port,), 0)
            self._ports[SHARED] = self.shared.port

    def sram_path(self, space: str) -> tuple[tuple[int, ...], int]:
        """Links and latency between the fabric and an SRAM space."""
        return self._paths[space]

    def space_port(self, space: str) -> int:
        return self._ports[space]

    def in_flight(self, engine: str) -> int:
        """Commands an engine may have in flight at once (DMA descriptor queues; 1 for
        every other engine)."""
        return getattr(self._engines.get(engine), "outstanding", 1)

    def back_to_back_saving(self, engine: str) -> int:
        """Cycles a command saves when it follows the previous one on its engine without
        a gap (systolic arrays with double-buffered weights; 0 elsewhere)."""
        return getattr(self._engines.get(engine), "back_to_back_saving", 0)

    def timing(self, engine: str, op: Op) -> CommandTiming:
        """What a command costs on its engine (decided before the run)."""
        if isinstance(op, HostTransfer):
            return self.host_link.timing(op, self.tensors)
        if isinstance(op, HostOp):
            return self.host.timing(op)
        return self._engines[engine].timing(op)
