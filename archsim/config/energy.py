"""Energy and power of a chip: the ``energy:`` and ``power:`` sections of a config.

Pure data, like :mod:`archsim.config.model`. A preset names its technology node and
supply voltage; every per-operation energy it does not set is derived from ONE
reference table at 45 nm (:mod:`archsim.config.energy_reference`) by the scaling rule
there, so chips on other nodes are scaled, not fitted. A field set in the preset
overrides the derived value (a public figure for that chip, or a what-if).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Gating = Literal["none", "compute"]
GATINGS: tuple[str, ...] = ("none", "compute")


@dataclass(frozen=True)
class EnergyConfig:
    """Dynamic energy per operation and per byte moved, at the chip's node and voltage.

    ``None``: derived from the 45 nm reference table scaled to ``node_nm`` and
    ``voltage_v`` (:func:`archsim.config.energy_reference.energy_table`)."""

    node_nm: float = 16.0
    """Technology node the chip is built in (nm)."""
    voltage_v: float = 0.8
    """Core supply voltage at the config's ``clock_hz``."""
    mac_f32_pj: float | None = None
    """One multiply-accumulate in a systolic array, per input dtype (with the array's
    register and neighbour-to-neighbour operand moves)."""
    mac_f16_pj: float | None = None
    mac_bf16_pj: float | None = None
    mac_i8_pj: float | None = None
    mac_i4_pj: float | None = None
    mac_fp8_pj: float | None = None
    """Narrow inputs on an array with a mode for them (``core.matrix.rates``)."""
    vector_op_pj: float | None = None
    """One element of an elementwise vector op (other classes cost their cycle cost in
    ``core.vector.costs`` times this)."""
    scratchpad_pj_per_byte: float | None = None
    """A byte read from or written to a core's scratchpad."""
    shared_sram_pj_per_byte: float | None = None
    """A byte read from or written to the shared SRAM."""
    dram_pj_per_bit: float | None = None
    """A bit read from or written to DRAM/HBM (device and PHY); None: by ``dram.kind``."""
    noc_pj_per_byte_hop: float | None = None
    """A byte crossing one link of the network-on-chip."""
    interconnect_pj_per_bit: float | None = None
    """A bit sent over a chip-to-chip link (SerDes, both ends)."""
    host_link_pj_per_bit: float | None = None
    """A bit sent over the host link."""


@dataclass(frozen=True)
class PowerConfig:
    """Static power, power gating and the power budget.

    Static power (leakage and the clock tree that is never gated) is derived from the
    area of each component (:mod:`archsim.area`) at the node's static power density;
    DRAM background and link idle power from their bandwidth."""

    tdp_w: float | None = None
    """Thermal design power of the part the config models; reports warn when the
    average power over a ``window_us`` window exceeds it. None: no budget."""
    gating: Gating = "none"
    """``compute``: systolic arrays and vector units are power-gated while idle (they
    draw ``gated_fraction`` of their static power); ``none``: everything leaks all
    the time."""
    gated_fraction: float = 0.1
    """Share of a gated block's static power it still draws (retention, the gates'
    own leakage); estimate."""
    window_us: float = 100.0
    """Window over which average power is checked against ``tdp_w``."""
    static_w_per_mm2: float | None = None
    """Static power density of logic and SRAM at ``energy.voltage_v``; None: the
    reference figure."""
    uncore_fraction: float | None = None
    """Area of the uncore (DMA, control, NoC routers, scalar unit) as a fraction of
    the cores' arrays, vector units and SRAM; None: the reference figure."""


__all__ = ["EnergyConfig", "GATINGS", "Gating", "PowerConfig"]
