"""Several runs side by side (e.g. one workload on different presets): one column per
run, one row per metric, speedups relative to the first run."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from reports.critical_path import critical_path
from reports.data import ReportData, ResultLike, busy_cycles, report_data
from reports.energy import format_joules
from reports.text import format_bytes, format_cycles, format_si, format_table, format_us, percent


def _mean_utilization(data: ReportData, kind: str) -> str:
    from compiler.ir.ops import engine_kind

    engines = [e for e in data.engines if engine_kind(e) == kind]
    if not engines:
        return "-"
    util = data.utilization
    return f"{100 * sum(util[e] for e in engines) / len(engines):.1f}%"


def _path_leader(data: ReportData) -> str:
    shares = critical_path(data).cycles_by("kind")
    if not shares:
        return "-"
    kind, cycles = next(iter(shares.items()))
    return f"{kind} {percent(cycles, data.total_cycles)}"


def _host_cycles(data: ReportData) -> int:
    """Cycles the host CPU or its DMA is busy (overlapping commands counted once)."""
    return busy_cycles(c for c in data.commands if c.kind in ("host", "hdma"))


_METRICS: tuple[tuple[str, Callable[[ReportData], str]], ...] = (
    ("program", lambda d: d.program_name),
    ("cores x clock", lambda d: f"{d.cores} x {d.clock_hz / 1e9:g} GHz"),
    ("latency (cycles)", lambda d: format_cycles(d.total_cycles)),
    ("latency", lambda d: format_us(d.seconds)),
    ("matrix FLOP/s", lambda d: format_si(d.achieved_flops, "FLOP/s")),
    ("  of peak", lambda d: percent(d.achieved_flops, d.peak_flops)),
    ("peak matrix", lambda d: format_si(d.peak_flops, "FLOP/s")),
    ("DRAM bandwidth", lambda d: format_si(d.dram_bandwidth_used_bytes_per_s, "B/s")),
    ("  of peak", lambda d: percent(d.dram_bandwidth_used_bytes_per_s,
                                    d.dram_bandwidth_bytes_per_s)),
    ("DRAM traffic", lambda d: format_bytes(d.dram_bytes)),
    ("mean util mxu", lambda d: _mean_utilization(d, "mxu")),
    ("mean util vpu", lambda d: _mean_utilization(d, "vpu")),
    ("mean util dma", lambda d: _mean_utilization(d, "dma")),
    ("host work", lambda d: format_cycles(_host_cycles(d)) + " cyc"),
    ("crit path top", _path_leader),
    ("SRAM peak/core", lambda d: format_bytes(max(
        (v for k, v in d.sram_peak_bytes.items() if k != "shared"), default=0))),
    ("energy", lambda d: format_joules(d.energy.energy_j) if d.energy else "-"),
    ("average power", lambda d: f"{d.energy.average_power_w:.3g} W" if d.energy else "-"),
    ("area (est.)", lambda d: f"{d.energy.area_total_mm2:.0f} mm²" if d.energy else "-"),
)


def compare_table(results: Sequence[ResultLike], labels: Sequence[str] | None = None) -> str:
    """A metric-per-row table with one column per result (labels default to the config
    names) and a speedup row relative to the first result."""
    datas = [report_data(r) for r in results]
    if not datas:
        raise ValueError("compare_table needs at least one result")
    if labels is not None and len(labels) != len(datas):
        raise ValueError(f"{len(labels)} labels for {len(datas)} results")
    names = list(labels) if labels is not None else [d.config_name for d in datas]
    rows = [(metric, *(fn(d) for d in datas)) for metric, fn in _METRICS]
    base = datas[0].seconds
    rows.insert(4, ("speedup vs " + names[0],
                    *(_speedup(base / d.seconds) if d.seconds else "-" for d in datas)))
    return format_table(("", *names), rows)


def _speedup(ratio: float) -> str:
    """Two decimals, or two significant digits below 0.1 (a run 200x slower reads
    ``0.005x``, not ``0.00x``)."""
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"


__all__ = ["compare_table"]
