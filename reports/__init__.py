"""Reports: pure functions from ``SimResult`` (or saved :class:`ReportData`) to text
tables, JSON, Perfetto traces, matplotlib figures and a single-file HTML report.

Kept light: names resolve on first use, so ``import reports`` does not load
matplotlib.

- :func:`summary` — one-screen text summary
- :func:`op_table` / :func:`op_rows` — per-op table attributed to the model
- :func:`critical_path`, :func:`engine_times` (+ ``critical_path_text``, ``idle_text``)
- :func:`perfetto_trace` / :func:`export_perfetto` — Chrome trace-event JSON
- :func:`save_figures` and the ``*_figure`` functions — matplotlib figures
- :func:`html_report` / :func:`write_html` — single-file HTML
- :func:`to_json` / :func:`from_json` — machine-readable results
- :func:`compare_table` — several runs side by side
- :func:`sweep_table`, :func:`write_sweep_csv`, :func:`write_sweep_json`,
  :func:`sweep_pareto_figure` — a design-space sweep (``archsim.sweep``)
"""

from __future__ import annotations

import importlib
from typing import Any

# Text, JSON and trace reports are light and imported eagerly (this also keeps
# ``reports.summary`` the function, not the module of the same name).
from reports.compare import compare_table
from reports.critical_path import (
    CriticalPath,
    EngineTime,
    critical_path,
    critical_path_text,
    engine_times,
    idle_text,
)
from reports.data import ReportData, report_data
from reports.json_report import from_json, read_json, to_json, write_json
from reports.ops import OpRow, op_rows, op_table
from reports.perfetto import export_perfetto, perfetto_trace
from reports.summary import summary
from reports.sweep import (
    run_totals,
    sweep_pareto_figure,
    sweep_table,
    sweep_to_json,
    write_sweep_csv,
    write_sweep_json,
)

# Figures and HTML load matplotlib: resolved on first use.
_LAZY: dict[str, str] = {
    "timeline_figure": "reports.figures", "utilization_figure": "reports.figures",
    "roofline_figure": "reports.figures", "sram_occupancy": "reports.figures",
    "sram_occupancy_figure": "reports.figures", "pareto_figure": "reports.figures",
    "save_figures": "reports.figures",
    "html_report": "reports.html", "write_html": "reports.html",
}

__all__ = [  # noqa: PLE0604 (the lazy names are strings too)
    "CriticalPath", "EngineTime", "OpRow", "ReportData", "compare_table", "critical_path",
    "critical_path_text", "engine_times", "export_perfetto", "from_json", "idle_text",
    "op_rows", "op_table", "perfetto_trace", "read_json", "report_data", "run_totals",
    "summary", "sweep_pareto_figure", "sweep_table", "sweep_to_json", "to_json",
    "write_json", "write_sweep_csv", "write_sweep_json", *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'reports' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
