"""``archsim validate``: the workloads of a measurements file simulated on a config.

The file has a header row with a ``workload`` column (sized workload names of
:mod:`archsim.app.catalog`: ``gemm_2048x2048x2048``...) and one column of measured
cycles whose name ends in ``cycles`` (``tpuv3_cycles`` in
``../shared/data/tpuv3-calibration.csv``); a file of LLM serving rows (its header has
``metric`` and ``measured``) is :mod:`archsim.app.validate_llm`'s. Each workload is built in float32 and run
performance-only through the one pipeline (:func:`archsim.app.run`), as
``archsim run NAME --perf-only`` would; the rows' table is :mod:`reports.validation`.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archsim.errors import ArchsimError
from reports.validation import LlmValidationReport, ValidationReport, ValidationRow

if TYPE_CHECKING:
    from archsim.config import NpuConfig


class ValidationDataError(ArchsimError):
    """A measurements file cannot be read as workload / cycles rows."""


@dataclass(frozen=True)
class Measurement:
    workload: str
    cycles: float


def read_text(path: str | Path) -> tuple[Path, str]:
    """A measurements file's path and text, or a one-line error."""
    path = Path(path)
    if not path.is_file():
        raise ValidationDataError(f"no such measurements file: {path}")
    try:
        return path, path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationDataError(f"{path}: not UTF-8 text ({exc.reason} at byte "
                                  f"{exc.start})") from None


def header(text: str) -> list[str]:
    return [f.strip() for f in csv.DictReader(text.splitlines()).fieldnames or ()]


def is_llm_file(path: str | Path) -> bool:
    """Whether ``path`` holds LLM serving rows (:mod:`archsim.app.validate_llm`)."""
    from archsim.app.validate_llm import is_llm_header

    return is_llm_header(header(read_text(path)[1]))


def read_measurements(path: str | Path) -> tuple[Measurement, ...]:
    """The rows of a measurements CSV; every problem is named with its line."""
    path, text = read_text(path)
    reader = csv.DictReader(text.splitlines())
    fields = [f.strip() for f in reader.fieldnames or ()]
    cycle_columns = [f for f in fields if f.lower().endswith("cycles")]
    if "workload" not in fields or len(cycle_columns) != 1:
        raise ValidationDataError(
            f"{path}: expected a header with a 'workload' column and one column of "
            f"measured cycles named '*cycles' (e.g. 'workload,tpuv3_cycles'), or LLM rows "
            f"(model,config,chips,tp,pp,batch,prefill,decode,dtype,kv_dtype,metric,"
            f"measured); got "
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
    from archsim.app.pipeline import run, sized_workload
    from archsim.app.workload import Workload

    module, inputs = sized_workload(name, "performance")  # too large: on meta
    result = run(Workload.of_module(module, inputs, name=name), config, mode="performance")
    return result.total_cycles, roofline_cycles(module, inputs, config)


def roofline_cycles(module: Any, inputs: tuple[Any, ...], config: NpuConfig) -> int:
    """A hard lower bound, from the workload alone (not the schedule): the larger of its
    matmul/conv FLOPs (torch's FLOP counter) at the matrix engine's peak for the
    precision policy, and its compulsory DRAM traffic (inputs, weights, outputs read or
    written once) at full bandwidth. An f32 workload pays the passes the arrays really
    take for f32 (:func:`archsim.matrix.passes`): one on arrays whose input dtype is f32
    (tiny), ``f32_precision``'s on 16-bit arrays."""
    import copy

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from archsim.matrix import passes as matrix_passes
    from compiler.ir.dtypes import DType

    meta = copy.deepcopy(module).to("meta")
    args = tuple(t.to("meta") for t in inputs)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = meta(*args)
    outs = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    tensors = [*args, *meta.parameters(), *meta.buffers(), *outs]
    has_f32 = any(t.dtype == torch.float32 for t in tensors)
    passes = matrix_passes(DType.f32, config.core.matrix) if has_f32 else 1
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
        names = [m.workload for m in measurements]
        missing = wanted - set(names)
        if missing:
            raise ValidationDataError(f"{path}: no rows named {', '.join(sorted(missing))} "
                                      f"(its rows: {', '.join(names)})")
        measurements = tuple(m for m in measurements if m.workload in wanted)
    rows = []
    for m in measurements:
        simulated, roofline = simulate_workload(m.workload, config)
        rows.append(ValidationRow(m.workload, m.cycles, simulated, roofline))
    return ValidationReport(config.name, str(path), tuple(rows))


def validate_serving(path: str | Path, resolve: Callable[[str], NpuConfig] | None = None
                     ) -> LlmValidationReport:
    """Simulate the LLM serving rows of ``path``, each on ``resolve(its config column)``
    (:mod:`archsim.app.validate_llm`)."""
    from archsim.app.validate_llm import validate_llm

    path, text = read_text(path)
    return validate_llm(path, text, resolve)


__all__ = ["Measurement", "ValidationDataError", "is_llm_file", "read_measurements",
           "roofline_cycles", "simulate_workload", "validate", "validate_serving"]
