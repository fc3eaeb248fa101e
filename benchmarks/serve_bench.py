"""Request-level serving (``archsim serve``): wall time of 1,000 and 10,000 requests of
the ShareGPT-like mix on Llama-2-7B (one chip), the iteration-time grid's error
against direct simulation at off-grid shapes, and the highest request rate meeting a
TTFT/TPOT SLO on several presets and chip counts.

Run: ``python benchmarks/serve_bench.py`` (``--quick``: the 1,000-request run and the
interpolation check only; ``--chunks``: prefill chunks' attention over their cache on
Llama-3-8B, its grid against direct simulation, and two prompts in one iteration
against a batch of two). Prints markdown tables; figures go into BENCHMARKS.md by
hand with the machine and the date.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

from archsim.config import load_config
from serving.metrics import Slo
from serving.plan import Parallelism
from serving.traffic import Server, find_max_rate
from serving.workload import synthetic

CAPACITY = [
    # model, config, tp
    ("llama-2-7b", "tpu-v4", 1),
    ("llama-2-7b", "tpu-v4", 2),
    ("llama-2-7b", "ascend-910b", 1),
    ("llama-2-7b", "ascend-910b", 2),
    ("llama-2-70b", "tpu-v4", 8),
    ("llama-2-70b", "ascend-910b", 8),
]
SLO = Slo(ttft_ms=500.0, tpot_ms=50.0, percentile=90.0)
OFF_GRID = [(80, 0, 0.0), (200, 0, 0.0), (700, 0, 0.0), (1200, 0, 0.0), (1800, 0, 0.0),
            (0, 3, 300.0), (0, 12, 700.0), (0, 48, 200.0), (0, 24, 1500.0),
            (300, 20, 500.0)]


def speed(requests: int, rate: float) -> None:
    start = time.perf_counter()
    server = Server.build("llama-2-7b", load_config("tpu-v4"))
    result = server.run(synthetic(rate, requests, "sharegpt", "sharegpt", 0))
    wall = time.perf_counter() - start
    s = result.summary
    print(f"| {requests} | {rate:g} | {wall:.1f} | {result.simulated} | "
          f"{len(result.engine.iterations)} | {s.throughput_tokens_per_s:.0f} | "
          f"{s.latency_s['ttft']['p90'] * 1e3:.0f} | {s.latency_s['tpot']['p90'] * 1e3:.1f} |",
          flush=True)


def interpolation() -> None:
    server = Server.build("llama-2-7b", load_config("tpu-v4"))
    timer = server.timing
    print("\n| prefill tokens | decode seqs | mean context | grid (ms) | direct (ms) | error |")
    print("|---:|---:|---:|---:|---:|---:|")
    for prefill, seqs, context in OFF_GRID:
        grid, direct = timer(prefill, seqs, context), timer.direct_s(prefill, seqs, context)
        print(f"| {prefill} | {seqs} | {context:g} | {grid * 1e3:.2f} | {direct * 1e3:.2f} | "
              f"{(grid / direct - 1) * 100:+.2f}% |", flush=True)


CHUNKS = [(512, 600), (512, 2500), (512, 6000), (384, 3000), (200, 5000), (2048, 3000),
          (1500, 7000)]
"""(new tokens, cached tokens) of prefill chunks off the grid."""


def chunks() -> None:
    server = Server.build("llama-3-8b", load_config("tpu-v4"))  # 2,048 tokens an iteration
    timer = server.timing
    print("\n| new tokens | cached | grid (ms) | direct (ms) | error | one pass of the new "
          "tokens (ms) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for new, cached in CHUNKS:
        grid, direct = timer.chunk_attention_s(new, cached), timer.chunk_direct_s(new, cached)
        print(f"| {new} | {cached} | {grid * 1e3:.2f} | {direct * 1e3:.2f} | "
              f"{(grid / direct - 1) * 100:+.2f}% | {timer.prefill_s(new) * 1e3:.2f} |",
              flush=True)
    print("\n| prompts in one iteration | as one sequence (ms) | chunks apart (ms) | "
          "a batch of them, simulated (ms) |")
    print("|---|---:|---:|---:|")
    for n, tokens in ((2, 512), (2, 1024), (4, 512)):
        one = timer.prefill_s(n * tokens)
        apart = timer(n * tokens, 0, 0.0, ((tokens, 0),) * n)
        print(f"| {n} x {tokens} | {one * 1e3:.2f} | {apart * 1e3:.2f} | "
              f"{timer.pass_s(n, tokens, 0) * 1e3:.2f} |", flush=True)


def capacity(requests: int) -> None:
    print(f"\nSLO: TTFT <= {SLO.ttft_ms:g} ms and TPOT <= {SLO.tpot_ms:g} ms at "
          f"p{SLO.percentile:g}; {requests} ShareGPT-like requests a probe\n")
    print("| model | config | chips | max rate (req/s) | probes | wall (s) |")
    print("|---|---|---:|---:|---:|---:|")
    for model, config, tp in CAPACITY:
        start = time.perf_counter()
        server = Server.build(model, load_config(config), Parallelism(tp=tp))
        found = find_max_rate(
            server, lambda r: synthetic(r, requests, "sharegpt", "sharegpt", 0), SLO)
        rate = "not determined" if found.rate is None else f"{found.rate:.2f}"
        print(f"| {model} | {config} | {tp} | {rate} | {len(found.probes)} | "
              f"{time.perf_counter() - start:.0f} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--chunks", action="store_true",
                        help="only the prefill chunks' attention figures")
    parser.add_argument("--requests", type=int, default=300,
                        help="requests per capacity probe (default 300)")
    args = parser.parse_args(argv)
    if args.chunks:
        chunks()
        return 0
    print("| requests | rate (req/s) | wall (s) | shapes simulated | iterations | "
          "tokens/s | TTFT p90 (ms) | TPOT p90 (ms) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    speed(1000, 2.0)
    if not args.quick:
        speed(10_000, 2.0)
    interpolation()
    if not args.quick:
        capacity(args.requests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
