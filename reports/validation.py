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


@dataclass(frozen=True)
class ValidationReport:
    config: str
    source: str
    rows: tuple[ValidationRow, ...]

    @property
    def mean_absolute_error(self) -> float:
        return sum(abs(r.error) for r in self.rows) / len(self.rows)

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


def write_json(report: ValidationReport, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report.to_json(), indent=2) + "\n")


__all__ = ["ValidationReport", "ValidationRow", "write_json"]
