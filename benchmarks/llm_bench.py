"""LLM serving (``archsim llm``): TTFT, TPOT and tokens/s of Llama-2 7B and 70B on
tpu-v4 at several batch sizes and chip counts, next to the rooflines, with the wall
time each run takes.

Run: ``python benchmarks/llm_bench.py`` (about 2 minutes on 2 cores); ``--quick``
runs the two cases the issue sets speed targets for (7B on 1 and 4 chips, 70B on 8).
Prints a markdown table; figures go into BENCHMARKS.md by hand.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

from archsim.config import load_config
from serving.plan import Parallelism, Request
from serving.run import serve

CASES: list[tuple[str, int, int, int, int]] = [
    # model, batch, tp, pp, micro-batches
    ("llama-2-7b", 1, 1, 1, 1),
    ("llama-2-7b", 8, 1, 1, 1),
    ("llama-2-7b", 1, 4, 1, 1),
    ("llama-2-7b", 8, 4, 1, 1),
    ("llama-2-7b", 32, 4, 1, 1),
    ("llama-2-7b", 8, 1, 4, 4),
    ("llama-2-70b", 1, 8, 1, 1),
    ("llama-2-70b", 8, 8, 1, 1),
    ("llama-2-70b", 8, 4, 2, 2),
]
QUICK = [CASES[0], CASES[2], CASES[6]]


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="tpu-v4")
    parser.add_argument("--prefill", type=int, default=2048)
    parser.add_argument("--decode", type=int, default=16)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    print(f"{args.config}, prefill {args.prefill}, decode {args.decode}, bf16\n")
    print("| model | batch | chips (tp x pp, micro-batches) | TTFT ms (roofline) | "
          "TPOT ms (roofline) | tokens/s | memory/chip GiB | collectives | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    results = {}
    for model, batch, tp, pp, mb in QUICK if args.quick else CASES:
        start = time.perf_counter()
        result = serve(model, config, Request(batch, args.prefill, args.decode),
                       Parallelism(tp, pp, mb))
        wall = time.perf_counter() - start
        results[model, batch, tp, pp] = result
        roof = result.roofline
        print(f"| {model} | {batch} | {tp * pp} ({tp}x{pp}, {mb}) | "
              f"{result.ttft_s * 1e3:.1f} ({roof.prefill_s * 1e3:.1f}) | "
              f"{result.tpot_s * 1e3:.2f} ({roof.tpot_s * 1e3:.2f}) | "
              f"{result.tokens_per_s:.0f} | {result.memory.total / 2**30:.1f} | "
              f"{result.utilization()['collectives']:.0%} | {wall:.1f} |", flush=True)
    print()
    criteria(results)
    return 0


def criteria(results: dict) -> None:
    """The issue's acceptance checks, where their cases ran."""
    one, four = results.get(("llama-2-7b", 1, 1, 1)), results.get(("llama-2-7b", 1, 4, 1))
    checks = [("never below a roofline", all(
        r.ttft_s >= r.roofline.prefill_s and r.tpot_s >= r.roofline.tpot_s
        for r in results.values()))]
    if one is not None:
        ttft, tpot = one.ttft_s / one.roofline.prefill_s, one.tpot_s / one.roofline.tpot_s
        checks += [(f"7B 1 chip: TTFT within 1.35x of the FLOP roofline ({ttft:.2f}x)",
                    ttft <= 1.35),
                   (f"7B 1 chip: TPOT within 1.35x of the bandwidth roofline ({tpot:.2f}x)",
                    tpot <= 1.35)]
    if one is not None and four is not None:
        share = four.tpot_s / one.tpot_s
        checks.append((f"7B --tp 4: TPOT below 0.4x of one chip's ({share:.2f}x)", share < 0.4))
    for text, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")


if __name__ == "__main__":
    sys.exit(main())
