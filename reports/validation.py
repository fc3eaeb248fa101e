"""``archsim validate``: simulated cycles against measured cycles from a CSV file.

The file has a header row with a ``workload`` column (names as in
:mod:`reports.validation_workloads`) and one column of measured cycles whose name ends
in ``cycles`` (``tpuv3_cycles`` in ``../shared/data/tpuv3-calibration.csv``). Each
workload is built in float32, exported and compiled like ``archsim.estimate`` and
simulated performance-only; the error of a row is ``simulated / measured - 1``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archsim.errors import ArchsimError

if TYPE_CHECKING:
    from archsim.config import NpuConfig


class ValidationDataError(ArchsimError):
    """A measurements file cannot be read as workload / cycles rows."""


@dataclass(frozen=True)
class Measurement:
    workload: str
    cycles: float


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


def read_measurements(path: str | Path) -> tuple[Measurement, ...]:
    """The rows of a measurements CSV; every problem is named with its line."""
    path = Path(path)
    if not path.is_file():
        raise ValidationDataError(f"no such measurements file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationDataError(f"{path}: not UTF-8 text ({exc.reason} at byte "
                                  f"{exc.start})") from None
    reader = csv.DictReader(text.splitlines())
    fields = [f.strip() for f in reader.fieldnames or ()]
    cycle_columns = [f for f in fields if f.lower().endswith("cycles")]
    if "workload" not in fields or len(cycle_columns) != 1:
        raise ValidationDataError(
            f"{path}: expected a header with a 'workload' column and one column of "
            f"measured cycles named '*cycles' (e.g. 'workload,tpuv3_cycles'); got "
            f"{','.join(fields) or 'no header'}")
    rows: list[Measurement] = []
    problems: list[str] = []
    for line, record in enumerate(reader, start=2):
        record = {(k or "").strip(): (v or "").strip() for k, v in record.items()}
        name, value = record.get("workload", ""), record.get(cycle_columns[0], "")
        try:
            cycles = float(value)
        except ValueError:
            cycles = float("nan")
        if not name or not cycles > 0 or cycles == float("inf"):
            problems.append(f"line {line}: expected a workload name and a positive cycle "
                            f"count, got {name!r}, {value!r}")
            continue
        rows.append(Measurement(name, cycles))
    if problems:
        raise ValidationDataError(f"{path}: " + "; ".join(problems))
    if not rows:
        raise ValidationDataError(f"{path}: no measurement rows after the header")
    return tuple(rows)


def simulate_workload(name: str, config: NpuConfig) -> tuple[int, int]:
    """(simulated cycles, roofline cycles) of one named workload on ``config``."""
    from torch_bridge.estimate import estimate
    from reports.validation_workloads import build_workload

    module, inputs = build_workload(name)
    result = estimate(module, inputs, config)
    return result.total_cycles, roofline_cycles(module, inputs, config)


def roofline_cycles(module: Any, inputs: tuple[Any, ...], config: NpuConfig) -> int:
    """A hard lower bound, from the workload alone (not the schedule): the larger of its
    matmul/conv FLOPs (torch's FLOP counter) at the matrix engine's peak for the
    precision policy, and its compulsory DRAM traffic (inputs, weights, outputs read or
    written once) at full bandwidth."""
    import copy

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    meta = copy.deepcopy(module).to("meta")
    args = tuple(t.to("meta") for t in inputs)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = meta(*args)
    outs = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    tensors = [*args, *meta.parameters(), *meta.buffers(), *outs]
    passes = config.core.matrix.f32_passes if any(
        t.dtype == torch.float32 for t in tensors) else 1
    flops_per_cycle = config.peak_flops / config.clock_hz / passes
    dram_bytes = sum(t.numel() * t.element_size() for t in tensors)
    return int(max(counter.get_total_flops() / flops_per_cycle,
                   dram_bytes / config.dram_bytes_per_cycle))


def validate(path: str | Path, config: NpuConfig,
             workloads: Sequence[str] | None = None) -> ValidationReport:
    """Simulate every row of ``path`` (or only the named ``workloads``) on ``config``."""
    measurements = read_measurements(path)
    if workloads:
        wanted = set(workloads)
        measurements = tuple(m for m in measurements if m.workload in wanted)
        missing = wanted - {m.workload for m in measurements}
        if missing:
            raise ValidationDataError(f"{path}: no rows named {', '.join(sorted(missing))}")
    rows = []
    for m in measurements:
        simulated, roofline = simulate_workload(m.workload, config)
        rows.append(ValidationRow(m.workload, m.cycles, simulated, roofline))
    return ValidationReport(config.name, str(path), tuple(rows))


def write_json(report: ValidationReport, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report.to_json(), indent=2) + "\n")


__all__ = ["Measurement", "ValidationDataError", "ValidationReport", "ValidationRow",
           "read_measurements", "roofline_cycles", "simulate_workload", "validate",
           "write_json"]
