"""``archsim validate`` on measured LLM serving: rows of (model, config, split,
request, metric, measured value), each run through :func:`serving.run.serve` as
``archsim llm`` runs it.

Columns (header row, any order): ``model`` (a bundled model or a transformers
config.json), ``config`` (a preset or YAML file), ``chips``, ``tp``, ``pp``,
``batch``, ``prefill`` (prompt tokens), ``decode`` (new tokens), ``dtype`` and
``kv_dtype`` (bf16, f16, f32), ``metric`` (``ttft_ms``, ``decode_step_ms`` — the mean
decode step — or ``tokens_per_s``) and ``measured``. Rows that differ only in their
metric share one simulation. The table is :mod:`reports.validation`'s.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archsim.app.validate import ValidationDataError
from archsim.errors import ArchsimError
from reports.validation import METRIC_UNITS, LlmValidationReport, LlmValidationRow

if TYPE_CHECKING:
    from archsim.config import NpuConfig

COLUMNS: tuple[str, ...] = ("model", "config", "chips", "tp", "pp", "batch", "prefill",
                            "decode", "dtype", "kv_dtype", "metric", "measured")
DTYPES: tuple[str, ...] = ("bf16", "f16", "f32")
_COUNTS: tuple[str, ...] = ("chips", "tp", "pp", "batch", "prefill", "decode")


def is_llm_header(fields: list[str]) -> bool:
    """A measurements header of serving rows (it has ``metric`` and ``measured``)."""
    return "metric" in fields and "measured" in fields


@dataclass(frozen=True)
class LlmMeasurement:
    line: int
    model: str
    config: str
    chips: int
    tp: int
    pp: int
    batch: int
    prefill: int
    decode: int
    dtype: str
    kv_dtype: str
    metric: str
    measured: float

    @property
    def run_key(self) -> tuple:
        """What the simulation depends on (the metric is read from it)."""
        return (self.model, self.config, self.tp, self.pp, self.batch, self.prefill,
                self.decode, self.dtype, self.kv_dtype)

    @property
    def label(self) -> str:
        split = f"tp{self.tp}" + (f" pp{self.pp}" if self.pp > 1 else "")
        return (f"{Path(self.model).stem} {Path(self.config).stem} {split} b{self.batch} "
                f"p{self.prefill} d{self.decode} {self.dtype}")


def read_llm_measurements(path: Path, text: str) -> tuple[LlmMeasurement, ...]:
    """The rows of an LLM measurements CSV; every problem names its line and column."""
    reader = csv.DictReader(text.splitlines())
    fields = [f.strip() for f in reader.fieldnames or ()]
    missing = [c for c in COLUMNS if c not in fields]
    if missing:
        raise ValidationDataError(f"{path}: LLM rows need the columns {', '.join(COLUMNS)}; "
                                  f"missing {', '.join(missing)}")
    rows, problems = [], []
    for line, record in enumerate(reader, start=2):
        record = {(k or "").strip(): (v or "").strip() for k, v in record.items()}
        row = _row(line, record, problems)
        if row is not None:
            rows.append(row)
    if problems:
        raise ValidationDataError(f"{path}: " + "; ".join(problems))
    if not rows:
        raise ValidationDataError(f"{path}: no measurement rows after the header")
    return tuple(rows)


def _row(line: int, record: dict[str, str], problems: list[str]) -> LlmMeasurement | None:
    found = len(problems)

    def bad(column: str, expected: str) -> None:
        problems.append(f"line {line}, column {column!r}: expected {expected}, got "
                        f"{record.get(column, '')!r}")

    for column in ("model", "config"):
        if not record.get(column):
            bad(column, "a name")
    counts: dict[str, int] = {}
    for column in _COUNTS:
        value = record.get(column, "")
        least = 0 if column == "decode" else 1
        if not value.isdigit() or int(value) < least:
            bad(column, "a positive integer" if least else "an integer >= 0")
        else:
            counts[column] = int(value)
    for column in ("dtype", "kv_dtype"):
        if record.get(column) not in DTYPES:
            bad(column, f"one of {', '.join(DTYPES)}")
    if record.get("metric") not in METRIC_UNITS:
        bad("metric", f"one of {', '.join(METRIC_UNITS)}")
    try:
        measured = float(record.get("measured", ""))
    except ValueError:
        measured = float("nan")
    if not 0 < measured < float("inf"):
        bad("measured", "a positive number")
    if len(counts) == len(_COUNTS) and counts["chips"] != counts["tp"] * counts["pp"]:
        problems.append(f"line {line}, column 'chips': {counts['chips']} is not tp "
                        f"{counts['tp']} x pp {counts['pp']}")
    if record.get("metric") in ("decode_step_ms", "tokens_per_s") and counts.get("decode") == 0:
        bad("decode", f"at least 1 new token for {record['metric']}")
    if len(problems) > found:
        return None
    return LlmMeasurement(line, record["model"], record["config"], metric=record["metric"],
                          dtype=record["dtype"], kv_dtype=record["kv_dtype"],
                          measured=measured, **counts)


def validate_llm(path: Path, text: str,
                 resolve: Callable[[str], NpuConfig] | None = None) -> LlmValidationReport:
    """Simulate every row of ``path`` on the config ``resolve`` gives for its ``config``
    column (by default the preset or YAML file it names)."""
    measurements = read_llm_measurements(path, text)
    results: dict[tuple, Any] = {}
    rows = []
    for m in measurements:
        found = results.get(m.run_key)
        if found is None:
            found = results[m.run_key] = _serve(path, m, resolve)
        result, config_name = found
        label = m.label.replace(f" {Path(m.config).stem} ", f" {config_name} ", 1)
        rows.append(LlmValidationRow(label, m.metric, m.measured,
                                     *_metric(result, m.metric)))
    return LlmValidationReport(str(path), tuple(rows))


def _serve(path: Path, m: LlmMeasurement, resolve: Callable[[str], NpuConfig] | None
           ) -> tuple[Any, str]:
    from archsim.config import load_config
    from serving.plan import Parallelism, Request
    from serving.run import serve

    try:
        npu = (resolve or load_config)(m.config)
        request = Request(m.batch, m.prefill, m.decode, m.dtype, m.kv_dtype)
        result = serve(m.model, npu, request, Parallelism(m.tp, m.pp, min(m.batch, m.pp)))
    except ArchsimError as exc:
        words = " ".join(part.strip(" -") for part in str(exc).splitlines()) or \
            type(exc).__name__
        raise ValidationDataError(f"{path} line {m.line}: {words}") from None
    return result, npu.name


def _metric(result: Any, metric: str) -> tuple[float, float]:
    """(simulated, roofline) of ``metric``."""
    roof = result.roofline
    if metric == "ttft_ms":
        return result.ttft_s * 1e3, roof.prefill_s * 1e3
    if metric == "decode_step_ms":
        return result.tpot_s * 1e3, roof.tpot_s * 1e3
    return result.tokens_per_s, result.request.batch / roof.tpot_s


__all__ = ["COLUMNS", "LlmMeasurement", "ValidationDataError", "is_llm_header",
           "read_llm_measurements", "validate_llm"]
