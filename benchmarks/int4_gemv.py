"""Decode GEMVs (M = 1) in bf16, weight-only int8 and int4 on one preset (issue 30):
cycles, DMA commands (loads) and busy cycles of the arrays and the DMA engines.

    python benchmarks/int4_gemv.py [--config tpu-v4]

Prints a markdown table; the figures go into BENCHMARKS.md by hand, with machine and date.
"""

from __future__ import annotations

import argparse
import warnings

import torch

import archsim
from archsim.config import load_config
from compiler import compile as compile_module
from compiler.ir.ops import Load
from serving.quant import Int4WeightOnlyLinear, Int8WeightOnlyLinear

SHAPES = ((4096, 4096), (4096, 11008), (11008, 4096))  # (K, N): Llama-2-7B's projections


def module(fmt: str, k: int, n: int) -> torch.nn.Module:
    torch.manual_seed(0)
    linear = torch.nn.Linear(k, n, bias=False).to(torch.bfloat16)
    if fmt == "int8":
        return Int8WeightOnlyLinear.of(linear.float(), torch.bfloat16)
    if fmt == "int4":
        return Int4WeightOnlyLinear.of(linear.float(), torch.bfloat16, 128)
    return linear


def row(preset: str, fmt: str, k: int, n: int) -> str:
    config = load_config(preset)
    model = module(fmt, k, n)
    x = torch.randn(1, k, dtype=torch.bfloat16)
    compile_module.clear_cache()
    compiled = compile_module.compile_graph(torch.export.export(model, (x,)), config)
    loads = sum(isinstance(c.op, Load) for c in compiled.program.commands)
    result = archsim.estimate(model, x, config=preset)
    floor = k * n // (config.cores * config.core.matrix.arrays * config.core.matrix.rows)
    arrays = [v for e, v in result.utilization.items() if ".mxu" in e]
    return (f"| {k} -> {n} | {fmt} | {result.total_cycles:,} | {floor:,} | "
            f"{result.total_cycles / floor:.3f}x | {loads:,} | {max(arrays):.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="tpu-v4")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    print(f"{args.config}, M = 1\n")
    print("| GEMV | weights | cycles | intake floor | / floor | loads | busiest array |")
    print("|---|---|---|---|---|---|---|")
    for k, n in SHAPES:
        for fmt in ("bf16", "int8", "int4"):
            print(row(args.config, fmt, k, n), flush=True)


if __name__ == "__main__":
    main()
