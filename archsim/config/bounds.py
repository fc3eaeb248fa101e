"""Physical bounds of every numeric config field: what a real chip could have.

A sweep that generates configs, or a typo in ``--set``, must not reach the simulator
with ``rows = 2**62`` (overflow), a bandwidth of ``1e-300`` (a run that never ends) or a
NaN (DRAM silently free). Each field is matched by the end of its dotted path; the first
rule that matches applies. ``archsim configs --explain`` prints this table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Bound:
    suffix: str
    low: float
    high: float
    why: str

    def matches(self, path: str) -> bool:
        """``suffix`` is the field's name or the end of it (``setup_latency_cycles``
        and ``dram.latency_cycles`` both end with ``latency_cycles``)."""
        return path == self.suffix or path.endswith(("." + self.suffix, "_" + self.suffix))


BOUNDS: tuple[Bound, ...] = (
    Bound("clock_hz", 1e6, 1e11, "1 MHz to 100 GHz"),
    Bound("cores", 1, 1 << 20, "up to a million cores per chip"),
    Bound("latency_cycles", 0, 1e9, "up to a second at 1 GHz"),
    Bound("shared_sram.size_bytes", 0, 2 ** 50, "none, or up to 1 PiB"),
    Bound("size_bytes", 1, 2 ** 50, "up to 1 PiB"),
    Bound("capacity_bytes", 1, 2 ** 50, "up to 1 PiB"),
    Bound("bandwidth_bytes_per_cycle", 1 / 64, 2 ** 24, "1/64 B to 16 MiB per cycle"),
    Bound("gb_per_s", 1e-3, 1e7, "1 MB/s to 10 PB/s"),
    Bound("host_flops_per_s", 1e6, 1e18, "1 MFLOP/s to 1 EFLOP/s"),
    Bound("rows", 1, 1 << 16, "up to 65,536 PEs per side"),
    Bound("cols", 1, 1 << 16, "up to 65,536 PEs per side"),
    Bound("arrays", 1, 4096, "up to 4,096 arrays per core"),
    Bound("weight_buffers", 1, 16, "up to 16 weight buffers"),
    Bound("lanes", 1, 1 << 20, "up to a million lanes"),
    Bound("engines", 1, 4096, "up to 4,096 DMA engines per core"),
    Bound("outstanding", 1, 4096, "up to 4,096 transfers in flight"),
    Bound("banks", 1, 1 << 16, "up to 65,536 banks"),
    Bound("channels", 1, 1 << 16, "up to 65,536 DRAM channels"),
    Bound("interleave_bytes", 1, 2 ** 30, "up to 1 GiB"),
    Bound("access_granularity_bytes", 1, 2 ** 30, "up to 1 GiB"),
    Bound("links_per_chip", 1, 1024, "up to 1,024 links"),
    Bound("efficiency", 0.05, 1.0, "a fraction of the peak, 5% to 100%"),
    Bound("window_us", 0.001, 1e9, "1 ns to 1000 s"),
    Bound("us", 0, 1e6, "a software cost of 0 to 1 s"),
    Bound("node_nm", 1, 500, "a CMOS node of 1 to 500 nm"),
    Bound("voltage_v", 0.3, 2.0, "a core supply of 0.3 to 2 V"),
    Bound("pj", 1e-6, 1e6, "1 aJ to 1 µJ per operation"),
    Bound("pj_per_byte", 1e-6, 1e6, "1 aJ to 1 µJ per byte"),
    Bound("pj_per_byte_hop", 1e-6, 1e6, "1 aJ to 1 µJ per byte and hop"),
    Bound("pj_per_bit", 1e-6, 1e5, "1 aJ to 100 nJ per bit"),
    Bound("tdp_w", 1e-3, 1e6, "1 mW to 1 MW"),
    Bound("w_per_mm2", 1e-6, 10, "up to 10 W per mm²"),
    Bound("gated_fraction", 1e-6, 1.0, "a share of static power, up to 100%"),
    Bound("fraction", 1e-6, 10, "a positive fraction (up to 10x)"),
    *(Bound(f"rates.{dtype}", 0, 64, f"0 (no {dtype} mode) to 64 MACs per PE per cycle")
      for dtype in ("i8", "i4", "fp8")),
)
DEFAULT = Bound("*", 0, 2 ** 40, "up to 2**40")
"""Any other number (vector op costs, ...)."""


def bound_for(path: str) -> Bound:
    return next((b for b in BOUNDS if b.matches(path)), DEFAULT)


def check(path: str, value: float) -> str | None:
    """A problem naming the field, the value and what is accepted, or None."""
    if not math.isfinite(value):
        return f"{path}: must be a finite number, got {value!r}"
    bound = bound_for(path)
    if bound.low <= value <= bound.high:
        return None
    shown = repr(value) if abs(value) < 1e15 else f"{float(value):.3g}"  # not 309 digits
    return f"{path}: {shown} is outside {_fmt(bound.low)}..{_fmt(bound.high)} ({bound.why})"


def _fmt(value: float) -> str:
    if value == int(value) and abs(value) >= 1:
        number = int(value)
        if number > 1 << 20 and number & (number - 1) == 0:
            return f"2**{number.bit_length() - 1}"
        return f"{number:.0e}" if number >= 10 ** 7 else f"{number:,}"
    return f"{value:g}"


def explain() -> str:
    """The bounds table, for ``archsim configs --explain``."""
    lines = ["field (path ends with)           accepted range             why"]
    for b in (*BOUNDS, DEFAULT):
        lines.append(f"{b.suffix:32s} {_fmt(b.low) + '..' + _fmt(b.high):26s} {b.why}")
    lines.append("every number must also be finite; sizes and counts > 0 except latencies "
                 "and shared_sram.size_bytes (>= 0)")
    return "\n".join(lines)
