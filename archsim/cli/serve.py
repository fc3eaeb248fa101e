"""``archsim serve``: request-level serving -- requests arriving over time, continuous
batching with a paged KV cache, latency percentiles, throughput and goodput under SLOs,
the highest request rate meeting them, and the cheapest hardware that does. See
:mod:`serving.traffic` and :mod:`serving.capacity`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

_DTYPES = ("bf16", "f16", "f32")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``serve`` on the subparsers of ``archsim``."""
    from archsim.cli.llm import add_model_arguments
    from archsim.cli.main import output_file, positive
    from serving.workload import DISTRIBUTIONS

    p = sub.add_parser(
        "serve", help="request-level serving: arrivals, continuous batching, a paged KV "
                      "cache, latency percentiles and SLOs",
        description="Serve a stream of requests with MODEL: a vLLM-like scheduler "
                    "(continuous batching, chunked prefill, a paged KV cache, preemption "
                    "by recompute) whose every iteration takes the time archsim simulates "
                    "for its mix of prefill and decode tokens (each distinct shape "
                    "simulated once, shapes between interpolated). Prints TTFT, TPOT, "
                    "inter-token and end-to-end latency percentiles, throughput and "
                    "goodput. The workload is --trace FILE, or synthetic Poisson arrivals "
                    "(--rate, --requests, --prompt-tokens, --output-tokens, --seed).")
    add_model_arguments(p)
    p.add_argument("--dtype", choices=_DTYPES, default="bf16", help="default bf16")
    p.add_argument("--kv-dtype", choices=(*_DTYPES, "int8", "fp8"), default=None,
                   help="KV cache (default: --dtype); int8 or fp8 (e4m3) hold twice the "
                        "tokens of bf16 in the same blocks' memory, plus a scale per "
                        "token and head")
    w = p.add_argument_group("workload")
    w.add_argument("--trace", metavar="FILE",
                   help="CSV or JSONL with arrival_s, prompt_tokens, output_tokens per "
                        "request (python -m serving.sharegpt converts ShareGPT JSON)")
    w.add_argument("--rate", type=float, default=None,
                   help="synthetic: Poisson arrivals per second (default 1)")
    w.add_argument("--requests", type=positive, default=None,
                   help="synthetic: number of requests (default 100)")
    w.add_argument("--prompt-tokens", default=None, metavar="N|DIST",
                   help=f"synthetic prompt lengths: {', '.join(DISTRIBUTIONS)} "
                        f"(default sharegpt)")
    w.add_argument("--output-tokens", default=None, metavar="N|DIST",
                   help="synthetic generated tokens per request, the first included "
                        "(default sharegpt)")
    w.add_argument("--seed", type=int, default=None,
                   help="synthetic: random seed (default 0)")
    s = p.add_argument_group("scheduler")
    s.add_argument("--scheduler", choices=("continuous", "static"), default="continuous",
                   help="continuous batching (vLLM-like, default) or static batches")
    s.add_argument("--max-num-seqs", type=positive, default=256,
                   help="sequences in an iteration at most (default 256)")
    s.add_argument("--max-num-batched-tokens", type=positive, default=2048,
                   help="tokens an iteration computes at most; longer prompts are "
                        "prefilled in chunks, each also attending to the part of its "
                        "prompt already cached (default 2048)")
    s.add_argument("--block-size", type=positive, default=16,
                   help="tokens per KV-cache block (default 16)")
    s.add_argument("--kv-blocks", type=positive, default=None,
                   help="KV-cache blocks (default: what memory leaves after weights and "
                        "activations)")
    s.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                   help="share of a chip's DRAM for weights, activations and KV cache "
                        "(default 0.9)")
    o = p.add_argument_group("SLOs and capacity")
    o.add_argument("--slo-ttft", type=float, default=None, metavar="MS",
                   help="time-to-first-token target")
    o.add_argument("--slo-tpot", type=float, default=None, metavar="MS",
                   help="time-per-output-token target")
    o.add_argument("--slo-percentile", type=float, default=90.0,
                   help="percentile at which the SLOs must hold (default 90)")
    o.add_argument("--find-max-rate", action="store_true",
                   help="bisect the synthetic --rate for the highest rate meeting the SLOs "
                        "at --slo-percentile (each probe a full simulation) while the "
                        "server completes requests as fast as they come; says no "
                        "rate meets them when each request alone misses them")
    o.add_argument("--cheapest", action="store_true",
                   help="find the cheapest hardware meeting the SLOs on this workload: "
                        "every --search-configs preset at every --search-chips count "
                        "(tensor-parallel), tried from the cheapest by --cost")
    o.add_argument("--search-configs", type=_names, default=None, metavar="A,B,...",
                   help="presets or YAML files for --cheapest (default: --config)")
    o.add_argument("--search-chips", type=_counts, default=(1, 2, 4, 8), metavar="N,N,...",
                   help="chip counts for --cheapest (default 1,2,4,8)")
    o.add_argument("--cost", choices=("chips", "area", "tdp"), default="chips",
                   help="what --cheapest minimizes: chips, silicon area (mm2) or power "
                        "budget (TDP W), times the chip count (default chips)")
    out = p.add_argument_group("output")
    out.add_argument("--json", metavar="FILE", type=output_file,
                     help="also write results and per-request records as JSON")
    out.add_argument("--perfetto", metavar="FILE", type=output_file,
                     help="also write a Perfetto trace of the iterations")
    out.add_argument("--figures", metavar="DIR",
                     help="also write latency CDFs and over-time figures (PNG) to DIR")
    p.set_defaults(handler=run)
    return p


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected presets as A,B,..., got {text!r}")
    return names


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(n) for n in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected chip counts as N,N,... (each >= 1), "
                                         f"got {text!r}")
    return counts


def _cheapest(args: argparse.Namespace, options: Any, slo: Any, workload: Any) -> int:
    from archsim.cli.commands import resolve_config
    from reports.serve import cheapest_json, cheapest_table
    from serving.capacity import COSTS, cheapest
    from serving.workload import read_trace

    configs = [resolve_config(name, args.overrides)
               for name in (args.search_configs or (args.config,))]
    arrivals = read_trace(args.trace) if args.trace else workload(args.rate)
    found, tried = cheapest(args.model, configs, args.search_chips, arrivals, slo, options,
                            args.cost)
    unit = COSTS[args.cost][0]
    print(cheapest_table(found, tried, args.cost, unit, slo))
    if args.json:
        Path(args.json).write_text(json.dumps(cheapest_json(found, tried, args.cost, unit),
                                              indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0 if found else 1


SYNTHETIC = {"rate": 1.0, "requests": 100, "prompt_tokens": "sharegpt",
             "output_tokens": "sharegpt", "seed": 0}
"""The synthetic workload's options and their defaults (``--help`` says them)."""


def _synthetic_defaults(args: argparse.Namespace) -> None:
    """Fill in the synthetic options' defaults, refusing any given with ``--trace``
    (which would be ignored: the trace gives the requests)."""
    from archsim.errors import ModelConfigError

    given = [name for name in SYNTHETIC if getattr(args, name) is not None]
    if args.trace and given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ModelConfigError(f"{flags} shape{'s' if len(given) == 1 else ''} synthetic "
                               f"arrivals; --trace {args.trace} gives the requests (use one "
                               f"or the other)")
    for name, default in SYNTHETIC.items():
        if getattr(args, name) is None:
            setattr(args, name, default)


def run(args: argparse.Namespace) -> int:
    from archsim.cli.commands import output_dir, resolve_config
    from archsim.cli.llm import parallelism, weight_format_text
    from archsim.errors import ModelConfigError
    from reports.serve import (max_rate_line, serve_table, write_serve_json,
                               write_serve_trace)
    from serving.metrics import Slo
    from serving.traffic import ServeOptions, Server, find_max_rate
    from serving.workload import read_trace, synthetic

    _synthetic_defaults(args)
    if args.figures:
        output_dir(args.figures, "--figures")  # refused now, not after the simulation
    config = resolve_config(args.config, args.overrides)
    args.batch, args.micro_batches = 1, 1  # what parallelism() reads
    options = ServeOptions(args.max_num_seqs, args.max_num_batched_tokens, args.block_size,
                           args.kv_blocks, args.gpu_memory_utilization, args.scheduler,
                           args.dtype, args.kv_dtype or args.dtype, args.collectives,
                           weight_format_text(args))
    slo = Slo(args.slo_ttft, args.slo_tpot, args.slo_percentile)  # checks its targets
    server = Server.build(args.model, config, parallelism(args), options)

    def workload(rate: float) -> Any:
        return synthetic(rate, args.requests, args.prompt_tokens, args.output_tokens,
                         args.seed)

    if args.cheapest:
        return _cheapest(args, options, slo, workload)
    search, probes, max_rate = None, None, None
    if args.find_max_rate:
        if args.trace:
            raise ModelConfigError("--find-max-rate varies the synthetic --rate; it does "
                                   "not take --trace")
        search = find_max_rate(server, workload, slo, start=args.rate)
        probes, max_rate = list(search.probes), search.rate
        met = [p for p in probes if p.sustained and p.rate <= (max_rate or 0.0)]
        result = max(met, key=lambda p: p.rate).result if met else probes[-1].result
    else:
        arrivals = read_trace(args.trace) if args.trace else workload(args.rate)
        result = server.run(arrivals, slo)
    print(serve_table(result, probes))
    if search is not None:
        print("\n" + max_rate_line(search, slo.percentile))
    if args.json:
        write_serve_json(result, args.json, probes, max_rate, search)
        print(f"wrote {args.json}", file=sys.stderr)
    if args.perfetto:
        write_serve_trace(result, args.perfetto)
        print(f"wrote {args.perfetto}", file=sys.stderr)
    if args.figures:
        from reports.serve_figures import save_serve_figures

        for path in save_serve_figures(result, args.figures):
            print(f"wrote {path}", file=sys.stderr)
    return 0
