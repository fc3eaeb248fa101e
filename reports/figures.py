"""matplotlib figures of a run (and of a sweep): timeline, utilization, roofline, SRAM
occupancy, Pareto front.

Figures are built with :class:`matplotlib.figure.Figure` directly (Agg canvas, no
pyplot state, never shown), so they render headless and never leak between calls.
Each function returns the Figure; :func:`save_figures` writes them as PNGs.

**SRAM occupancy** is derived from the trace, per SRAM space: a region (the bytes a
command writes) is live from the start of the command writing it to the end of the last
command reading it before the region is overwritten (a later write to overlapping
bytes ends it, at the latest when that write starts, so an in-place update is counted
once); a region nobody reads is live only while it is written. Live bytes
over time are the sum of live regions. This is what a schedule keeps resident, which
is usually well below the highest address it touches (the summary's "SRAM peak").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from reports.energy import EnergySummary, power_figure
from reports.data import ReportData, ResultLike, report_data
from reports.roofline_figure import roofline_figure
from reports.perfetto import track_name
from reports.text import format_bytes

_OP_COLORS = {
    "load": "#1f77b4", "store": "#17becf", "copy": "#aec7e8", "matmul": "#d62728",
    "unary": "#2ca02c", "binary": "#98df8a", "select": "#bcbd22", "cast": "#c7c7c7",
    "reduce": "#9467bd", "transpose": "#8c564b", "vcopy": "#c49c94",
    "host_transfer": "#ff7f0e", "host_op": "#e377c2",
}
_MAX_TIMELINE_ROWS = 40


def _op_color(op: str) -> str:
    return _OP_COLORS.get(op, "#7f7f7f")


def _time_scale(data: ReportData) -> tuple[float, str]:
    """Multiply cycles by the factor to get the returned unit (for the traced span)."""
    seconds = data.trace_cycles / data.clock_hz
    if seconds >= 1e-3:
        return 1e3 / data.clock_hz, "ms"
    if seconds >= 1e-6:
        return 1e6 / data.clock_hz, "us"
    return 1e9 / data.clock_hz, "ns"


def _engine_label(engine: str) -> str:
    core = engine.partition(".")[0] if "." in engine else "chip"
    return f"{core} {track_name(engine)}"


# ---------------------------------------------------------------- timeline


def timeline_figure(result: ResultLike) -> Figure:
    """Gantt chart: one row per engine that ran a command, bars colored by op."""
    data = report_data(result)
    engines = list(data.used_engines)
    hidden = max(0, len(engines) - _MAX_TIMELINE_ROWS)
    engines = engines[:_MAX_TIMELINE_ROWS]
    scale, unit = _time_scale(data)
    fig = Figure(figsize=(12, 1.2 + 0.35 * max(len(engines), 3)), layout="constrained")
    ax = fig.add_subplot()
    row = {engine: i for i, engine in enumerate(engines)}
    bars: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for c in data.commands:
        if c.engine in row:
            bars.setdefault((c.engine, c.op), []).append((c.start * scale, c.cycles * scale))
    for (engine, op), spans in bars.items():
        ax.broken_barh(spans, (row[engine] - 0.4, 0.8), facecolors=_op_color(op),
                       edgecolor="white", linewidth=0.3)
    ax.set_yticks(range(len(engines)), [_engine_label(e) for e in engines])
    ax.set_ylim(max(len(engines), 1) - 0.5, -0.5)
    ax.set_xlim(0, max(data.trace_cycles, 1) * scale)
    ax.set_xlabel(f"time ({unit})")
    extra = f", {hidden} more engines not shown" if hidden else ""
    span = (f"{data.total_cycles:,} cycles" if data.trace_cycles >= data.total_cycles else
            f"the simulated {'tiles' if data.tiles and not data.layers else 'layers'}' "
            f"{data.trace_cycles:,} of {data.total_cycles:,} cycles")
    ax.set_title(f"Timeline: {data.program_name} on {data.config_name}\n({span}{extra})")
    ops = sorted({op for _, op in bars})
    ax.legend(handles=[Patch(color=_op_color(op), label=op) for op in ops], title="op",
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    ax.grid(axis="x", alpha=0.3)
    return fig


# ---------------------------------------------------------------- utilization


def utilization_figure(result: ResultLike) -> Figure:
    """Horizontal bars: busy share of the run per engine that ran a command."""
    data = report_data(result)
    engines = list(data.used_engines)
    util = data.utilization
    values = [100 * util.get(e, 0.0) for e in engines]
    fig = Figure(figsize=(9, 1.2 + 0.3 * max(len(engines), 3)), layout="constrained")
    ax = fig.add_subplot()
    from compiler.ir.ops import engine_kind

    kind_colors = {"dma": "#1f77b4", "mxu": "#d62728", "vpu": "#2ca02c", "tdma": "#9edae5",
                   "hdma": "#ff7f0e", "host": "#e377c2"}
    colors = [kind_colors.get(engine_kind(e), "#7f7f7f") for e in engines]
    ax.barh(range(len(engines)), values, color=colors)
    for i, v in enumerate(values):
        ax.text(v + 1, i, f"{v:.1f}%", va="center", fontsize="small")
    ax.set_yticks(range(len(engines)), [_engine_label(e) for e in engines])
    ax.set_ylim(max(len(engines), 1) - 0.5, -0.5)
    ax.set_xlim(0, 110)
    ax.set_xlabel("busy time (% of run)")
    unused = len(data.engines) - len(engines)
    note = f"; {unused} unused engines not shown" if unused > 0 else ""
    ax.set_title(f"Engine utilization: {data.program_name} on {data.config_name}{note}")
    kinds = sorted({engine_kind(e) for e in engines})
    ax.legend(handles=[Patch(color=kind_colors.get(k, "#7f7f7f"), label=k) for k in kinds],
              title="engine kind", loc="lower right", fontsize="small")
    ax.grid(axis="x", alpha=0.3)
    return fig


# ---------------------------------------------------------------- roofline


# ---------------------------------------------------------------- SRAM occupancy


@dataclass(frozen=True)
class Occupancy:
    """Live bytes of one SRAM space as a step function: ``live_bytes[i]`` holds from
    ``cycles[i]`` to ``cycles[i + 1]``."""

    space: str
    cycles: np.ndarray
    live_bytes: np.ndarray
    capacity_bytes: int

    @property
    def max_live_bytes(self) -> int:
        """The most bytes live at once (at or below the space's SRAM peak, the highest
        address the program uses)."""
        return int(self.live_bytes.max()) if len(self.live_bytes) else 0


def sram_occupancy(result: ResultLike) -> tuple[Occupancy, ...]:
    """Live bytes over time per SRAM space that any command touched (definition in the
    module docstring)."""
    data = report_data(result)
    # Commands in the order they start (program order on ties): reads extend the live
    # regions they overlap, writes end overlapping regions and open a new one.
    order = sorted(data.commands, key=lambda c: c.start)
    live: dict[str, list[list[int]]] = {}  # space -> [offset, end, start, last_use]
    closed: dict[str, list[tuple[int, int, int]]] = {}  # space -> (start, end, nbytes)
    for c in order:
        for r in c.reads:
            for region in live.get(r.space, []):
                if region[0] < r.end and r.offset < region[1]:
                    region[3] = max(region[3], c.end)
        for w in c.writes:
            regions = live.setdefault(w.space, [])
            keep = []
            for region in regions:
                if region[0] < w.end and w.offset < region[1]:
                    # The bytes now hold the new value: the old one ends no later than
                    # this write starts (also when this command read it in place).
                    end = min(region[3], c.start)
                    closed.setdefault(w.space, []).append((region[2], end, region[1] - region[0]))
                else:
                    keep.append(region)
            keep.append([w.offset, w.end, c.start, c.end])
            live[w.space] = keep
    for space, regions in live.items():
        for region in regions:
            closed.setdefault(space, []).append((region[2], region[3], region[1] - region[0]))
    result_spaces = []
    for space in sorted(closed, key=_space_order):
        deltas: dict[int, int] = {}
        for start, end, nbytes in closed[space]:
            deltas[start] = deltas.get(start, 0) + nbytes
            deltas[end] = deltas.get(end, 0) - nbytes
        times = np.array(sorted(t for t, d in deltas.items() if d), dtype=np.int64)
        live_bytes = np.cumsum([deltas[t] for t in times]).astype(np.int64)
        result_spaces.append(Occupancy(space, times, live_bytes,
                                       data.sram_capacity_bytes.get(space, 0)))
    return tuple(result_spaces)


def _space_order(space: str) -> tuple[int, int]:
    return (1, 0) if space == "shared" else (0, int(space.removeprefix("sram") or 0))


def sram_occupancy_figure(result: ResultLike, max_lines: int = 8) -> Figure:
    """Live SRAM bytes over time (KiB), one line per space; spaces with identical curves
    (e.g. cores running the same tiles) share one line."""
    data = report_data(result)
    groups: dict[tuple[bytes, bytes], list[Occupancy]] = {}
    for occ in sram_occupancy(data):
        groups.setdefault((occ.cycles.tobytes(), occ.live_bytes.tobytes()), []).append(occ)
    # Shared SRAM first: it is one space for the whole chip.
    lines = sorted(groups.values(),
                   key=lambda g: (g[0].space != "shared", _space_order(g[0].space)))
    shown = lines[:max_lines]
    scale, unit = _time_scale(data)
    fig = Figure(figsize=(11, 5), layout="constrained")
    ax = fig.add_subplot()
    for group in shown:
        occ = group[0]
        # From cycle 0 (nothing live yet) to the end of the run.
        times = np.concatenate(([0], occ.cycles, [data.trace_cycles])) * scale
        values = np.concatenate(([0], occ.live_bytes, occ.live_bytes[-1:]))
        name = occ.space if len(group) == 1 else f"{occ.space} (and {len(group) - 1} identical)"
        # "SRAM peak" means what the text summary means: the highest address used
        peak = data.sram_peak_bytes.get(occ.space, 0)
        line, = ax.step(times, values / 1024, where="post", linewidth=1.5,
                        label=f"{name}: at most {occ.max_live_bytes / 1024:.1f} KiB live; "
                              f"SRAM peak {format_bytes(peak)} of "
                              f"{format_bytes(occ.capacity_bytes)}")
        ax.axhline(peak / 1024, color=line.get_color(), linestyle="--", linewidth=1)
    ax.set_xlim(0, max(data.trace_cycles, 1) * scale)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("live KiB (dashed: SRAM peak)")
    hidden = sum(len(g) for g in lines[max_lines:])
    note = f"; {hidden} more spaces not shown" if hidden else ""
    ax.set_title(f"SRAM occupancy (live = written until last read; SRAM peak = highest "
                 f"address used)\n{data.program_name} on {data.config_name}{note}")
    if shown:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small",
                  title="space")
    ax.grid(alpha=0.3)
    return fig


# ---------------------------------------------------------------- Pareto (sweeps)

COST_METRICS: dict[str, tuple[str, Callable[[ReportData], float]]] = {
    "peak_flops": ("peak matrix TFLOP/s", lambda d: d.peak_flops / 1e12),
    "sram_bytes": ("total SRAM (MiB)",
                   lambda d: sum(d.sram_capacity_bytes.values()) / (1 << 20)),
    "dram_bandwidth": ("DRAM bandwidth (GB/s)", lambda d: d.dram_bandwidth_bytes_per_s / 1e9),
    "cores": ("cores", lambda d: float(d.cores)),
    "energy": ("energy per run (mJ)", lambda d: _energy(d).energy_j * 1e3),
    "power": ("average power (W)", lambda d: _energy(d).average_power_w),
    "area": ("area, estimated (mm²)", lambda d: _energy(d).area_total_mm2),
    "edp": ("energy-delay product (mJ·ms)", lambda d: _energy(d).edp_js * 1e6),
}
"""Cost axes of :func:`pareto_figure`: name -> (axis label, metric)."""


def _energy(data: ReportData) -> EnergySummary:
    if data.energy is None:
        raise ValueError(f"{data.program_name} on {data.config_name}: no energy in this "
                         f"report (saved before energy was modelled)")
    return data.energy


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both (cost, latency), lower is
    better, ordered by cost."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front, best = [], float("inf")
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def pareto_figure(results: Sequence[ResultLike], cost: str = "peak_flops",
                  labels: Sequence[str] | None = None) -> Figure:
    """Latency vs a hardware cost for a sweep, the Pareto front drawn as a line.
    ``cost`` is a key of :data:`COST_METRICS`; labels default to the config names."""
    if cost not in COST_METRICS:
        raise ValueError(f"unknown cost {cost!r}; choose one of {', '.join(COST_METRICS)}")
    datas = [report_data(r) for r in results]
    if labels is not None and len(labels) != len(datas):
        raise ValueError(f"{len(labels)} labels for {len(datas)} results")
    names = list(labels) if labels is not None else [d.config_name for d in datas]
    axis_label, metric = COST_METRICS[cost]
    points = [(metric(d), d.seconds * 1e6) for d in datas]
    front = pareto_front(points)
    fig = Figure(figsize=(8, 6), layout="constrained")
    ax = fig.add_subplot()
    on_front = set(front)
    others = [p for i, p in enumerate(points) if i not in on_front]
    if others:
        ax.scatter(*zip(*others), color="#7f7f7f", label="dominated", zorder=3)
    if front:
        ax.plot(*zip(*(points[i] for i in front)), "o-", color="#d62728",
                label="Pareto front", zorder=4)
    for name, (x, y) in zip(names, points):
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(6, 4), fontsize="small")
    for axis, values in (("x", [p[0] for p in points]), ("y", [p[1] for p in points])):
        positive = [v for v in values if v > 0]
        if len(positive) == len(values) and positive and max(positive) > 30 * min(positive):
            (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    ax.margins(0.15)
    ax.set_xlabel(axis_label)
    ax.set_ylabel("latency (us)")
    programs = sorted({d.program_name for d in datas})
    ax.set_title(f"Latency vs {axis_label}: {', '.join(programs)} ({len(datas)} points)")
    ax.legend(loc="upper right", fontsize="small")
    ax.grid(alpha=0.3)
    return fig


# ---------------------------------------------------------------- all at once

FIGURES: dict[str, Callable[[ResultLike], Figure]] = {
    "timeline": timeline_figure,
    "utilization": utilization_figure,
    "roofline": roofline_figure,
    "sram_occupancy": sram_occupancy_figure,
}
"""The single-run figures, by file stem."""


def write_figures(makers: Mapping[str, Callable[[Any], Figure]], subject: Any,
                  directory: str | os.PathLike[str], dpi: int = 110) -> tuple[Path, ...]:
    """``makers[name](subject)`` written as ``<directory>/<name>.png``, each; the paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in makers.items():
        path = out / f"{name}.png"
        make(subject).savefig(path, dpi=dpi)
        paths.append(path)
    return tuple(paths)


def save_figures(result: ResultLike, directory: str | os.PathLike[str],
                 dpi: int = 110) -> tuple[Path, ...]:
    """Write every single-run figure as ``<directory>/<name>.png``; returns the paths."""
    data = report_data(result)
    paths = write_figures(FIGURES, data, directory, dpi)
    if data.energy is not None:
        paths += write_figures({"power": power_figure}, data.energy, directory, dpi)
    return paths


__all__ = [
    "COST_METRICS", "FIGURES", "Occupancy", "pareto_figure", "pareto_front",
    "roofline_figure", "save_figures", "sram_occupancy", "sram_occupancy_figure",
    "timeline_figure", "utilization_figure", "write_figures",
]
