"""The one reference table of energies and areas (45 nm, 0.9 V) and the rule that
scales it to a chip's node, voltage and clock.

Scaling rule (what every derived number goes through):

- Dynamic energy of an operation is ``C * V**2``. Capacitance scales with the node
  as ``(node / 45) ** CAP_EXPONENT``: the exponent is the power law through the two
  public anchors, 45 nm (Horowitz's table, measured at 0.9 V) and Stillmaker & Baas's
  7 nm energy factor 0.094 at 0.8 V, i.e. a capacitance factor of
  0.094 * (0.9 / 0.8)**2 = 0.119 at 7 nm. So
  ``E(node, V) = E45 * (node / 45) ** CAP_EXPONENT * (V / 0.9) ** 2``.
  Dynamic power is energy per operation times operations per second, so at fixed V it
  is proportional to the clock (``C * V**2 * f``).
- Area scales as ``(node / 45) ** AREA_EXPONENT``, the power law through 45 nm (1.0)
  and Stillmaker & Baas's 7 nm area factor 0.059.
- Static power is area times a static power density, proportional to V (leakage
  current roughly fixed at a node; estimate), independent of the clock.
- Off-chip figures (DRAM pJ/bit, SerDes pJ/bit, PHY areas) are device and I/O
  figures and are not node-scaled.

Sources: Horowitz, "Computing's energy problem", ISSCC 2014 (per-op energy and area at
45 nm); Stillmaker & Baas, Integration 2017 (node scaling); Chen, Emer & Sze, Eyeriss,
ISCA 2016 (relative cost of register and array-internal moves); Jouppi et al., TPU v1,
ISCA 2017 (array and SRAM share of the die). Each figure below says which it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from archsim.errors import ConfigError

if TYPE_CHECKING:
    from archsim.config.model import NpuConfig

REFERENCE_NODE_NM = 45.0
REFERENCE_VOLTAGE_V = 0.9
CAP_EXPONENT = math.log(0.094 * (0.9 / 0.8) ** 2) / math.log(7 / 45)
"""1.144: capacitance ~ node ** 1.144 (through 45 nm and Stillmaker & Baas's 7 nm)."""
AREA_EXPONENT = math.log(0.059) / math.log(7 / 45)
"""1.52: area ~ node ** 1.52 (through 45 nm and Stillmaker & Baas's 7 nm)."""

# -- dynamic energy at 45 nm, 0.9 V (pJ) -------------------------------------------------
_BF16_MULT_PJ = 1.1 * (8 / 11) ** 2
"""Estimate: an fp16 multiply (1.1 pJ, Horowitz) scaled by the square of the mantissa
width (bf16 8 bits vs fp16 11 bits), a multiplier's size growing with its width²."""
ARITHMETIC_MAC_PJ: dict[str, float] = {
    "f32": 3.7 + 0.9,            # public (Horowitz): fp32 mult + fp32 add
    "f16": 1.1 + 0.9,            # public (Horowitz): fp16 mult + fp32 add (f32 accumulate)
    "bf16": _BF16_MULT_PJ + 0.9,  # estimate: as above, + fp32 add (f32 accumulate)
    "i8": 0.2 + 0.1,             # public (Horowitz): 8-bit mult + 32-bit add (i32 acc.)
    "i4": 0.2 * (4 / 8) ** 2 + 0.1,  # estimate: the 8-bit mult by width², + 32-bit add
    "fp8": 1.1 * (4 / 11) ** 2 + 0.9,  # estimate: fp16 mult by mantissa² (e4m3: 4 bits),
                                       # + fp32 add (f32 accumulate)
}
ARRAY_OVERHEAD_MACS = 7.0
"""Estimate from Eyeriss's relative costs (register access 1x a MAC, a move between
PEs 2x): per MAC a systolic PE reads its weight and writes its activation and partial
sum registers (3 x 1x) and receives an activation and a partial sum from its
neighbours (2 x 2x): 7 MACs' worth on top of the arithmetic."""
VECTOR_OP_PJ = (0.9 + 3.7) / 2 * (1 + 3)
"""Estimate: the mean of an fp32 add and multiply (Horowitz) plus three vector
register accesses at 1x each (Eyeriss's ratio): 9.2 pJ per element-op."""
SRAM_8KB_PJ_PER_BYTE = 10.0 / 8
"""Public (Horowitz): a 64-bit read of an 8 KB SRAM costs 10 pJ."""
SRAM_BANK_CAP_BYTES = 1 << 20
"""Estimate: banks of larger SRAMs (the shared SRAM has no bank count) are taken as
1 MiB at most."""
NOC_PJ_PER_BYTE_HOP = 2.0
"""Estimate: a hop is ~2 mm of on-chip wire at ~0.12 pJ/bit/mm."""

DRAM_PJ_PER_BIT: tuple[tuple[str, float], ...] = (
    ("HBM3", 3.0),    # estimate: vendors quote ~10-20% below HBM2e
    ("HBM2E", 3.5),   # estimate: low end of the public 3.5-3.9 range
    ("HBM2", 3.9),    # public: ~3.5-3.9 pJ/bit at the device (shared/data README)
    ("HBM", 3.9),
    ("GDDR6", 7.5),   # estimate: vendor figures of ~7-8 pJ/bit
    ("GDDR", 7.5),
    ("LPDDR", 5.0),   # estimate: LPDDR4/5 ~4-6 pJ/bit
    ("DDR", 15.0),    # estimate: Horowitz's 1.3-2.6 nJ per 64-bit DDR3 access is 20-40;
                      # DDR4 interfaces are ~15
)
"""DRAM energy per bit by kind (the first whose name ``dram.kind`` starts with)."""
DRAM_STATIC_W_PER_GB_S: tuple[tuple[str, float], ...] = (
    ("HBM", 0.01),    # estimate: ~2.5 W per 256 GB/s stack (refresh, standby, PHY idle)
    ("GDDR", 0.02),   # estimate
    ("LPDDR", 0.01),  # estimate
    ("DDR", 0.03),    # estimate: ~0.8 W per 25.6 GB/s DIMM channel
)
"""DRAM background power (refresh, standby, PHY) per GB/s of peak bandwidth."""
INTERCONNECT_PJ_PER_BIT = 5.0
"""Estimate: long-reach SerDes (ICI, HCCS, NVLink-class) ~4-6 pJ/bit."""
HOST_LINK_PJ_PER_BIT = 6.0
"""Estimate: PCIe ~5-7 pJ/bit."""
LINK_IDLE_FRACTION = 0.5
"""Estimate: a SerDes link that is up keeps sending idle symbols; it draws about half
of its full-rate power (both directions) when no data flows."""

# -- static power ---------------------------------------------------------------------------
STATIC_W_PER_MM2 = 0.38
"""Estimate, at 0.9 V: leakage plus the ungated clock tree and control of an active
die. Calibrated once on TPU v3's idle power (84 W, shared/data/tpuv3-power.csv) with
the area model below; applied to every node unchanged (leakage per mm² does not fall
with the node as dynamic energy does)."""
UNCORE_FRACTION = 0.15
"""Estimate: DMA engines, NoC routers, control and scalar units, as a fraction of the
area of the arrays, vector units and SRAM."""

# -- area at 45 nm (µm²) ----------------------------------------------------------------
_BF16_MULT_UM2 = 1640 * (8 / 11) ** 2
ARITHMETIC_MAC_UM2: dict[str, float] = {
    "f32": 7700 + 4184,          # public (Horowitz): fp32 mult + fp32 add
    "f16": 1640 + 4184,          # public (Horowitz): fp16 mult + fp32 add
    "bf16": _BF16_MULT_UM2 + 4184,  # estimate: fp16 mult by mantissa², + fp32 add
    "i8": 282 + 137,             # public (Horowitz): 8-bit mult + 32-bit add
}
_A28 = (28 / 45) ** AREA_EXPONENT
PE_OVERHEAD_UM2 = 0.24 * 331e6 / 65536 / _A28 - ARITHMETIC_MAC_UM2["i8"]
"""Estimate from TPU v1 (28 nm, public: the 256x256 int8 array is 24% of a <=331 mm²
die): its PE is 1,212 µm², 2,494 µm² at 45 nm; less the int8 MAC's arithmetic, ~2,075
µm² of registers and wiring per PE."""
SRAM_UM2_PER_BIT = 0.29 * 331e6 / (24 * 2 ** 23) / _A28
"""Estimate from TPU v1 (public: the 24 MiB unified buffer is 29% of the die): 0.98
µm² per bit at 45 nm, cells and periphery."""
VECTOR_LANE_UM2 = 2 * (7700 + 4184)
"""Estimate: an fp32 multiplier and adder (Horowitz), doubled for the lane's register
file and muxes."""
DRAM_PHY_MM2_PER_GB_S: tuple[tuple[str, float], ...] = (
    ("HBM", 0.05),    # estimate: ~12 mm² of PHY per 256 GB/s stack
    ("GDDR", 0.15),   # estimate
    ("LPDDR", 0.3),   # estimate
    ("DDR", 0.3),     # estimate: ~8 mm² per 25.6 GB/s channel
)
LINK_MM2_PER_GB_S = 0.05
"""Estimate: SerDes macro area per GB/s of link bandwidth (chip-to-chip and host)."""


def capacitance_factor(node_nm: float) -> float:
    return (node_nm / REFERENCE_NODE_NM) ** CAP_EXPONENT


def energy_factor(node_nm: float, voltage_v: float) -> float:
    """Dynamic energy at (node, V) relative to the 45 nm, 0.9 V reference."""
    return capacitance_factor(node_nm) * (voltage_v / REFERENCE_VOLTAGE_V) ** 2


def area_factor(node_nm: float) -> float:
    return (node_nm / REFERENCE_NODE_NM) ** AREA_EXPONENT


def by_kind(table: tuple[tuple[str, float], ...], kind: str, what: str) -> float:
    """The entry of ``table`` whose prefix ``kind`` starts with (case-insensitive)."""
    name = kind.upper()
    for prefix, value in table:
        if name.startswith(prefix):
            return value
    known = ", ".join(p for p, _ in table)
    raise ConfigError([f"dram.kind: {kind!r} has no reference {what} (kinds starting "
                       f"with {known}); set it in the config's energy section"],
                      source="energy reference")


@dataclass(frozen=True)
class EnergyTable:
    """Every per-operation energy of one config, resolved (pJ)."""

    mac_pj: dict[str, float]
    """Per array input dtype."""
    vector_op_pj: float
    scratchpad_pj_per_byte: float
    shared_sram_pj_per_byte: float
    dram_pj_per_byte: float
    noc_pj_per_byte_hop: float
    interconnect_pj_per_byte: float
    host_link_pj_per_byte: float


def sram_pj_per_byte(bank_bytes: float, factor: float) -> float:
    """Energy per byte of an SRAM whose banks hold ``bank_bytes``: Horowitz's 8 KB
    figure grown with the square root of the bank size (wire length ~ sqrt(area);
    estimate), scaled by the node's energy factor."""
    bank = min(max(bank_bytes, 8192.0), float(SRAM_BANK_CAP_BYTES))
    return SRAM_8KB_PJ_PER_BYTE * math.sqrt(bank / 8192.0) * factor


def energy_table(config: NpuConfig) -> EnergyTable:
    """The energies of ``config``: its ``energy`` section's values, the others derived
    from the reference table at its node and voltage."""
    e = config.energy
    factor = energy_factor(e.node_nm, e.voltage_v)
    pad = config.core.scratchpad

    def pick(value: float | None, derived: float) -> float:
        return derived if value is None else value

    mac = {dtype: pick(getattr(e, f"mac_{dtype}_pj"),
                       pj * (1 + ARRAY_OVERHEAD_MACS) * factor)
           for dtype, pj in ARITHMETIC_MAC_PJ.items()}
    dram_bit = (e.dram_pj_per_bit if e.dram_pj_per_bit is not None
                else by_kind(DRAM_PJ_PER_BIT, config.dram.kind, "energy per bit"))
    return EnergyTable(
        mac_pj=mac,
        vector_op_pj=pick(e.vector_op_pj, VECTOR_OP_PJ * factor),
        scratchpad_pj_per_byte=pick(e.scratchpad_pj_per_byte,
                                    sram_pj_per_byte(pad.size_bytes / pad.banks, factor)),
        shared_sram_pj_per_byte=pick(e.shared_sram_pj_per_byte, sram_pj_per_byte(
            config.shared_sram.size_bytes, factor)),
        dram_pj_per_byte=8 * dram_bit,
        noc_pj_per_byte_hop=pick(e.noc_pj_per_byte_hop, NOC_PJ_PER_BYTE_HOP * factor),
        interconnect_pj_per_byte=8 * pick(e.interconnect_pj_per_bit, INTERCONNECT_PJ_PER_BIT),
        host_link_pj_per_byte=8 * pick(e.host_link_pj_per_bit, HOST_LINK_PJ_PER_BIT),
    )


def table_rows(table: EnergyTable) -> list[tuple[str, float]]:
    """``(name, pJ)`` rows for display."""
    rows = [(f"mac_{dtype}_pj", pj) for dtype, pj in table.mac_pj.items()]
    rows += [(f.name, getattr(table, f.name)) for f in fields(table) if f.name != "mac_pj"]
    return rows


__all__ = ["AREA_EXPONENT", "CAP_EXPONENT", "EnergyTable", "area_factor", "by_kind",
           "capacitance_factor", "energy_factor", "energy_table", "sram_pj_per_byte",
           "table_rows"]
