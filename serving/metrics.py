"""What a serving run measured: latency percentiles, throughput, goodput under SLOs,
and the time averages of the engine's state, all computed from the per-request records
and the iteration log (:mod:`serving.engine`). No torch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from archsim.errors import ModelConfigError
from serving.engine import EngineResult

PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft", "tpot", "itl", "e2e")
"""Time to first token, time per output token (a request's mean after the first),
inter-token latency (every gap), end to end."""


@dataclass(frozen=True)
class Slo:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    percentile: float = 90.0

    def __post_init__(self) -> None:
        """A target no latency can meet (0 or less, NaN) is refused, as ``--rate 0`` is;
        the flags are named, these being what ``archsim serve`` takes."""
        for flag, value in (("--slo-ttft", self.ttft_ms), ("--slo-tpot", self.tpot_ms)):
            if value is not None and not value > 0:
                raise ModelConfigError(f"{flag} must be > 0 milliseconds, got {value}")
        if not 0 < self.percentile <= 100:
            raise ModelConfigError(f"--slo-percentile must be in (0, 100], got "
                                   f"{self.percentile}")

    def met_by(self, ttft_s: float, tpot_s: float) -> bool:
        return ((self.ttft_ms is None or ttft_s * 1e3 <= self.ttft_ms)
                and (self.tpot_ms is None or tpot_s * 1e3 <= self.tpot_ms))


@dataclass(frozen=True)
class Summary:
    latency_s: dict[str, dict[str, float]]
    """``ttft``/``tpot``/``itl``/``e2e`` -> ``mean``, ``p50``, ``p90``, ``p99``."""
    span_s: float
    """First arrival to last finish."""
    requests: int
    output_tokens: int
    prompt_tokens: int
    goodput_requests: int
    """Requests meeting both SLOs (all when none is set)."""
    mean_in_system: float
    """Time average of requests arrived and not finished (Little's L)."""
    mean_batch: float
    """Time average of sequences computing tokens in an iteration (idle time
    excluded)."""
    mean_slots_idle: float
    """Time average of ``max_num_seqs`` minus those sequences."""
    mean_padded: float
    """Time average of slots held by sequences with nothing to compute (static
    batching: finished ones waiting for their batch's longest)."""
    mean_kv_use: float
    peak_kv_use: float
    busy_fraction: float
    preemptions: int
    slo_attained: bool | None
    """The SLOs met at ``Slo.percentile`` (None when no SLO is set)."""

    @property
    def throughput_tokens_per_s(self) -> float:
        return self.output_tokens / self.span_s if self.span_s else 0.0

    @property
    def throughput_requests_per_s(self) -> float:
        return self.requests / self.span_s if self.span_s else 0.0

    @property
    def goodput_requests_per_s(self) -> float:
        return self.goodput_requests / self.span_s if self.span_s else 0.0

    @property
    def arrival_rate(self) -> float:
        return self.requests / self.span_s if self.span_s else 0.0


def _stats(values: np.ndarray) -> dict[str, float]:
    if not len(values):
        return {"mean": 0.0, **{f"p{p}": 0.0 for p in PERCENTILES}}
    return {"mean": float(values.mean()),
            **{f"p{p}": float(np.percentile(values, p)) for p in PERCENTILES}}


def summarize(result: EngineResult, slo: Slo | None = None) -> Summary:
    slo = slo or Slo()
    recs = result.records
    arrival = np.array([r.arrival_s for r in recs])
    first = np.array([r.first_token_s for r in recs])
    finish = np.array([r.finish_s for r in recs])
    outputs = np.array([r.output_tokens for r in recs])
    ttft = first - arrival
    many = outputs > 1
    tpot = np.where(many, (finish - first) / np.maximum(outputs - 1, 1), 0.0)
    e2e = finish - arrival
    latency = {"ttft": _stats(ttft), "tpot": _stats(tpot[many]),
               "itl": _stats(np.frombuffer(result.inter_token_s, dtype=float)),
               "e2e": _stats(e2e)}
    span = float(finish.max() - arrival.min())
    good = sum(slo.met_by(a, b) for a, b in zip(ttft, tpot))
    it = result.iterations
    dt = np.frombuffer(it.time_s, dtype=float)
    busy = float(dt.sum())
    running = np.frombuffer(it.running, dtype=np.int64)
    seqs = np.frombuffer(it.seqs, dtype=np.int64)
    kv = np.frombuffer(it.kv_blocks, dtype=np.int64) / result.kv_blocks
    attained = None
    if slo.ttft_ms is not None or slo.tpot_ms is not None:
        p = slo.percentile
        attained = slo.met_by(float(np.percentile(ttft, p)),
                              float(np.percentile(tpot[many], p)) if many.any() else 0.0)
    return Summary(
        latency, span, len(recs), int(outputs.sum()), int(sum(r.prompt_tokens for r in recs)),
        int(good), float(np.frombuffer(it.in_system, dtype=float) @ dt / span) if span else 0.0,
        float(seqs @ dt / busy) if busy else 0.0,
        float((result.limits.max_num_seqs - seqs) @ dt / busy) if busy else 0.0,
        float((running - seqs) @ dt / busy) if busy else 0.0,
        float(kv @ dt / busy) if busy else 0.0, float(kv.max()) if len(kv) else 0.0,
        busy / span if span else 0.0, result.preemptions, attained)


__all__ = ["LATENCIES", "PERCENTILES", "Slo", "Summary", "summarize"]
