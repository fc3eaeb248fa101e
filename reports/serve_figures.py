"""matplotlib figures of a request-level serving run: latency CDFs, and throughput,
batch size and KV-cache use over time. Built on :class:`matplotlib.figure.Figure`
directly (no pyplot state), as :mod:`reports.figures`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure


def latency_cdf_figure(result: Any) -> Figure:
    """Cumulative distributions of TTFT, TPOT and end-to-end latency over requests."""
    recs = result.engine.records
    series = {"TTFT": [r.ttft_s for r in recs],
              "TPOT": [r.tpot_s for r in recs if r.output_tokens > 1],
              "end to end": [r.e2e_s for r in recs]}
    fig = Figure(figsize=(12, 3.6))
    for ax, (name, values) in zip(fig.subplots(1, 3), series.items()):
        x = np.sort(np.asarray(values) * 1e3)
        ax.plot(x, np.arange(1, len(x) + 1) / max(len(x), 1), color="tab:blue")
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
        slo = {"TTFT": result.slo.ttft_ms, "TPOT": result.slo.tpot_ms}.get(name)
        if slo is not None:
            ax.axvline(slo, color="tab:red", linestyle="--", label=f"SLO {slo:g} ms")
            ax.legend(loc="lower right")
    fig.suptitle(f"{result.spec.name} on {result.config.name}: latency CDFs")
    fig.tight_layout()
    return fig


def over_time_figure(result: Any, bins: int = 100) -> Figure:
    """Output tokens/s, sequences in an iteration, waiting requests and KV-cache use
    over the run (each averaged over ``bins`` equal intervals)."""
    it = result.engine.iterations
    start = np.frombuffer(it.start_s, dtype=float)
    dt = np.frombuffer(it.time_s, dtype=float)
    end = start + dt
    edges = np.linspace(0.0, float(end.max()) if len(end) else 1.0, bins + 1)
    width = edges[1] - edges[0]
    which = np.clip(np.searchsorted(edges, end, side="right") - 1, 0, bins - 1)
    tokens = np.bincount(which, np.frombuffer(it.tokens_out, dtype=np.int64), bins) / width

    def mean(values: np.ndarray) -> np.ndarray:
        weight = np.bincount(which, dt, bins)
        return np.bincount(which, values * dt, bins) / np.where(weight > 0, weight, 1)

    panels = (("output tokens/s", tokens),
              ("sequences in an iteration", mean(np.frombuffer(it.running, dtype=np.int64))),
              ("waiting requests", mean(np.frombuffer(it.waiting, dtype=np.int64))),
              ("KV cache use (%)", mean(100.0 * np.frombuffer(it.kv_blocks, dtype=np.int64)
                                        / result.budget.blocks)))
    fig = Figure(figsize=(10, 8))
    axes = fig.subplots(len(panels), 1, sharex=True)
    centers = (edges[:-1] + edges[1:]) / 2
    for ax, (name, values) in zip(axes, panels):
        ax.plot(centers, values, color="tab:blue")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("time (s)")
    fig.suptitle(f"{result.spec.name} on {result.config.name}: over time")
    fig.tight_layout()
    return fig


FIGURES = {"serve_latency_cdf": latency_cdf_figure, "serve_over_time": over_time_figure}


def save_serve_figures(result: Any, directory: str | os.PathLike[str],
                       dpi: int = 110) -> tuple[Path, ...]:
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in FIGURES.items():
        path = out / f"{name}.png"
        make(result).savefig(path, dpi=dpi)
        paths.append(path)
    return tuple(paths)


__all__ = ["FIGURES", "latency_cdf_figure", "over_time_figure", "save_serve_figures"]
