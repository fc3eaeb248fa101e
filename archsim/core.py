"""A core: its scratchpad, DMA engines, systolic arrays and vector unit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from archsim.config.names import dma_engine, mxu_engine, vpu_engine
from archsim.dma import DmaEngine
from archsim.matrix import MatrixEngine
from archsim.sram import Scratchpad
from archsim.vector import VectorEngine

if TYPE_CHECKING:
    from archsim.chip import Chip


class Core:
    def __init__(self, chip: "Chip", index: int) -> None:
        config = chip.config.core
        self.index = index
        self.scratchpad = Scratchpad(chip.network, index, config.scratchpad)
        self.dmas = [
            DmaEngine(dma_engine(index, d), chip, config.dma.bandwidth_bytes_per_cycle,
                      config.dma.setup_latency_cycles, config.dma.outstanding)
            for d in range(config.dma.engines)
        ]
        self.mxus = [MatrixEngine(mxu_engine(index, m), config.matrix)
                     for m in range(config.matrix.arrays)]
        self.vpu = VectorEngine(vpu_engine(index), config.vector)

    @property
    def engines(self) -> list[DmaEngine | MatrixEngine | VectorEngine]:
        return [*self.dmas, *self.mxus, self.vpu]
