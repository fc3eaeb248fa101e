"""Reports of a design-space sweep (:func:`archsim.sweep.sweep`): a table with one row
per point sorted by latency, the Pareto-optimal points marked, and CSV / JSON / a
Pareto plot for ``archsim sweep --out DIR``.

The Pareto front and the cost metrics live in :mod:`reports.figures` and are imported
on first use, so a sweep worker building :func:`run_totals` never loads matplotlib.
Pareto optimality is over (hardware cost, latency), lower is better on both, among
the points that ran; the cost is a key of :data:`reports.figures.COST_METRICS`
(default ``peak_flops``: peak matrix TFLOP/s). Pure functions of the points.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reports.data import ReportData
from reports.energy import EnergySummary, energy_summary, format_joules
from reports.text import format_bytes, format_cycles, format_si, format_table, format_us

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from archsim.result import SimResult
    from archsim.sweep import SweepPoint

FORMAT = "archsim.sweep"
VERSION = 1


def run_totals(result: SimResult) -> ReportData:
    """The totals and peaks of a run as :class:`ReportData` without its trace
    (``commands=()``, so per-engine figures are empty): what a sweep keeps per point.
    Plain dicts, so it pickles between processes."""
    config = result.config
    capacity = config.sram_capacities
    return ReportData(
        program_name=result.program.name,
        config_name=config.name,
        clock_hz=config.clock_hz,
        cores=config.cores,
        total_cycles=int(result.total_cycles),
        functional=result.functional,
        peak_flops=config.peak_flops,
        vector_peak_flops=float(config.cores * config.core.vector.lanes * config.clock_hz),
        dram_bandwidth_bytes_per_s=config.dram_bandwidth_bytes_per_s,
        host_link_bandwidth_bytes_per_s=config.host_link.bandwidth_gb_per_s * 1e9,
        matmul_flops=int(result.matmul_flops),
        flops=int(result.flops),
        dram_bytes_read=int(result.dram_bytes_read),
        dram_bytes_written=int(result.dram_bytes_written),
        host_link_bytes=int(result.host_link_bytes),
        engines=config.engines,
        sram_peak_bytes=dict(result.sram_peak_bytes),
        sram_capacity_bytes=capacity,
        energy=_plain_energy(energy_summary(result)),
        commands=(),
    )


def _plain_energy(summary: EnergySummary) -> EnergySummary:
    """``summary`` with plain dicts (a MappingProxyType does not pickle) and without
    its power curve (a sweep keeps totals)."""
    return dataclasses.replace(
        summary, dynamic_j=dict(summary.dynamic_j), static_j=dict(summary.static_j),
        engine_j=dict(summary.engine_j), area_mm2=dict(summary.area_mm2),
        power_edges_s=(), power_w=(), power_by_component={})


@dataclass(frozen=True)
class Metric:
    """One per-point number: its table header, value and table formatting."""

    header: str
    value: Callable[[ReportData], float]
    text: Callable[[float], str]


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def _sram_peak_per_core(data: ReportData) -> int:
    return max((v for k, v in data.sram_peak_bytes.items() if k != "shared"), default=0)


METRICS: dict[str, Metric] = {
    "latency_cycles": Metric("latency (cycles)", lambda d: d.total_cycles, format_cycles),
    "latency_us": Metric("latency", lambda d: d.cycles_to_us(d.total_cycles),
                         lambda v: format_us(v * 1e-6)),
    "matrix_utilization": Metric("matrix util", lambda d: _ratio(d.achieved_flops, d.peak_flops),
                                 lambda v: f"{100 * v:.1f}%"),
    "dram_bandwidth_utilization": Metric(
        "DRAM BW util",
        lambda d: _ratio(d.dram_bandwidth_used_bytes_per_s, d.dram_bandwidth_bytes_per_s),
        lambda v: f"{100 * v:.1f}%"),
    "peak_flops": Metric("peak FLOP/s", lambda d: d.peak_flops, lambda v: format_si(v, "FLOP/s")),
    "sram_peak_bytes": Metric("SRAM peak/core", _sram_peak_per_core, format_bytes),
}
"""Per-point metrics by their CSV/JSON name, in table order."""

ENERGY_METRICS: dict[str, Metric] = {
    "energy_j": Metric("energy", lambda d: d.energy.energy_j, format_joules),
    "average_power_w": Metric("power", lambda d: d.energy.average_power_w,
                              lambda v: f"{v:.3g} W"),
    "area_mm2": Metric("area", lambda d: d.energy.area_total_mm2, lambda v: f"{v:.1f} mm²"),
}
"""Metrics of points whose reports carry energy (:mod:`reports.energy`), after
:data:`METRICS`."""


def metrics_for(points: Sequence[SweepPoint]) -> dict[str, Metric]:
    """:data:`METRICS`, and :data:`ENERGY_METRICS` when the points that ran have energy."""
    ran = [p.report for p in points if p.report is not None]
    if ran and all(r.energy is not None for r in ran):
        return METRICS | ENERGY_METRICS
    return METRICS


def point_metrics(point: SweepPoint, metrics: Mapping[str, Metric] = METRICS
                  ) -> dict[str, float] | None:
    """The point's ``metrics`` (None unless it ran)."""
    if point.report is None:
        return None
    return {name: metric.value(point.report) for name, metric in metrics.items()}


def pareto_points(points: Sequence[SweepPoint], cost: str = "peak_flops") -> set[int]:
    """Indices (``SweepPoint.index``) of the points that ran and that no other beats on
    both cost and latency."""
    from reports.figures import pareto_front

    ran = [p for p in points if p.report is not None]
    measure = _cost(cost)
    front = pareto_front([(measure(p.report), p.report.seconds) for p in ran])
    return {ran[i].index for i in front}


def _cost(cost: str) -> Callable[[ReportData], float]:
    from reports.figures import COST_METRICS

    if cost not in COST_METRICS:
        raise ValueError(f"unknown cost {cost!r}; choose one of {', '.join(COST_METRICS)}")
    return COST_METRICS[cost][1]


def by_latency(points: Sequence[SweepPoint]) -> list[SweepPoint]:
    """Points that ran, fastest first (in time: points may differ in clock), then the
    others in grid order."""
    return sorted(points, key=lambda p: (p.report is None,
                                         p.report.seconds if p.report else 0, p.index))


def sweep_table(points: Sequence[SweepPoint], cost: str = "peak_flops") -> str:
    """One row per point, sorted by latency: the swept values, :data:`METRICS`, a ``*``
    under ``pareto`` for Pareto-optimal points, and the status (with the error text)."""
    paths = _paths(points)
    front = pareto_points(points, cost)
    chosen = metrics_for(points)
    rows = []
    for point in by_latency(points):
        values = [str(point.overrides.get(path, "")) for path in paths]
        metrics = point_metrics(point, chosen)
        cells = ([m.text(metrics[name]) for name, m in chosen.items()] if metrics
                 else ["-"] * len(chosen))
        status = point.status + (f": {point.error}" if point.error else "")
        rows.append([*values, *cells, "*" if point.index in front else "", status])
    headers = [*_short_names(paths), *(m.header for m in chosen.values()), "pareto", "status"]
    align = "r" * (len(paths) + len(chosen)) + "ll"
    from reports.figures import COST_METRICS

    legend = (f"\n  pareto: * = no other point is both as cheap ({COST_METRICS[cost][0]}) "
              f"and faster")
    return format_table(headers, rows, align=align) + legend


def _paths(points: Sequence[SweepPoint]) -> list[str]:
    paths: dict[str, None] = {}
    for point in points:
        paths.update(dict.fromkeys(point.overrides))
    return list(paths)


def _short_names(paths: Sequence[str]) -> list[str]:
    short = [path.rpartition(".")[2] for path in paths]
    return [s if short.count(s) == 1 else path for s, path in zip(short, paths)]


# ---------------------------------------------------------------- files


def sweep_to_json(points: Sequence[SweepPoint], cost: str = "peak_flops",
                  meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Plain JSON: ``meta`` (e.g. model, base config, fixed overrides, grid), the Pareto
    cost, and one entry per point in grid order with its overrides, status, error, Pareto
    flag and metrics (null unless it ran; ``cost`` is the point's Pareto cost in the
    unit of ``cost_label``)."""
    from reports.figures import COST_METRICS

    front = pareto_points(points, cost)
    measure = _cost(cost)
    chosen = metrics_for(points)
    entries = []
    for point in sorted(points, key=lambda p: p.index):
        metrics = point_metrics(point, chosen)
        if metrics is not None:
            metrics["cost"] = measure(point.report)
        entries.append({"index": point.index, "overrides": dict(point.overrides),
                        "status": point.status, "error": point.error,
                        "pareto": point.index in front, "metrics": metrics})
    return {"format": FORMAT, "version": VERSION, **(meta or {}), "cost": cost,
            "cost_label": COST_METRICS[cost][0], "points": entries}


def write_sweep_json(points: Sequence[SweepPoint], path: str | os.PathLike[str],
                     cost: str = "peak_flops", meta: dict[str, Any] | None = None) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(sweep_to_json(points, cost, meta), f, indent=1)


def write_sweep_csv(points: Sequence[SweepPoint], path: str | os.PathLike[str],
                    cost: str = "peak_flops") -> None:
    """One row per point sorted by latency: the swept paths, the raw :data:`METRICS`
    (empty unless it ran), ``pareto`` (1/0), ``status`` and ``error``."""
    paths = _paths(points)
    front = pareto_points(points, cost)
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        chosen = metrics_for(points)
        writer.writerow([*paths, *chosen, "pareto", "status", "error"])
        for point in by_latency(points):
            metrics = point_metrics(point, chosen)
            writer.writerow([*(point.overrides.get(p, "") for p in paths),
                             *(metrics.values() if metrics else [""] * len(chosen)),
                             int(point.index in front), point.status, point.error])


def sweep_pareto_figure(points: Sequence[SweepPoint], cost: str = "peak_flops") -> Figure:
    """:func:`reports.figures.pareto_figure` over the points that ran, labelled by
    their swept values."""
    from reports.figures import pareto_figure

    ran = [p for p in points if p.report is not None]
    if not ran:
        raise ValueError("no point of the sweep ran: nothing to plot")
    return pareto_figure([p.report for p in ran], cost=cost, labels=[p.label for p in ran])


__all__ = ["ENERGY_METRICS", "FORMAT", "METRICS", "Metric", "metrics_for", "VERSION", "by_latency", "pareto_points",
           "point_metrics", "run_totals", "sweep_pareto_figure", "sweep_table",
           "sweep_to_json", "write_sweep_csv", "write_sweep_json"]
