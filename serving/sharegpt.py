"""Convert a ShareGPT-style JSON (a list of conversations, each
``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...},
...]}``) into an ``archsim serve`` trace: one request per conversation, its first human
turn the prompt and the reply after it the output, as vLLM's serving benchmark samples
ShareGPT. There is no tokenizer: tokens are estimated as ceil(characters / 4), the
usual rule of thumb for English text with BPE tokenizers (an estimate; pass
``--chars-per-token`` for another). Arrivals are Poisson at ``--rate`` (requests per
second, > 0, as ``archsim serve --rate``; without it all at once).

Run: ``python -m serving.sharegpt sharegpt.json trace.csv --rate 2 --seed 0
[--max-requests N]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from serving.workload import Arrival, WorkloadError, write_trace


def convert(data: object, rate: float | None = None, seed: int = 0,
            chars_per_token: float = 4.0, max_requests: int | None = None) -> list[Arrival]:
    """The requests of a ShareGPT-style list (conversations without a human turn
    followed by a reply are skipped), Poisson at ``rate`` per second or, with None, all
    at time 0."""
    if rate is not None and not rate > 0:  # archsim serve --rate's refusal
        raise WorkloadError(f"--rate must be > 0 requests per second, got {rate}")
    if not isinstance(data, list):
        raise WorkloadError("ShareGPT JSON: expected a list of conversations")
    pairs: list[tuple[int, int]] = []
    for i, item in enumerate(data):
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            raise WorkloadError(f"ShareGPT JSON: item {i} has no 'conversations' list")
        for a, b in zip(turns, turns[1:]):
            if a.get("from") == "human" and b.get("from") in ("gpt", "chatgpt", "assistant"):
                pairs.append((max(1, math.ceil(len(a.get("value", "")) / chars_per_token)),
                              max(1, math.ceil(len(b.get("value", "")) / chars_per_token))))
                break
        if max_requests is not None and len(pairs) >= max_requests:
            break
    rng = np.random.default_rng(seed)
    times = (np.cumsum(np.r_[0.0, rng.exponential(1.0 / rate, len(pairs) - 1)])
             if rate is not None and pairs else np.zeros(len(pairs)))
    return [Arrival(i, float(t), p, o) for i, (t, (p, o)) in enumerate(zip(times, pairs))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="ShareGPT-style JSON file")
    parser.add_argument("out", help="trace CSV to write")
    parser.add_argument("--rate", type=float, default=None,
                        help="Poisson arrivals per second, > 0 (default: all at time 0)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chars-per-token", type=float, default=4.0)
    parser.add_argument("--max-requests", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        data = json.loads(Path(args.source).read_text())
        arrivals = convert(data, args.rate, args.seed, args.chars_per_token,
                           args.max_requests)
    except (OSError, json.JSONDecodeError, WorkloadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_trace(arrivals, args.out)
    print(f"wrote {len(arrivals)} requests to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["convert", "main"]
