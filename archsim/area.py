"""Silicon area per component, and the static power that follows from it.

Arrays by MAC count and input dtype, SRAM by capacity, vector units by lanes, DRAM PHY
and link interfaces by bandwidth, and the uncore as a fraction of the rest; each from
the 45 nm reference table (:mod:`archsim.config.energy_reference`) scaled to the
config's node (logic and SRAM) or not scaled (PHYs and SerDes, analog I/O). Static
power is area times the static power density (proportional to the voltage), plus the
DRAM's background power and the links' idle power, which follow bandwidth.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from archsim.config import energy_reference as ref
from archsim.config.model import NpuConfig

COMPONENTS: tuple[str, ...] = ("arrays", "vector", "sram", "dram", "noc", "links", "uncore")
"""Power and area components, in display order. ``noc`` has no area or static power
of its own (its routers are in ``uncore``); it is listed for its dynamic energy."""
GATEABLE: tuple[str, ...] = ("arrays", "vector")
"""Components power gating (``power.gating: compute``) turns off while idle."""


def area_mm2(config: NpuConfig) -> Mapping[str, float]:
    """Estimated area of each component (mm²) at the config's node."""
    scale = ref.area_factor(config.energy.node_nm) * 1e-6  # µm² at 45 nm -> mm² here
    matrix = config.core.matrix
    pe_um2 = ref.ARITHMETIC_MAC_UM2[matrix.input_dtype] + ref.PE_OVERHEAD_UM2
    arrays = config.cores * matrix.macs_per_cycle * pe_um2 * scale
    vector = config.cores * config.core.vector.lanes * ref.VECTOR_LANE_UM2 * scale
    sram = config.sram_total_bytes * 8 * ref.SRAM_UM2_PER_BIT * scale
    uncore_fraction = config.power.uncore_fraction
    if uncore_fraction is None:
        uncore_fraction = ref.UNCORE_FRACTION
    dram = (config.dram_bandwidth_bytes_per_s / 1e9
            * ref.by_kind(ref.DRAM_PHY_MM2_PER_GB_S, config.dram.kind, "PHY area"))
    links = _link_gb_per_s(config) * ref.LINK_MM2_PER_GB_S
    return MappingProxyType({
        "arrays": arrays, "vector": vector, "sram": sram, "dram": dram, "noc": 0.0,
        "links": links, "uncore": uncore_fraction * (arrays + vector + sram)})


def _link_gb_per_s(config: NpuConfig) -> float:
    """Bandwidth of the chip's off-chip links other than DRAM: the host link and the
    chip-to-chip links (per direction)."""
    link = config.interconnect
    chip_to_chip = link.links_per_chip * link.link_bandwidth_gb_per_s if link else 0.0
    return config.host_link.bandwidth_gb_per_s + chip_to_chip


def static_power_w(config: NpuConfig) -> Mapping[str, float]:
    """Static power of each component (W) when nothing is gated: on-die components
    their area times the static power density (proportional to V); DRAM its background
    power; links their idle SerDes power (both directions)."""
    areas = area_mm2(config)
    density = config.power.static_w_per_mm2
    if density is None:
        density = ref.STATIC_W_PER_MM2 * config.energy.voltage_v / ref.REFERENCE_VOLTAGE_V
    table = ref.energy_table(config)
    power = {name: areas[name] * density for name in ("arrays", "vector", "sram", "uncore")}
    power["dram"] = (config.dram_bandwidth_bytes_per_s / 1e9
                     * ref.by_kind(ref.DRAM_STATIC_W_PER_GB_S, config.dram.kind,
                                   "background power"))
    power["noc"] = 0.0
    link = config.interconnect
    chip_bytes = link.links_per_chip * link.link_bandwidth_gb_per_s * 1e9 if link else 0.0
    full_rate = 2 * 1e-12 * (chip_bytes * table.interconnect_pj_per_byte
                             + config.host_link.bandwidth_gb_per_s * 1e9
                             * table.host_link_pj_per_byte)
    power["links"] = ref.LINK_IDLE_FRACTION * full_rate
    return MappingProxyType({name: power[name] for name in COMPONENTS})


__all__ = ["COMPONENTS", "GATEABLE", "area_mm2", "static_power_w"]
