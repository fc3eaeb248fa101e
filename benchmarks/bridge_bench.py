"""Torch bridge speed: eager per-op overhead on small tensors (compiled programs cached)
and a 2-layer transformers GPT-2 forward, eager vs ``torch.compile(backend="archsim")``.

Run: ``python benchmarks/bridge_bench.py`` (needs ``transformers`` for the GPT-2 rows).
Prints a markdown table: wall time on this machine and simulated NPU time (preset
``atom``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import torch

import torch_bridge
from torch_bridge import eager, runtime

REPEATS = 200


def per_call_us(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    """Mean wall time of ``fn()`` in microseconds, after one warm-up call (which
    compiles and verifies the program)."""
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e6


def eager_rows() -> list[tuple[str, str, str]]:
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    an, bn = a.npu(), b.npu()
    rows = []
    for name, cpu_fn, npu_fn in [
        ("x + y (4x4)", lambda: a + b, lambda: an + bn),
        ("x @ y (4x4)", lambda: a @ b, lambda: an @ bn),
        ("softmax (4x4)", lambda: a.softmax(-1), lambda: an.softmax(-1)),
    ]:
        cpu_us = per_call_us(cpu_fn)
        npu_us = per_call_us(npu_fn)
        with eager.on_host():
            host_us = per_call_us(npu_fn)
        rows.append((f"eager {name}", f"{npu_us:,.0f} us/op compiled+simulated; "
                     f"{host_us:,.0f} us/op host fallback; {cpu_us:,.1f} us/op CPU", ""))
    # issue 14's figure: a cached 64x64 add against the same add on CPU, same process
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    an, bn = a.npu(), b.npu()
    cpu_us = per_call_us(lambda: a + b, REPEATS * 20)
    npu_us = per_call_us(lambda: an + bn, REPEATS * 2)
    rows.append(("eager x + y (64x64), cached (replayed timing)",
                 f"{npu_us:,.0f} us/op; CPU {cpu_us:,.1f} us/op; ratio {npu_us / cpu_us:,.0f}x",
                 ""))
    return rows


def gpt2_rows() -> list[tuple[str, str, str]]:
    try:
        from transformers import GPT2Config, GPT2Model
    except ImportError:
        return [("GPT-2 (transformers)", "skipped: transformers not installed", "")]
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=768, n_head=12, n_positions=128, vocab_size=1024,
                        use_cache=False)
    model = GPT2Model(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, 64))
    rows = []
    with torch.no_grad():
        start = time.perf_counter()
        model(ids)
        rows.append(("GPT-2 2 layers, 768 hidden, 1x64 tokens: CPU",
                     f"{(time.perf_counter() - start) * 1e3:,.1f} ms", "-"))
        npu_model = copy.deepcopy(model).npu()
        npu_ids = ids.npu()
        npu_model(npu_ids)  # compile every op once
        rows.append(_timed("eager on npu (ops cached)", lambda: npu_model(npu_ids)))
        compiled = torch.compile(npu_model, backend="archsim")
        start = time.perf_counter()
        compiled(npu_ids)
        first = time.perf_counter() - start
        rows.append(("torch.compile first call (trace + compile + run)",
                     f"{first * 1e3:,.0f} ms", "-"))
        rows.append(_timed("torch.compile on npu", lambda: compiled(npu_ids)))
    return rows


def _timed(label: str, fn: Callable[[], object]) -> tuple[str, str, str]:
    with torch_bridge.profile() as prof:
        start = time.perf_counter()
        fn()
        wall = time.perf_counter() - start
    session = prof.result
    simulated = (f"{session.seconds * 1e6:,.1f} us (device {session.device_cycles:,} "
                 f"cycles, host {session.cycles('host'):,}, transfer "
                 f"{session.transfer_cycles:,})")
    return label, f"{wall * 1e3:,.0f} ms", simulated


def main() -> None:
    runtime.set_config("atom")
    rows = eager_rows() + gpt2_rows()
    print("| case | wall time (this machine) | simulated NPU time (atom) |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
