"""Request workloads for ``archsim serve``: a trace file, or synthetic Poisson arrivals
with fixed or distributed prompt and output lengths.

A trace is CSV (a header row naming the columns) or JSONL (one object a line) with
``arrival_s``, ``prompt_tokens`` and ``output_tokens`` per request; other columns are
ignored. ``output_tokens`` counts every generated token, the one the prefill samples
included. No torch.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from archsim.errors import ModelConfigError

COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")

SHAREGPT = {"prompt": (161.3, 1.0), "output": (338.0, 1.0), "min": 4, "max": 2048}
"""The ShareGPT-like mix: lognormal lengths whose means are the ShareGPT means the vLLM
paper reports (Kwon et al., "Efficient Memory Management for Large Language Model
Serving with PagedAttention", SOSP 2023, section 6.1: 161.31 input and 337.99 output
tokens on average); the spread (sigma 1.0 of the underlying normal) and the clipping to
[4, 2048] tokens are estimates (the paper shows the histograms, not their parameters)."""

DISTRIBUTIONS = ("N", "uniform:A:B", "normal:MEAN:STD", "lognormal:MEAN:SIGMA", "sharegpt")
"""Length specs ``--prompt-tokens``/``--output-tokens`` accept (``lognormal``: the mean
of the lengths and the sigma of their logarithm)."""


class WorkloadError(ModelConfigError):
    """A trace or a length distribution that cannot be read."""


@dataclass(frozen=True)
class Arrival:
    """One request: when it arrives, its prompt length and how many tokens it
    generates."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int


# -- traces ---------------------------------------------------------------------------
def read_trace(path: str | Path) -> tuple[Arrival, ...]:
    """The requests of a CSV or JSONL trace, sorted by arrival (stable), or a
    WorkloadError naming the file, row and column that is wrong."""
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"{path}: no such trace file (CSV or JSONL with "
                            f"{', '.join(COLUMNS)})")
    text = path.read_text()
    jsonl = path.suffix in (".jsonl", ".json") or text.lstrip().startswith("{")
    rows = list(_jsonl_rows(path, text) if jsonl else _csv_rows(path, text))
    if not rows:
        raise WorkloadError(f"{path}: no requests")
    arrivals = [_arrival(path, row, number, i) for i, (number, row) in enumerate(rows)]
    return tuple(sorted(arrivals, key=lambda a: a.arrival_s))


def _csv_rows(path: Path, text: str):
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise WorkloadError(f"{path}: header has no column {', '.join(missing)} "
                            f"(needs {', '.join(COLUMNS)})")
    for number, row in enumerate(reader, start=2):
        yield number, row


def _jsonl_rows(path: Path, text: str):
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}: line {number}: not valid JSON: {exc}") from None
        if not isinstance(row, dict):
            raise WorkloadError(f"{path}: line {number}: expected an object with "
                                f"{', '.join(COLUMNS)}")
        yield number, row


def _arrival(path: Path, row: dict, number: int, index: int) -> Arrival:
    values: list[float] = []
    for column in COLUMNS:
        raw = row.get(column)
        where = f"{path}: row {number}, column {column}"
        if raw is None or raw == "":
            raise WorkloadError(f"{where}: missing")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise WorkloadError(f"{where}: {raw!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise WorkloadError(f"{where}: {raw!r} must be a finite number >= 0")
        if column != "arrival_s" and (value != int(value) or value < 1):
            raise WorkloadError(f"{where}: {raw!r} must be a whole number >= 1")
        values.append(value)
    return Arrival(index, values[0], int(values[1]), int(values[2]))


def write_trace(arrivals: tuple[Arrival, ...] | list[Arrival], path: str | Path) -> None:
    """``arrivals`` as a CSV trace (the format :func:`read_trace` reads)."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for a in arrivals:
            writer.writerow((f"{a.arrival_s:.6f}", a.prompt_tokens, a.output_tokens))


# -- synthetic ------------------------------------------------------------------------
def lengths(spec: str, count: int, rng: np.random.Generator, which: str) -> np.ndarray:
    """``count`` lengths (whole numbers >= 1) drawn from ``spec`` (one of
    :data:`DISTRIBUTIONS`); ``which`` (``prompt`` or ``output``) picks the ShareGPT
    column."""
    name, *params = spec.split(":")
    try:
        numbers = [float(p) for p in params]
    except ValueError:
        raise WorkloadError(f"length {spec!r}: parameters must be numbers; accepted: "
                            f"{', '.join(DISTRIBUTIONS)}") from None
    if name.isdigit() and int(name) >= 1 and not params:
        values = np.full(count, float(name))
    elif name == "uniform" and len(numbers) == 2 and 1 <= numbers[0] <= numbers[1]:
        values = rng.integers(int(numbers[0]), int(numbers[1]) + 1, count).astype(float)
    elif name == "normal" and len(numbers) == 2 and numbers[1] >= 0:
        values = rng.normal(numbers[0], numbers[1], count)
    elif name == "lognormal" and len(numbers) == 2 and numbers[0] > 0 and numbers[1] >= 0:
        values = _lognormal(numbers[0], numbers[1], count, rng)
    elif name == "sharegpt" and not params:
        mean, sigma = SHAREGPT[which]
        values = np.clip(_lognormal(mean, sigma, count, rng), SHAREGPT["min"],
                         SHAREGPT["max"])
    else:
        raise WorkloadError(f"length {spec!r} is not one of {', '.join(DISTRIBUTIONS)} "
                            f"(N >= 1, A <= B)")
    return np.maximum(np.rint(values), 1).astype(int)


def _lognormal(mean: float, sigma: float, count: int, rng: np.random.Generator) -> np.ndarray:
    """Lognormal lengths with mean ``mean``: mu = ln(mean) - sigma^2 / 2."""
    return rng.lognormal(math.log(mean) - sigma * sigma / 2, sigma, count)


def synthetic(rate: float, requests: int, prompt: str, output: str,
              seed: int = 0) -> tuple[Arrival, ...]:
    """``requests`` requests arriving as a Poisson process of ``rate`` per second (the
    first at time 0), lengths drawn from ``prompt`` and ``output``; the same seed gives
    the same lengths at every rate, and arrival times that scale as 1 / rate."""
    if requests < 1:
        raise WorkloadError(f"--requests must be >= 1, got {requests}")
    if not rate > 0:
        raise WorkloadError(f"--rate must be > 0 requests per second, got {rate}")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0, requests)
    gaps[0] = 0.0
    times = np.cumsum(gaps) / rate
    prompts = lengths(prompt, requests, rng, "prompt")
    outputs = lengths(output, requests, rng, "output")
    return tuple(Arrival(i, float(t), int(p), int(o))
                 for i, (t, p, o) in enumerate(zip(times, prompts, outputs)))


__all__ = ["Arrival", "COLUMNS", "DISTRIBUTIONS", "SHAREGPT", "WorkloadError", "lengths",
           "read_trace", "synthetic", "write_trace"]
