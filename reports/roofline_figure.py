"""The roofline figure of a run, with its op labels placed so they do not overlap.

Each placed op is a point at (arithmetic intensity, achieved FLOP/s over its span); the
longest ops are named, each label next to its own point with a leader line to it. Labels
are placed in order of the ops' time: each takes the first of a few offsets around its
point where its box overlaps no label placed before nor the legend and stays inside the
axes; a label with no such place is left out, and the title says how many are named.
"""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Annotation, Text

from reports.data import ResultLike, report_data
from reports.ops import op_rows
from reports.text import format_si

MAX_LABELS = 10
_OFFSETS = ((6, 4), (6, -12), (-6, 4), (6, 16), (6, -24), (-6, -12), (6, 28), (6, -36))
"""Label offsets from its point, in points, tried in order (text anchored at the
label's lower left; negative x puts it to the left of the point)."""


def roofline_figure(result: ResultLike) -> Figure:
    """Roofline (log-log): arithmetic intensity (FLOP per DRAM byte) vs achieved FLOP/s
    over each source op's span, under the matrix and vector peaks and the DRAM
    bandwidth ceiling. Ops without FLOPs or without DRAM traffic cannot be placed and
    are listed in the title."""
    data = report_data(result)
    rows = op_rows(data)
    placed = [r for r in rows if r.flops and r.dram_bytes and r.span_cycles]
    skipped = len(rows) - len(placed)
    fig = Figure(figsize=(9, 6), layout="constrained")
    ax = fig.add_subplot()
    intensities = [r.arithmetic_intensity for r in placed]
    ridge = data.peak_flops / data.dram_bandwidth_bytes_per_s
    low = min([ridge / 100, *intensities]) / 2
    high = max([ridge * 100, *intensities]) * 2
    x = np.geomspace(low, high, 200)
    ax.loglog(x, np.minimum(data.peak_flops, x * data.dram_bandwidth_bytes_per_s), "k-",
              linewidth=2, label=f"matrix peak {format_si(data.peak_flops, 'FLOP/s')}, "
                                 f"DRAM {format_si(data.dram_bandwidth_bytes_per_s, 'B/s')}")
    ax.loglog(x, np.minimum(data.vector_peak_flops, x * data.dram_bandwidth_bytes_per_s),
              "k--", linewidth=1,
              label=f"vector peak {format_si(data.vector_peak_flops, 'FLOP/s')}")
    ax.axvline(ridge, color="grey", linestyle=":", linewidth=1,
               label=f"ridge {ridge:.3g} FLOP/B")
    # One colour and marker per bound (a legend entry each, however many ops); only
    # the ops that take the most time are named, so labels stay readable.
    styles = {"compute": ("o", "tab:red"), "memory": ("s", "tab:blue"),
              "latency": ("^", "tab:orange"), "host": ("D", "tab:purple")}
    for bound, (marker, color) in styles.items():
        group = [r for r in placed if r.bound == bound]
        if group:
            ax.scatter([r.arithmetic_intensity for r in group],
                       [r.achieved_flops for r in group], s=50, zorder=3, marker=marker,
                       color=color, alpha=0.8, label=f"{bound}-bound ops ({len(group)})")
    named = sorted(placed, key=lambda r: r.span_cycles, reverse=True)[:MAX_LABELS]
    ax.set_xlim(low, high)
    labels = [ax.annotate(r.source, (r.arithmetic_intensity, r.achieved_flops),
                          textcoords="offset points", xytext=_OFFSETS[0], fontsize="small",
                          arrowprops={"arrowstyle": "-", "color": "grey", "linewidth": 0.5,
                                      "shrinkA": 0, "shrinkB": 3})
              for r in named]
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
    ax.set_ylabel("achieved FLOP/s (over the op's span)")
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(True, which="both", alpha=0.3)

    def title(named_count: int) -> str:
        notes = []
        if len(placed) > named_count:
            notes.append(f"the {named_count} longest ops named")
        if skipped:
            notes.append(f"{skipped} ops without FLOPs or DRAM traffic not placed")
        text = f"Roofline: {data.program_name} on {data.config_name}"
        return text + "\n(" + "; ".join(notes) + ")" if notes else text

    ax.set_title(title(0) + "\n")  # the layout reserves two lines before labels are placed
    ax.set_title(title(place_labels(fig, ax, labels)))
    return fig


def place_labels(fig: Figure, ax, labels: list[Annotation]) -> int:
    """Move each label (most important first) to the first offset where it overlaps no
    label already placed nor the legend and stays inside the axes; remove those that
    fit nowhere. Returns how many are shown. Lays the figure out once, then fixes
    the layout so the placement holds when saved."""
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    fig.set_layout_engine("none")
    renderer = canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    legend = ax.get_legend()
    boxes = [legend.get_window_extent(renderer)] if legend is not None else []
    shown = 0
    for label in labels:
        for dx, dy in _OFFSETS:
            label.xyann = (dx, dy)
            label.set_horizontalalignment("right" if dx < 0 else "left")
            box = Text.get_window_extent(label, renderer)  # the text, not its leader
            if box.x0 >= inside.x0 and box.x1 <= inside.x1 and box.y0 >= inside.y0 \
                    and box.y1 <= inside.y1 and not any(box.overlaps(b) for b in boxes):
                boxes.append(box)
                shown += 1
                break
        else:
            label.remove()
    return shown


__all__ = ["MAX_LABELS", "place_labels", "roofline_figure"]
