"""The report of ``archsim validate``: simulated against measured cycles, row by row
(the runs are :mod:`archsim.app.validate`'s); the error of a row is
``simulated / measured - 1``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ValidationRow:
    workload: str
    measured_cycles: float
    simulated_cycles: int
    roofline_cycles: int
    """The hard lower bound: FLOPs at matrix peak or DRAM bytes at full bandwidth."""

    @property
    def error(self) -> float:
        """Signed relative error: > 0 when archsim is slower than the hardware."""
        return self.simulated_cycles / self.measured_cycles - 1.0


def mean_absolute_error(rows: tuple[ValidationRow, ...] | tuple[LlmValidationRow, ...]
                        ) -> float:
    """The mean of the rows' absolute relative errors."""
    return sum(abs(r.error) for r in rows) / len(rows)


@dataclass(frozen=True)
class ValidationReport:
    config: str
    source: str
    rows: tuple[ValidationRow, ...]

    @property
    def mean_absolute_error(self) -> float:
        return mean_absolute_error(self.rows)

    def to_json(self) -> dict[str, Any]:
        rows = [dict(asdict(r), error=r.error) for r in self.rows]
        return {"config": self.config, "source": self.source, "rows": rows,
                "mean_absolute_error": self.mean_absolute_error}

    def table(self) -> str:
        width = max(len("workload"), *(len(r.workload) for r in self.rows))
        lines = [f"{'workload':<{width}}  {'measured':>11}  {'simulated':>11}  "
                 f"{'error':>8}  {'roofline':>10}"]
        for r in self.rows:
            lines.append(f"{r.workload:<{width}}  {r.measured_cycles:>11,.0f}  "
                         f"{r.simulated_cycles:>11,}  {r.error:>+8.1%}  "
                         f"{r.roofline_cycles:>10,}")
        lines.append(f"mean absolute error over {len(self.rows)} workloads on "
                     f"{self.config}: {self.mean_absolute_error:.1%}")
        return "\n".join(lines)


def write_json(report: "ValidationReport | LlmValidationReport", path: str | Path) -> None:
    Path(path).write_text(json.dumps(report.to_json(), indent=2) + "\n")


# -- LLM serving rows (archsim.app.validate_llm) ------------------------------------------

METRIC_UNITS: dict[str, str] = {"ttft_ms": "ms", "decode_step_ms": "ms",
                                "tokens_per_s": "tokens/s"}
"""The measurable metrics of a serving run and their units."""


@dataclass(frozen=True)
class LlmValidationRow:
    workload: str
    """The run, in words (model, config, split, batch, prompt, new tokens)."""
    metric: str
    """One of :data:`METRIC_UNITS`."""
    measured: float
    simulated: float
    roofline: float
    """The bound from the model's shapes alone (``serving.roofline``): a time the run
    cannot beat, or a throughput it cannot exceed."""

    @property
    def error(self) -> float:
        """Signed relative error, > 0 when archsim is slower than the hardware (for
        tokens/s: measured / simulated - 1)."""
        if self.metric == "tokens_per_s":
            return self.measured / self.simulated - 1.0
        return self.simulated / self.measured - 1.0


@dataclass(frozen=True)
class LlmValidationReport:
    source: str
    rows: tuple[LlmValidationRow, ...]

    @property
    def mean_absolute_error(self) -> float:
        return mean_absolute_error(self.rows)

    def metric_errors(self) -> dict[str, float]:
        """Mean absolute error per metric present."""
        out: dict[str, float] = {}
        for metric in METRIC_UNITS:
            rows = tuple(r for r in self.rows if r.metric == metric)
            if rows:
                out[metric] = mean_absolute_error(rows)
        return out

    def to_json(self) -> dict[str, Any]:
        rows = [dict(asdict(r), error=r.error, unit=METRIC_UNITS[r.metric])
                for r in self.rows]
        return {"source": self.source, "rows": rows,
                "mean_absolute_error": self.mean_absolute_error,
                "mean_absolute_error_by_metric": self.metric_errors()}

    def table(self) -> str:
        width = max(len("run"), *(len(r.workload) for r in self.rows))
        lines = [f"{'run':<{width}}  {'metric':<14}  {'measured':>10}  {'simulated':>10}  "
                 f"{'error':>8}  {'roofline':>10}"]
        for r in self.rows:
            lines.append(f"{r.workload:<{width}}  {r.metric:<14}  {r.measured:>10,.1f}  "
                         f"{r.simulated:>10,.1f}  {r.error:>+8.1%}  {r.roofline:>10,.1f}")
        by_metric = ", ".join(f"{m} {e:.1%}" for m, e in self.metric_errors().items())
        lines.append(f"mean absolute error over {len(self.rows)} rows: "
                     f"{self.mean_absolute_error:.1%} ({by_metric})")
        return "\n".join(lines)


__all__ = ["LlmValidationReport", "LlmValidationRow", "METRIC_UNITS", "ValidationReport",
           "ValidationRow", "mean_absolute_error", "write_json"]
