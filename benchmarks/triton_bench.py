"""Triton kernels: trace-and-lower time (per kernel and per program instance) and the
examples' simulated latency and utilization on two presets.

    python benchmarks/triton_bench.py [--presets atom tpu-v3]

Tensors are meta tensors (shape-only traces): the figures are the cost of getting a
kernel's timing, not of computing its numbers.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "triton"))

import flash_attention  # noqa: E402
import matmul  # noqa: E402
import rmsnorm  # noqa: E402
import softmax  # noqa: E402
import vector_add  # noqa: E402
from archsim.config import load_config  # noqa: E402
from compiler.triton import clear_cache, lower, trace_launch  # noqa: E402


def _meta(*shape: int, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def cases() -> list[tuple[str, object, tuple, dict, tuple]]:
    n, rows, cols, s, k = 1 << 20, 1024, 1024, 512, 512
    return [
        ("vector add 1M f16", vector_add.add_kernel, (_meta(n), _meta(n), _meta(n), n),
         {"BLOCK": 4096}, (n // 4096,)),
        ("softmax 1024x1024 f16", softmax.softmax_kernel,
         (_meta(rows, cols), _meta(rows, cols), cols, cols, cols), {"BLOCK": cols}, (rows,)),
        ("rmsnorm+residual 1024x1024", rmsnorm.rmsnorm_residual_kernel,
         (_meta(rows, cols), _meta(rows, cols), _meta(cols), _meta(rows, cols), cols, 1e-6),
         {"BLOCK": cols, "ROWS": 8}, (rows // 8,)),
        ("matmul 512^3 f16 (128^3 blocks)", matmul.matmul_kernel,
         (_meta(k, k), _meta(k, k), _meta(k, k), k, k, k),
         {"BM": 128, "BN": 128, "BK": 128}, (k // 128, k // 128)),
        ("causal attention 8x512x64 f16", flash_attention.flash_attention_naive_prefill_kernel,
         (_meta(1, 8, s, 64), _meta(1, 8, s, 64), _meta(1, 8, s, 64), _meta(1, 8, s, 64),
          0.125, s), {"BM": 64, "BN": 64, "D": 64}, (s // 64, 8)),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["atom", "tpu-v3"])
    args = parser.parse_args(argv)
    print("| kernel | programs | trace s | lower s (first preset) | ms / program | " +
          " | ".join(f"{p} cycles | {p} matrix | {p} DRAM GB/s" for p in args.presets) + " |")
    print("|---" * (5 + 3 * len(args.presets)) + "|")
    for name, kernel, kargs, kwargs, grid in cases():
        clear_cache()
        start = time.perf_counter()
        traced = trace_launch(kernel, kargs, kwargs, grid)
        traced_s = time.perf_counter() - start
        programs = len(traced.programs)
        cells, lowered = [], []
        for preset in args.presets:
            start = time.perf_counter()
            program = lower(traced, load_config(preset), traced.name)
            lowered.append(time.perf_counter() - start)
            result = program.simulate(verify=False)
            cells += [f"{result.total_cycles:,}", f"{result.matrix_utilization:.1%}",
                      f"{result.dram_bytes / result.seconds / 1e9:,.0f}"]
        lowered_s = lowered[0]
        per_program = (traced_s + lowered_s) / programs * 1e3
        print(f"| {name} | {programs} | {traced_s:.2f} | {lowered_s:.2f} | "
              f"{per_program:.2f} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
