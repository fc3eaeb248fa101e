"""On-chip SRAM: each core's scratchpad (DMA traffic through its port) and the shared
SRAM. Compute engines read their scratchpad through dedicated ports, not modelled as
contention."""

from __future__ import annotations

from archsim.bandwidth import FlowNetwork
from archsim.config.model import ScratchpadConfig, SharedSramConfig
from archsim.config.names import SHARED, sram_space


class Scratchpad:
    def __init__(self, network: FlowNetwork, core: int, config: ScratchpadConfig) -> None:
        self.space = sram_space(core)
        self.core = core
        self.size_bytes = config.size_bytes
        self.port = network.add_link(f"{self.space}.port", config.port_bandwidth_bytes_per_cycle)


class SharedSram:
    def __init__(self, network: FlowNetwork, config: SharedSramConfig) -> None:
        self.space = SHARED
        self.size_bytes = config.size_bytes
        self.port = network.add_link("shared.port", config.bandwidth_bytes_per_cycle)
