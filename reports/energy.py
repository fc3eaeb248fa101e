"""Energy and power in the reports: a summary saved with a run, its text section, the
TDP warning, the power-over-time figure and Perfetto counter track.

:class:`EnergySummary` is what the reports keep of :class:`archsim.energy.RunEnergy`
(plain numbers, saved in the JSON so ``archsim report result.json`` re-renders it). One
run is one inference of its batch, so energy per inference is the run's energy.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from archsim.area import COMPONENTS
from reports.text import format_si, format_table, format_us, percent

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from archsim.result import SimResult

TIMELINE_BINS = 200
"""Slices of the run the saved power-over-time curve has."""
PEAK_BINS = 100
"""``peak_power_w`` is the highest average power over this many equal slices of the run."""


@dataclass(frozen=True)
class EnergySummary:
    energy_j: float
    seconds: float
    average_power_w: float
    idle_power_w: float
    peak_power_w: float
    tdp_w: float | None
    window_us: float
    window_power_w: float
    """Highest average power over a ``window_us`` window (the TDP check)."""
    dynamic_j: Mapping[str, float]
    static_j: Mapping[str, float]
    engine_j: Mapping[str, float]
    extension_j: float
    power_edges_s: tuple[float, ...]
    power_w: tuple[float, ...]
    area_mm2: Mapping[str, float]
    """Estimated area per component (:mod:`archsim.area`), the design's other cost."""
    power_by_component: Mapping[str, tuple[float, ...]] = field(
        default_factory=lambda: MappingProxyType({}))
    """Per component, its share of ``power_w`` (components that drew nothing left out)."""

    @property
    def area_total_mm2(self) -> float:
        return sum(self.area_mm2.values())

    @property
    def edp_js(self) -> float:
        """Energy-delay product, joule-seconds."""
        return self.energy_j * self.seconds

    @property
    def dynamic_total_j(self) -> float:
        return sum(self.dynamic_j.values())

    @property
    def energy_per_inference_j(self) -> float:
        return self.energy_j

    @property
    def over_tdp(self) -> bool:
        return self.tdp_w is not None and self.window_power_w > self.tdp_w

    def to_json(self) -> dict[str, Any]:
        return {
            "energy_j": self.energy_j, "seconds": self.seconds,
            "average_power_w": self.average_power_w, "idle_power_w": self.idle_power_w,
            "peak_power_w": self.peak_power_w, "tdp_w": self.tdp_w,
            "window_us": self.window_us, "window_power_w": self.window_power_w,
            "energy_per_inference_j": self.energy_per_inference_j,
            "dynamic_j": dict(self.dynamic_j), "static_j": dict(self.static_j),
            "engine_j": dict(self.engine_j), "extension_j": self.extension_j,
            "power_over_time": {"edges_s": list(self.power_edges_s),
                                "watts": list(self.power_w)},
            "area_mm2": dict(self.area_mm2),
            "power_by_component": {k: list(v) for k, v in self.power_by_component.items()},
        }

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> EnergySummary:
        curve = item["power_over_time"]
        return cls(
            energy_j=item["energy_j"], seconds=item["seconds"],
            average_power_w=item["average_power_w"], idle_power_w=item["idle_power_w"],
            peak_power_w=item["peak_power_w"], tdp_w=item["tdp_w"],
            window_us=item["window_us"], window_power_w=item["window_power_w"],
            dynamic_j=MappingProxyType(dict(item["dynamic_j"])),
            static_j=MappingProxyType(dict(item["static_j"])),
            engine_j=MappingProxyType(dict(item["engine_j"])),
            extension_j=item["extension_j"],
            power_edges_s=tuple(curve["edges_s"]), power_w=tuple(curve["watts"]),
            area_mm2=MappingProxyType(dict(item.get("area_mm2", {}))),
            power_by_component=MappingProxyType(
                {k: tuple(v) for k, v in item.get("power_by_component", {}).items()}))


def energy_summary(result: SimResult) -> EnergySummary:
    """The summary of ``result``'s energy (:func:`archsim.energy.run_energy`)."""
    from archsim.area import area_mm2
    from archsim.energy import run_energy

    energy = run_energy(result)
    power = result.config.power
    edges, watts = energy.power_over_time(TIMELINE_BINS)
    _, parts = energy.component_power_over_time(TIMELINE_BINS)
    return EnergySummary(
        energy_j=energy.energy_j, seconds=energy.seconds,
        average_power_w=energy.average_power_w, idle_power_w=energy.idle_power_w,
        peak_power_w=energy.peak_power_w(PEAK_BINS), tdp_w=power.tdp_w,
        window_us=power.window_us,
        window_power_w=energy.window_power_w(power.window_us * 1e-6),
        dynamic_j=energy.dynamic_j, static_j=energy.static_j, engine_j=energy.engine_j,
        extension_j=energy.extension_j, power_edges_s=tuple(edges.tolist()),
        power_w=tuple(watts.tolist()), area_mm2=area_mm2(result.config),
        power_by_component=MappingProxyType({name: tuple(w.tolist()) for name, w in parts.items()
                                             if w.any()}))


_SMALL = (("mJ", 1e-3), ("uJ", 1e-6), ("nJ", 1e-9), ("pJ", 1e-12))


def format_joules(joules: float) -> str:
    """``1.23 J``, ``4.56 mJ``, ``789 nJ`` (``0 J`` for nothing)."""
    if joules == 0:
        return "0 J"
    if abs(joules) >= 1:
        return format_si(joules, "J")
    for unit, scale in _SMALL:
        if abs(joules) >= scale:
            value = joules / scale
            digits = 2 if value < 10 else 1 if value < 100 else 0
            return f"{value:.{digits}f} {unit}"
    return f"{joules:.3g} J"


def tdp_warning(summary: EnergySummary) -> str | None:
    """A one-line warning when the average power over a window exceeds the TDP."""
    if not summary.over_tdp:
        return None
    return (f"warning: average power {summary.window_power_w:.1f} W over a "
            f"{summary.window_us:g} us window exceeds the TDP of {summary.tdp_w:g} W")


def format_energy(summary: EnergySummary) -> str:
    """The text report's energy section (a few lines): totals, power against the TDP,
    each component's share of the energy (largest first)."""
    total = summary.energy_j
    power = (f"average {summary.average_power_w:.3g} W, peak {summary.peak_power_w:.3g} W, "
             f"idle {summary.idle_power_w:.3g} W")
    lines = ["Energy and power",
             f"  energy          {format_joules(total)} per run "
             f"({format_joules(summary.dynamic_total_j)} dynamic, "
             f"{format_joules(total - summary.dynamic_total_j)} static)",
             f"  power           {power}"]
    if summary.tdp_w is not None:
        lines.append(f"  TDP             {summary.tdp_w:g} W; highest {summary.window_us:g} us "
                     f"window {summary.window_power_w:.3g} W")
    if summary.extension_j:
        lines.append(f"  extended        {format_joules(summary.extension_j)} dynamic "
                     f"from the units not simulated")
    shares = sorted(((summary.dynamic_j[c] + summary.static_j[c], c) for c in COMPONENTS),
                    reverse=True)
    lines.append("  by component    " + ", ".join(
        f"{name} {percent(joules, total)}" for joules, name in shares
        if joules >= 0.001 * total and joules > 0))
    warning = tdp_warning(summary)
    if warning:
        lines.append("  " + warning)
    return "\n".join(lines)


def component_table(summary: EnergySummary) -> str:
    """Dynamic and static energy per component, as a table."""
    total = summary.energy_j
    rows = [(name, format_joules(summary.dynamic_j[name]),
             format_joules(summary.static_j[name]),
             percent(summary.dynamic_j[name] + summary.static_j[name], total))
            for name in COMPONENTS]
    return format_table(("component", "dynamic", "static", "share"), rows)


def power_counter_events(summary: EnergySummary, pid: int) -> list[dict[str, Any]]:
    """Perfetto counter events (``ph: C``) of power over time, one per slice, in µs: the
    chip's total (``power (W)``) and each component's (``power by component (W)``, one
    series per component)."""
    events = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
               "args": {"name": "power"}},
              {"name": "thread_name", "ph": "M", "pid": pid, "tid": 0,
               "args": {"name": "chip power"}}]
    parts = summary.power_by_component
    for i, (start, watts) in enumerate(zip(summary.power_edges_s, summary.power_w)):
        events.append({"name": "power (W)", "ph": "C", "pid": pid, "tid": 0,
                       "ts": start * 1e6,
                       "args": {"W": round(watts, 6)}})
        if parts:
            events.append({"name": "power by component (W)", "ph": "C", "pid": pid, "tid": 0,
                           "ts": start * 1e6,
                           "args": {name: round(w[i], 6) for name, w in parts.items()}})
    if summary.power_edges_s:
        events.append({"name": "power (W)", "ph": "C", "pid": pid, "tid": 0,
                       "ts": summary.power_edges_s[-1] * 1e6,
                       "args": {"W": round(summary.idle_power_w, 6)}})
    return events


def power_figure(summary: EnergySummary) -> Figure:
    """Power over the run, with the average, idle power and the TDP marked."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 3.4))
    axes = figure.add_subplot()
    scale, unit = _time_unit(summary.seconds)
    edges = [t * scale for t in summary.power_edges_s]
    parts = summary.power_by_component
    if parts:  # stacked: each component's power on the ones below it
        baseline = [0.0] * len(summary.power_w)
        for name, watts in parts.items():
            top = [b + w for b, w in zip(baseline, watts)]
            axes.stairs(top, edges, baseline=baseline, fill=True, alpha=0.6, label=name)
            baseline = top
    elif summary.power_w:
        axes.stairs(summary.power_w, edges, fill=True, alpha=0.4, label="power")
    axes.axhline(summary.average_power_w, color="C1", linestyle="--",
                 label=f"average {summary.average_power_w:.1f} W")
    axes.axhline(summary.idle_power_w, color="C2", linestyle=":",
                 label=f"idle {summary.idle_power_w:.1f} W")
    if summary.tdp_w is not None:
        axes.axhline(summary.tdp_w, color="C3", label=f"TDP {summary.tdp_w:g} W")
    axes.set_xlabel(f"time ({unit})")
    axes.set_ylabel("power (W)")
    axes.set_ylim(bottom=0)
    axes.set_title(f"Power over time ({format_us(summary.seconds)}, "
                   f"{format_joules(summary.energy_j)})")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    figure.tight_layout()
    return figure


def _time_unit(seconds: float) -> tuple[float, str]:
    if seconds < 1e-3:
        return 1e6, "us"
    if seconds < 1:
        return 1e3, "ms"
    return 1.0, "s"


def save_power_figure(summary: EnergySummary, path: str | os.PathLike[str]) -> None:
    power_figure(summary).savefig(path, dpi=110)


__all__ = ["EnergySummary", "component_table", "energy_summary", "format_energy", "format_joules", "power_counter_events",
           "power_figure", "save_power_figure", "tdp_warning"]
