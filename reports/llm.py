"""Reports of an LLM serving run (:class:`serving.run.ServeResult`): the table a person
reads, the JSON a script reads, and a Perfetto trace with one track group per chip."""

from __future__ import annotations

import json
import os
from typing import Any

from archsim.cluster import Collective, Compute, Host, Send
from reports.text import format_us


def _ms(seconds: float) -> str:
    """Milliseconds with two decimals; below 1 ms in us or ns (a small model's 0.02 ms
    roofline read 0.00 ms beside a ratio of 22x)."""
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else format_us(seconds)


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def llm_table(result: Any) -> str:
    """The summary table of a serving run."""
    spec, req, par, cfg = result.spec, result.request, result.par, result.config
    roof, mem, util = result.roofline, result.memory, result.utilization()
    split = f"{par.chips} chip{'s' if par.chips > 1 else ''}"
    if par.chips > 1 or par.micro_batches > 1:
        split += (f" (tp {par.tp}, pp {par.pp}, {par.micro_batches} "
                  f"micro-batch{'es' if par.micro_batches > 1 else ''})")
    lines = [
        f"{spec.name} on {cfg.name} x {split}: batch {req.batch}, prefill {req.prefill}, "
        f"decode {req.decode}, {req.precision}",
        "",
        f"  {'':24}{'simulated':>14}{'roofline':>14}{'ratio':>8}",
        _row("TTFT (prefill)", result.ttft_s, roof.prefill_s),
        *_decode_rows(result),
        f"  {'end to end':24}{_ms(result.e2e_s):>14}",
        "",
        f"  memory per chip   {_gib(mem.total)} of {_gib(cfg.dram.capacity_bytes)} "
        f"(weights {_gib(mem.weights)}, KV cache {_gib(mem.kv_cache)}, activations "
        f"{_gib(mem.activations)} est.)",
        f"  matrix units      {util['matrix_prefill']:.1%} busy in prefill, "
        + (f"{util['matrix_decode']:.1%} in decode" if req.decode else "no decode"),
        f"  HBM bandwidth     {util['hbm_prefill']:.1%} used in prefill, "
        + (f"{util['hbm_decode']:.1%} in decode" if req.decode else "no decode"),
    ]
    lines += _energy_lines(result)
    if par.chips > 1:
        lines.append(f"  collectives       {util['collectives']:.1%} of chip time; "
                     f"{_gib(result.link_bytes)} over chip-to-chip links")
    lines += _runtime_lines(result)
    lines.append("")
    lines.append("  rooflines: TTFT = max(FLOPs / peak, weights / HBM bandwidth); TPOT = "
                 "max((weights + KV cache) / HBM bandwidth, FLOPs / peak); both at least "
                 "the matmul weights / the arrays' intake (a row of weights an array a "
                 "cycle; with weight-only formats plus the vector units' lanes over a "
                 "weight's unpacking and multiply-adds); over all chips")
    lines += [f"  note: {n}" for n in result.notes()]
    return "\n".join(lines)


def _decode_rows(result: Any) -> list[str]:
    """The TPOT and decode tokens/s rows; n/a without a decode step (``--decode 0``),
    where they read 0 ns at a ratio of 0.00x."""
    req, roof = result.request, result.roofline
    if not req.decode:
        na = "n/a"
        return [f"  {'TPOT (mean decode step)':24}{na:>14}{na:>14}{na:>8}  (no decode step)",
                f"  {'tokens/s (decode)':24}{na:>14}{na:>14}"]
    return [_row("TPOT (mean decode step)", result.tpot_s, roof.tpot_s),
            f"  {'tokens/s (decode)':24}{result.tokens_per_s:>14.1f}"
            f"{(req.batch / roof.tpot_s if roof.tpot_s else 0):>14.1f}"]


def _runtime_lines(result: Any) -> list[str]:
    """The runtime's share of the steps, and where a mean decode step goes."""
    runtime = result.config.runtime
    decode, prefill = result.breakdown(), result.breakdown("prefill")
    lines = []
    if not runtime.is_zero:
        counts = result.step_counts()
        share = _share(decode, "runtime overhead", "host")
        what = [f"{counts['kernels']} kernels a step at {runtime.kernel_launch_us:g} us"
                if runtime.kernel_launch_us else "",
                "each kernel after the previous one ended"
                if runtime.kernel_order == "serial" else "",
                f"{counts['collectives']} collectives at {runtime.collective_latency_us:g} us"
                if runtime.collective_latency_us and counts["collectives"] else "",
                f"host {runtime.host_step_us:g} us a step" if runtime.host_step_us else ""]
        lines.append(
            f"  runtime overhead  {share:.1%} of a decode step, "
            f"{_share(prefill, 'runtime overhead', 'host'):.1%} of prefill "
            f"({', '.join(w for w in what if w)})")
    else:
        lines.append("  runtime overhead  none modelled (runtime: all zero, the hardware "
                     "alone)")
    if decode:
        lines.append(f"  a mean decode step ({_ms(decode['step'])}), per chip:")
        lines += [f"    {name:22}{_ms(decode[name]):>12}{decode[name] / decode['step']:>8.1%}"
                  for name in decode if name != "step" and abs(decode[name]) > 1e-7]
    return lines


def _energy_lines(result: Any) -> list[str]:
    """Energy per token and average power per chip of each phase."""
    lines = []
    for phase in ("prefill", "decode") if result.request.decode else ("prefill",):
        energy = result.energy(phase)
        label = f"energy, {phase}"
        lines.append(f"  {label:18}{energy['energy_per_token_j'] * 1e3:.3f} mJ per token, "
                     f"{energy['average_power_w']:.1f} W per chip on average")
    return lines


def _share(parts: dict[str, float], *names: str) -> float:
    return sum(parts.get(n, 0.0) for n in names) / parts["step"] if parts else 0.0


def _row(name: str, simulated: float, bound: float) -> str:
    ratio = simulated / bound if bound else 0.0
    return f"  {name:24}{_ms(simulated):>14}{_ms(bound):>14}{ratio:>7.2f}x"


def llm_json(result: Any) -> dict[str, Any]:
    spec, req, par, cfg = result.spec, result.request, result.par, result.config
    mem = result.memory
    return {
        "model": spec.name, "config": cfg.name,
        "batch": req.batch, "prefill": req.prefill, "decode": req.decode,
        "dtype": req.dtype, "kv_dtype": req.kv_dtype, "weights": req.weights or req.dtype,
        "chips": par.chips, "tp": par.tp, "pp": par.pp, "micro_batches": par.micro_batches,
        "ttft_s": result.ttft_s, "tpot_s": result.tpot_s if req.decode else None,
        "tokens_per_s": result.tokens_per_s if req.decode else None, "e2e_s": result.e2e_s,
        "memory_bytes": mem.total,
        "memory": {"weights_bytes": mem.weights, "kv_cache_bytes": mem.kv_cache,
                   "activations_bytes": mem.activations,
                   "capacity_bytes": cfg.dram.capacity_bytes},
        "roofline": {"ttft_s": result.roofline.prefill_s, "tpot_s": result.roofline.tpot_s,
                     "prefill_flops": result.roofline.prefill_flops},
        "utilization": result.utilization(),
        "energy": {phase: result.energy(phase) for phase in ("prefill", "decode")},
        "link_bytes": result.link_bytes,
        "runtime": _runtime_json(result),
        "simulated_blocks": [list(k) for k in result.simulated],
        "notes": result.notes(),
    }


def _runtime_json(result: Any) -> dict[str, Any]:
    from dataclasses import asdict

    decode, prefill = result.breakdown(), result.breakdown("prefill")
    return {"config": asdict(result.config.runtime), "per_decode_step": result.step_counts(),
            "overhead_share_decode": _share(decode, "runtime overhead", "host"),
            "overhead_share_prefill": _share(prefill, "runtime overhead", "host"),
            "breakdown_s": {"decode": decode, "prefill": prefill}}


def write_llm_json(result: Any, path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(llm_json(result), f, indent=2)


DETAIL_LIMIT = 400_000
"""Most layer-level slices a trace gets; beyond, stage passes only."""


def llm_trace(result: Any) -> dict[str, Any]:
    """Chrome trace-event JSON: one process per chip, with a ``compute`` track (stage
    passes, and inside each its blocks: embedding, each layer's attention and MLP,
    head) and a ``links`` track (the collectives inside passes and the sends leaving
    the chip)."""
    pipeline = result.pipeline
    detail = sum(len(seg.parts) for _, seg in pipeline.segments.values()) <= DETAIL_LIMIT
    us = 1e6 / result.config.clock_hz
    events: list[dict[str, Any]] = []
    if any(isinstance(s.task, Host) for s in pipeline.result.spans):
        events.append({"name": "process_name", "ph": "M", "pid": 0, "tid": 0,
                       "args": {"name": "host"}})
    for chip in range(result.par.chips):
        events.append({"name": "process_name", "ph": "M", "pid": chip + 1, "tid": 0,
                       "args": {"name": f"chip {chip}"}})
        for tid, name in ((1, "compute"), (2, "links")):
            events.append({"name": "thread_name", "ph": "M", "pid": chip + 1, "tid": tid,
                           "args": {"name": name}})
    for index, span in enumerate(pipeline.result.spans):
        task = span.task
        if isinstance(task, Compute):
            label, segment = pipeline.segments.get(index, ((task.name,), None))
            args = {"cycles": task.cycles}
            if segment is not None:
                args["collective_cycles"] = segment.collective_cycles
            events.append({"name": _pass_name(label), "cat": "compute", "ph": "X",
                           "ts": span.start * us, "dur": (span.end - span.start) * us,
                           "pid": task.chip + 1, "tid": 1, "args": args})
            if segment is not None and detail:
                for name, start, end, collective in segment.parts:
                    kind = ("collective" if collective else
                            "runtime" if "runtime:" in name else "block")
                    events.append({"name": name, "cat": kind,
                                   "ph": "X", "ts": (span.start + start) * us,
                                   "dur": (end - start) * us, "pid": task.chip + 1,
                                   "tid": 2 if collective else 1})
        elif isinstance(task, Host):
            events.append({"name": task.name, "cat": "host", "ph": "X",
                           "ts": span.start * us, "dur": (span.end - span.start) * us,
                           "pid": 0, "tid": 0})
        elif isinstance(task, (Send, Collective)):
            chip = task.src if isinstance(task, Send) else task.chips[0]
            events.append({"name": task.name, "cat": "link", "ph": "X",
                           "ts": span.start * us, "dur": (span.end - span.start) * us,
                           "pid": chip + 1, "tid": 2, "args": {"bytes": task.nbytes}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"model": result.spec.name, "config": result.config.name,
                          "clock_hz": result.config.clock_hz}}


def _pass_name(label: tuple) -> str:
    """("prefill", mb, stage) / ("decode", step, mb, stage) as words."""
    if label[0] == "prefill" and len(label) == 3:
        return f"prefill, micro-batch {label[1]}, stage {label[2]}"
    if label[0] == "decode" and len(label) == 4:
        return f"decode step {label[1]}, micro-batch {label[2]}, stage {label[3]}"
    return " ".join(map(str, label))


def write_llm_trace(result: Any, path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(llm_trace(result), f)


__all__ = ["llm_json", "llm_table", "llm_trace", "write_llm_json", "write_llm_trace"]
