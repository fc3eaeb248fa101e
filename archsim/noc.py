"""The network-on-chip: each core has one link into it; traffic entering or leaving a
core shares that link and pays the NoC latency once per transfer."""

from __future__ import annotations

from archsim.bandwidth import FlowNetwork
from archsim.config.model import NpuConfig


class Noc:
    def __init__(self, network: FlowNetwork, config: NpuConfig) -> None:
        self.latency_cycles = config.noc.latency_cycles
        self.links = tuple(
            network.add_link(f"noc.core{c}", config.noc.link_bandwidth_bytes_per_cycle)
            for c in range(config.cores)
        )
