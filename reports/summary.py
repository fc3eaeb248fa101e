"""The one-screen summary of a run: latency, FLOP/s and bandwidth against the chip's
peaks, per-engine utilization grouped by core, SRAM use, and every piece of host work
with its time."""

from __future__ import annotations

from collections.abc import Mapping

from reports.energy import format_energy
from reports.data import ReportData, ResultLike, busy_cycles, report_data
from reports.text import (
    format_bytes,
    format_count,
    format_cycles,
    format_si,
    format_table,
    format_us,
    percent,
)

HOST_KINDS = ("hdma", "host")
_MAX_SRAM_ROWS = 4
_MAX_HOST_ROWS = 12


def summary(result: ResultLike) -> str:
    """A plain-text summary that fits an 80-column terminal."""
    data = report_data(result)
    sections = [_headline(data), _utilization(data), _sram(data), _host_work(data)]
    if data.choices:
        sections.append(_choices(data))
    if data.energy is not None:
        sections.append(format_energy(data.energy))
    return "\n\n".join(sections)


def _matrix_rate(data: ReportData) -> str:
    """``matrix FLOP/s``, or for integer matmuls ``matrix ops/s`` against the int8 peak
    (TOPS, as integer rates are quoted)."""
    if data.integer_matmuls:
        rate, name, peak = "OPS", "ops/s", "int8 peak"
        count = f"{format_count(data.matmul_flops)} int8 ops"
    else:
        rate, name, peak = "FLOP/s", "FLOP/s", "peak"
        count = format_si(data.matmul_flops, "FLOP")
    return _kv(f"matrix {name}", f"{format_si(data.achieved_flops, rate)} of "
                                 f"{format_si(data.peak_flops, rate)} {peak} "
                                 f"({percent(data.achieved_flops, data.peak_flops)}); {count}")


def _rate(per_second: float) -> str:
    """Whole numbers from 100 up, else three significant digits: a 1.07 s run is 0.936
    runs/s, not 1 (and a 3 s one not 0)."""
    return f"{per_second:,.0f}" if per_second >= 100 else f"{per_second:.3g}"


def _headline(data: ReportData) -> str:
    mode = "functional" if data.functional else "performance-only"
    seconds = data.seconds
    lines = [
        f"{data.program_name} on {data.config_name} ({data.cores} cores, "
        f"{data.clock_hz / 1e9:g} GHz) - {mode}",
        *([_kv("precision", data.matrix_precision)] if data.matrix_precision else []),
        *([_kv("layers", data.layers)] if data.layers else []),
        *([_kv("tiles", data.tiles)] if data.tiles else []),
        _kv("latency", f"{format_cycles(data.total_cycles)} cycles = {format_us(seconds)}"
                       + (f"  ({_rate(1 / seconds)} runs/s)" if seconds else "")),
        *([_runtime(data)] if data.runtime_overhead_cycles else []),
        _matrix_rate(data),
    ]
    vector_flops = data.flops - data.matmul_flops
    if vector_flops:
        achieved = vector_flops / seconds if seconds else 0.0
        lines.append(_kv("vector FLOP/s", f"{format_si(achieved, 'FLOP/s')} of "
                                          f"{format_si(data.vector_peak_flops, 'FLOP/s')} peak "
                                          f"({percent(achieved, data.vector_peak_flops)}); "
                                          f"{format_si(vector_flops, 'FLOP')}"))
    used, available = data.dram_bandwidth_used_bytes_per_s, data.dram_bandwidth_bytes_per_s
    sustained = "" if data.dram_efficiency == 1.0 else \
        f" peak, {format_si(available * data.dram_efficiency, 'B/s')} sustained"
    lines.append(_kv("DRAM bandwidth",
                     f"{format_si(used, 'B/s')} of {format_si(available, 'B/s')}{sustained} "
                     f"({percent(used, available)}); "
                     f"read {format_bytes(data.dram_bytes_read)}, "
                     f"written {format_bytes(data.dram_bytes_written)}"))
    if data.host_link_bytes:
        used = data.host_link_bytes / seconds if seconds else 0.0
        lines.append(_kv("host link", f"{format_bytes(data.host_link_bytes)} moved, "
                                      f"{format_si(used, 'B/s')} of "
                                      f"{format_si(data.host_link_bandwidth_bytes_per_s, 'B/s')}"))
    return "\n".join(lines)


def _runtime(data: ReportData) -> str:
    """The config's runtime cost of calling the run once, apart from the hardware's."""
    overhead = data.runtime_overhead_cycles
    with_it = data.total_cycles + overhead
    return _kv("runtime", f"+{format_us(overhead / data.clock_hz)} for {data.kernels} kernel "
                          f"launch{'es' if data.kernels != 1 else ''} + a dispatch = {format_us(with_it / data.clock_hz)} "
                          f"a call ({percent(overhead, with_it)} runtime)")


def _kv(key: str, value: str) -> str:
    return f"  {key:<15} {value}"


def _utilization(data: ReportData) -> str:
    """Rows per core, columns per unit (``dma0``, ``mxu0``, ``vpu``...), then the chip."""
    util = data.utilization
    units: list[str] = []
    for engine in data.engines:
        head, dot, unit = engine.partition(".")
        if dot and unit not in units:
            units.append(unit)
    used = set(data.used_engines)
    rows, idle = [], []
    for core in range(data.cores):
        engines = [f"core{core}.{u}" for u in units]
        if used.isdisjoint(engines):
            idle.append(core)
            continue
        rows.append((f"core{core}", *(_util_cell(util, e) for e in engines)))
    chip = [e for e in data.engines if "." not in e]
    lines = ["Engine utilization (busy share of the run; '.' = never used)"]
    if rows:
        lines.append(format_table(("", *units), rows))
    if idle:
        lines.append(f"  idle cores: {_ranges(idle)}")
    lines.append("  chip   " + "  ".join(f"{e} {_util_cell(util, e)}" for e in chip))
    return "\n".join(lines)


def _ranges(values: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2, 5``."""
    parts: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(parts)


def _util_cell(util: Mapping[str, float], engine: str) -> str:
    value = util.get(engine)
    if value is None:
        return "-"
    return "." if value == 0 else f"{100 * value:.1f}%"


def _sram(data: ReportData) -> str:
    """Peak (highest byte address used) per space vs capacity; with many cores the
    scratchpads are summarized."""
    rows = []
    spaces = [s for s in data.sram_capacity_bytes if s != "shared"]
    if len(spaces) <= _MAX_SRAM_ROWS:
        for space in spaces:
            rows.append(_sram_row(space, data))
    else:
        peaks = {s: data.sram_peak_bytes.get(s, 0) for s in spaces}
        worst = max(peaks, key=peaks.get)
        capacity = data.sram_capacity_bytes[worst]
        mean = sum(peaks.values()) / len(peaks)
        rows.append(("sram*", f"max {format_bytes(peaks[worst])} ({worst}), "
                                f"mean {format_bytes(mean)}",
                     format_bytes(capacity), percent(peaks[worst], capacity)))
    if "shared" in data.sram_capacity_bytes:
        rows.append(_sram_row("shared", data))
    return ("SRAM peak (highest byte address used)\n"
            + format_table(("space", "peak", "capacity", "used"), rows, align="lrrr"))


def _sram_row(space: str, data: ReportData) -> tuple[str, str, str, str]:
    peak = data.sram_peak_bytes.get(space, 0)
    capacity = data.sram_capacity_bytes[space]
    return space, format_bytes(peak), format_bytes(capacity), percent(peak, capacity)


_MAX_CHOICES = 8


def _choices(data: ReportData) -> str:
    """The mappings the compiler chose among several (convolutions), with its estimates."""
    rows = [f"  {source}: {why}" for source, why in list(data.choices.items())[:_MAX_CHOICES]]
    more = len(data.choices) - _MAX_CHOICES
    return "\n".join([f"Mapping choices ({len(data.choices)}, by the cost model)", *rows]
                     + ([f"  ... {more} more (JSON: run.choices)"] if more > 0 else []))


def _host_work(data: ReportData) -> str:
    """Every command on the host CPU or the host DMA, with its time: host work is never
    free or silent."""
    host = [c for c in data.commands if c.kind in HOST_KINDS]
    if not host:
        return "Host work: none (everything ran on the NPU)"
    busy = busy_cycles(host)
    summed = sum(c.cycles for c in host)
    rows = [(str(c.id), c.engine, c.op, c.source or "<unattributed>", format_cycles(c.cycles),
             f"{data.cycles_to_us(c.cycles):.2f}", format_bytes(c.bytes) if c.bytes else "-")
            for c in host[:_MAX_HOST_ROWS]]
    more = f"\n  ... {len(host) - _MAX_HOST_ROWS} more" if len(host) > _MAX_HOST_ROWS else ""
    overlap = (f"; its commands' cycles sum to {format_cycles(summed)} as some overlap"
               if summed != busy else "")
    return (f"Host work: {len(host)} commands, busy {format_cycles(busy)} cycles "
            f"({percent(busy, data.total_cycles)} of the run, may overlap NPU work"
            f"{overlap})\n"
            + format_table(("cmd", "engine", "op", "source", "cycles", "us", "bytes"), rows,
                           align="rlllrrr") + more)


__all__ = ["summary"]
