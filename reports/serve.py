"""Reports of a request-level serving run (:class:`serving.traffic.TrafficResult`): the
summary a person reads at a glance, the JSON a script reads, and a Perfetto trace of
the iterations."""

from __future__ import annotations

import json
import math
import os
from typing import Any

_LATENCY_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "inter-token", "e2e": "end to end"}


def _ms(seconds: float) -> str:
    """Milliseconds, one decimal from 10 ms up, else three significant digits (a small
    model's 0.031 ms TTFT read 0.0)."""
    ms = seconds * 1e3
    return f"{ms:.1f}" if ms >= 10 else f"{ms:.3g}"


def serve_table(result: Any, probes: list | None = None) -> str:
    """The summary of a run (and of a capacity search's probes)."""
    spec, cfg, par, opt, s = result.spec, result.config, result.par, result.options, result.summary
    budget, eng = result.budget, result.engine
    chips = f"{par.chips} chip{'s' if par.chips > 1 else ''}"
    if par.chips > 1:
        chips += f" (tp {par.tp}, pp {par.pp})"
    lines = [
        f"{spec.name} on {cfg.name} x {chips}: {s.requests} requests, {opt.scheduler} "
        f"batching (max {opt.max_num_seqs} seqs, {opt.max_num_batched_tokens} tokens an "
        f"iteration), {opt.dtype}" + (f", {opt.weights} weights" if opt.weights else ""),
        f"  KV cache ({opt.kv_dtype}): {budget.blocks} blocks of {budget.block_size} tokens "
        f"({budget.tokens} tokens, {budget.blocks * budget.block_bytes / 2**30:.2f} GiB)",
        "",
        f"  {'latency (ms)':16}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}",
    ]
    decoded = _decoded(result)
    for key, name in _LATENCY_NAMES.items():
        row = s.latency_s[key]
        if key in ("tpot", "itl") and not decoded:
            lines.append(f"  {name:16}" + f"{'n/a':>10}" * 4 + "  (no decode step: one "
                         "output token a request)")
            continue
        lines.append(f"  {name:16}" + "".join(f"{_ms(row[k]):>10}"
                                              for k in ("mean", "p50", "p90", "p99")))
    lines += [
        "",
        f"  throughput        {s.throughput_tokens_per_s:.1f} output tokens/s, "
        f"{s.throughput_requests_per_s:.3f} requests/s over {s.span_s:.2f} s",
    ]
    slo = result.slo
    if slo.ttft_ms is not None or slo.tpot_ms is not None:
        targets = ", ".join(t for t in (f"TTFT <= {slo.ttft_ms:g} ms" if slo.ttft_ms
                                        is not None else "",
                                        f"TPOT <= {slo.tpot_ms:g} ms" if slo.tpot_ms
                                        is not None else "") if t)
        lines.append(f"  goodput           {s.goodput_requests_per_s:.3f} requests/s "
                     f"({s.goodput_requests} of {s.requests} meet {targets}); at "
                     f"p{slo.percentile:g}: {'met' if s.slo_attained else 'NOT met'}")
    lines += [
        f"  batch             {s.mean_batch:.1f} sequences an iteration on average, "
        f"{s.mean_slots_idle:.1f} of {opt.max_num_seqs} slots idle"
        + (f" ({s.mean_padded:.1f} held by finished sequences)" if s.mean_padded else "")
        + f"; busy "
        f"{s.busy_fraction:.0%} of the time; {len(eng.iterations)} iterations",
        f"  KV cache use      mean {s.mean_kv_use:.0%}, peak {s.peak_kv_use:.0%}; "
        f"{s.preemptions} preemption{'s' if s.preemptions != 1 else ''} (recompute)",
        f"  requests in system {s.mean_in_system:.2f} on average",
    ]
    if opt.scheduler == "static":
        lines.append("  static batching: a batch starts when the last one has finished; "
                     "finished sequences keep their slots and the batch is padded to its "
                     "longest prompt and context, so slots sit idle that continuous "
                     "batching would refill every iteration")
    lines += ["", "  notes:",
              f"  - iteration times from archsim's simulation of {result.simulated} "
              f"distinct shapes on {cfg.name} (runtime overheads included), interpolated "
              f"linearly between them (serving.iteration)",
              "  - an iteration timed as one forward over all its new tokens (one "
              "sequence), plus each prefill chunk's attention to its sequence's cached "
              "tokens, less its attention to other sequences' tokens in that one sequence "
              "(simulated attention blocks), plus the decoding sequences' attention to "
              "their cached context (at their mean)"
              + ("; static batching's padded prefill as one sequence"
                 if opt.scheduler == "static" else "")]
    if par.pp > 1:
        lines.append("  - with --pp an iteration's stages run one after another (no "
                     "overlap with the next iteration): throughput is a lower bound")
    if probes:
        lines += ["", "  capacity search (each probe a full simulation):",
                  f"  {'rate (req/s)':>14}{'TTFT ms':>10}{'TPOT ms':>10}  SLO at "
                  f"p{result.slo.percentile:g}"]
        for probe in probes:
            tpot = _fmt(_pct(probe, "tpot"), ".1f")
            lines.append(f"  {probe.rate:>14.3f}{_pct(probe, 'ttft'):>10.1f}{tpot:>10}  "
                         f"{_verdict(probe)}")
    return "\n".join(lines)


def _decoded(result: Any) -> bool:
    """Whether any request of a run had a decode step (more than one output token): TPOT
    and inter-token latency are not defined otherwise."""
    return any(r.output_tokens > 1 for r in result.engine.records)


def cheapest_table(found: Any, tried: list, cost: str, unit: str, slo: Any) -> str:
    """``archsim serve --cheapest``: every candidate in cost order, what it achieved at
    the SLOs' (:class:`serving.metrics.Slo`) percentile, and the cheapest that meets
    them."""
    pct = f"p{slo.percentile:g}"
    lines = [f"Cheapest hardware meeting the SLOs at {pct} (cost: {cost}, each candidate a "
             f"full simulation of the same arrivals, cheapest first)",
             f"  {'config':<16}{'chips':>6}{'cost ' + unit:>14}{f'TTFT {pct} ms':>16}"
             f"{f'TPOT {pct} ms':>16}  outcome"]
    for c in tried:
        ttft = f"{_pct(c, 'ttft'):.3g}" if c.result is not None else "-"
        tpot = _fmt(_pct(c, "tpot"), ".3g") if c.result is not None else "-"
        lines.append(f"  {c.config.name:<16}{c.chips:>6}{c.cost:>14,.1f}{ttft:>16}{tpot:>16}"
                     f"  {c.status}")
    lines.append("")
    if found:
        lines.append(f"cheapest: {found.config.name} x {found.chips} ({found.cost:,.1f} {unit})")
    elif all(c.result is None for c in tried):
        lines.append("no candidate meets the SLOs: none could serve the model, so none was "
                     "simulated (each one's reason above)")
    else:
        lines.append("no candidate meets the SLOs")
    return "\n".join(lines)


def cheapest_json(found: Any, tried: list, cost: str, unit: str) -> dict[str, Any]:
    def one(c: Any) -> dict[str, Any]:
        row: dict[str, Any] = {"config": c.config.name, "chips": c.chips, "cost": c.cost,
                               "status": c.status}
        if c.result is not None:
            row.update(ttft_ms=_pct(c, "ttft"), tpot_ms=_pct(c, "tpot"))
        return row
    return {"cost": cost, "unit": unit, "candidates": [one(c) for c in tried],
            "cheapest": one(found) if found else None}


def _pct(probe: Any, key: str) -> float | None:
    """A probe's (or a candidate's) latency at the SLO's percentile, in ms; TPOT is None
    when no request had a decode step (one output token each)."""
    import numpy as np

    recs = probe.result.engine.records
    pct = probe.result.slo.percentile
    if key == "ttft":
        values = [r.ttft_s for r in recs]
    else:
        values = [r.tpot_s for r in recs if r.output_tokens > 1]
        if not values:
            return None
    return float(np.percentile(values, pct)) * 1e3


def _fmt(value: float | None, spec: str) -> str:
    """``value`` in the format ``spec``; ``n/a`` for None."""
    return "n/a" if value is None else format(value, spec)


def _verdict(probe: Any) -> str:
    """``met``, ``not met``, or ``met, fell behind`` (with the pace it completed
    requests at): the SLOs met by a run too short for its growing queue to break them."""
    if not probe.met:
        return "not met"
    if probe.kept_up:
        return "met"
    return f"met, fell behind (completed {probe.served_rate:.3f}/s)"


def max_rate_line(search: Any, percentile: float) -> str:
    """What a capacity search (:class:`serving.traffic.MaxRate`) found, on one line: a
    rate only where its runs could show one, never above the pace a run kept up with."""
    last = search.probes[-1].result.summary
    if search.rate is None:
        return (f"max rate not determined: all {last.requests} requests meet the SLOs at "
                f"p{percentile:g} even arriving at once (probed up to "
                f"{search.probes[-1].rate:.3f} requests/s, a throughput of "
                f"{last.throughput_requests_per_s:.3f} requests/s); more --requests would "
                f"show where a queue breaks them")
    if search.unreachable:
        return "no rate meets the SLOs: " + _lowest_load_misses(search.alone)
    if not search.rate:
        return "no probed rate meets the SLOs"
    line = f"max rate meeting the SLOs at p{percentile:g}: {search.rate:.3f} requests/s"
    if search.capped:
        met = max(p.rate for p in search.probes if p.met)
        line += (f": capped where the probes kept up (up to {met:.3f} requests/s met the "
                 f"SLOs over {last.requests} requests while completing them slower than "
                 f"they came, at most {search.served:.3f}/s; more --requests would show "
                 f"the queue breaking them)")
    return line


def _lowest_load_misses(alone: Any) -> str:
    """Which SLOs the lowest-load probe (each request alone) misses, with its figures:
    ``TTFT p90 11.9 ms at the lowest load (each of 10 requests alone) > --slo-ttft 1 ms``."""
    slo, records = alone.result.slo, alone.result.engine.records
    pct = f"p{slo.percentile:g}"
    misses = []
    if slo.ttft_ms is not None and _pct(alone, "ttft") > slo.ttft_ms:
        misses.append(f"TTFT {pct} {_pct(alone, 'ttft'):.3g} ms > --slo-ttft {slo.ttft_ms:g} ms")
    tpot = _pct(alone, "tpot")
    if slo.tpot_ms is not None and tpot is not None and tpot > slo.tpot_ms:
        misses.append(f"TPOT {pct} {tpot:.3g} ms > --slo-tpot {slo.tpot_ms:g} ms")
    return (f"{' and '.join(misses)} at the lowest load (each of {len(records)} "
            f"request{'s' if len(records) != 1 else ''} alone)")


def serve_json(result: Any, probes: list | None = None,
               max_rate: float | None = None, search: Any = None) -> dict[str, Any]:
    s, opt = result.summary, result.options
    data: dict[str, Any] = {
        "model": result.spec.name, "config": result.config.name,
        "chips": result.par.chips, "tp": result.par.tp, "pp": result.par.pp,
        "scheduler": opt.scheduler, "max_num_seqs": opt.max_num_seqs,
        "max_num_batched_tokens": opt.max_num_batched_tokens,
        "block_size": opt.block_size, "kv_blocks": result.budget.blocks,
        "throughput_tokens_per_s": s.throughput_tokens_per_s,
        "throughput_requests_per_s": s.throughput_requests_per_s,
        "goodput_requests_per_s": s.goodput_requests_per_s,
        "span_s": s.span_s, "preemptions": s.preemptions,
        "mean_batch": s.mean_batch, "mean_slots_idle": s.mean_slots_idle,
        "mean_padded": s.mean_padded, "mean_kv_use": s.mean_kv_use,
        "peak_kv_use": s.peak_kv_use, "mean_in_system": s.mean_in_system,
        "slo": {"ttft_ms": result.slo.ttft_ms, "tpot_ms": result.slo.tpot_ms,
                "percentile": result.slo.percentile, "attained": s.slo_attained},
        **{f"{k}_s": (v if k not in ("tpot", "itl") or _decoded(result) else None)
           for k, v in s.latency_s.items()},
        "requests": [{"id": r.id, "arrival_s": r.arrival_s, "first_token_s": r.first_token_s,
                      "finish_s": r.finish_s, "prompt_tokens": r.prompt_tokens,
                      "output_tokens": r.output_tokens, "preemptions": r.preemptions}
                     for r in result.engine.records],
    }
    it = result.engine.iterations
    data["iterations"] = {name: list(getattr(it, name)) for name in
                          ("start_s", "time_s", "prefill_tokens", "decode_seqs", "seqs",
                           "running", "waiting", "kv_blocks", "tokens_out")}
    if probes is not None:
        data["max_rate"] = max_rate
    if search is not None:
        data["max_rate_capped"] = search.capped
        data["max_rate_served"] = None if math.isinf(search.served) else search.served
        data["max_rate_text"] = max_rate_line(search, result.slo.percentile)
        if search.alone is not None:
            data["lowest_load"] = {"met": search.alone.met,
                                   "ttft_ms": _pct(search.alone, "ttft"),
                                   "tpot_ms": _pct(search.alone, "tpot")}
        data["probes"] = [{"rate": p.rate, "met": p.met, "kept_up": p.kept_up,
                           "served_rate": None if math.isinf(p.served_rate)
                           else p.served_rate,
                           "ttft_ms": _pct(p, "ttft"), "tpot_ms": _pct(p, "tpot")}
                          for p in probes]
    return data


def write_serve_json(result: Any, path: str | os.PathLike[str], probes: list | None = None,
                     max_rate: float | None = None, search: Any = None) -> None:
    with open(path, "w") as f:
        json.dump(serve_json(result, probes, max_rate, search), f, indent=1)


def serve_trace(result: Any) -> dict[str, Any]:
    """Chrome trace-event JSON (as :mod:`reports.perfetto`): one track of iterations
    (each a complete event with its shape in ``args``), counters of queue length, batch
    size and KV-cache use."""
    it = result.engine.iterations
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "engine"}},
        {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "iterations"}},
    ]
    total = result.budget.blocks
    for i in range(len(it)):
        ts = it.start_s[i] * 1e6
        events.append({"ph": "X", "pid": 1, "tid": 1, "ts": ts, "dur": it.time_s[i] * 1e6,
                       "name": "prefill+decode" if it.prefill_tokens[i] and it.decode_seqs[i]
                       else ("prefill" if it.prefill_tokens[i] else "decode"),
                       "args": {"prefill_tokens": it.prefill_tokens[i],
                                "decode_seqs": it.decode_seqs[i],
                                "tokens_out": it.tokens_out[i]}})
        events.append({"ph": "C", "pid": 1, "ts": ts, "name": "queue",
                       "args": {"waiting": it.waiting[i], "running": it.running[i]}})
        events.append({"ph": "C", "pid": 1, "ts": ts, "name": "KV cache use %",
                       "args": {"used": 100.0 * it.kv_blocks[i] / total}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_serve_trace(result: Any, path: str | os.PathLike[str]) -> None:
    with open(path, "w") as f:
        json.dump(serve_trace(result), f)


__all__ = ["cheapest_json", "cheapest_table", "max_rate_line", "serve_json", "serve_table",
           "serve_trace", "write_serve_json", "write_serve_trace"]
