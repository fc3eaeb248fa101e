"""Where a step's time goes: weight streaming, KV-cache reads, the rest of the kernels'
time (compute, latencies), collectives, the runtime's overhead (kernel launches and
the collectives' fixed latency) and the host's work.

Of one micro-batch's pass through the stages (what a step is with one micro-batch),
per chip of a stage. The runtime's parts, the collectives and the host are simulated
spans; the kernels' time is split by attribution: the bytes a step must read (every
weight once, the KV cache it attends to) at the HBM's sustained rate are the
streaming and KV parts, the rest of the kernels' time is compute and latencies.
``pipeline`` is what the step takes beyond these (sends between stages, bubbles;
negative when micro-batches overlap).
"""

from __future__ import annotations

from typing import Any

from serving.compose import Segment
from serving.roofline import weight_bytes

CATEGORIES: tuple[str, ...] = ("weight streaming", "KV reads", "compute and latencies",
                               "collectives", "runtime overhead", "host", "pipeline")


def _sum(stages: list[Segment]) -> Segment:
    total = stages[0]
    for segment in stages[1:]:
        total = total + segment
    return total


def step_breakdown(result: Any, phase: str = "decode") -> dict[str, float]:
    """Seconds of each :data:`CATEGORIES` in a mean ``phase`` step (``decode``: a mean
    decode step; ``prefill``: the first), and ``step`` itself."""
    pipeline, request, par, cfg = result.pipeline, result.request, result.par, result.config
    clock = cfg.clock_hz
    if phase == "prefill":
        passes, step = [pipeline.prefill], result.ttft_s
        kv_bytes = 0.0
    else:
        passes, step = pipeline.decode, result.tpot_s
        if not passes:
            return {}
        tokens = sum(result.spec.kv_tokens(c) for c in request.contexts()) / len(passes)
        kv_bytes = (request.batch * tokens * result.spec.kv_elements_per_token()
                    * request.kv_item)
    mb_share = 1 / par.micro_batches
    segments = [_sum(stages) for stages in passes]
    mean = {name: sum(getattr(s, name) for s in segments) / len(segments) / clock
            for name in ("cycles", "collective_cycles", "launch_cycles", "fixed_cycles")}
    rate = cfg.dram_sustained_bytes_per_cycle * clock
    kernels = mean["cycles"] - mean["collective_cycles"] - mean["launch_cycles"]
    weights = min(kernels, weight_bytes(result.spec, request) / par.tp / rate)
    kv = min(kernels - weights, kv_bytes * mb_share / par.tp / rate)
    host = cfg.us_to_cycles(cfg.runtime.host_step_us) / clock
    parts = {
        "weight streaming": weights,
        "KV reads": kv,
        "compute and latencies": kernels - weights - kv,
        "collectives": mean["collective_cycles"] - mean["fixed_cycles"],
        "runtime overhead": mean["launch_cycles"] + mean["fixed_cycles"],
        "host": host,
    }
    parts["pipeline"] = step - sum(parts.values())
    return {"step": step, **parts}


def step_counts(result: Any) -> dict[str, int]:
    """Kernels launched and collectives run per chip in a decode step (the first)."""
    if not result.pipeline.decode:
        return {"kernels": 0, "collectives": 0}
    step = _sum(result.pipeline.decode[0])
    return {"kernels": step.kernels, "collectives": step.collectives}


__all__ = ["CATEGORIES", "step_breakdown", "step_counts"]
