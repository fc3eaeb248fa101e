"""Quantization per preset and dtype (issue 30): GEMM efficiency against each dtype's
peak, and Llama-2 TTFT/TPOT for every weight format ``archsim llm --weights`` takes.

    python benchmarks/quant_bench.py              # every table (a few minutes on 2 cores)
    python benchmarks/quant_bench.py --gemm-only  # the GEMM table only (under a minute)

- GEMM: ``archsim run gemm --seq N --dtype D --perf-only`` on each preset, for the
  native 16-bit dtype and int8 (``torch._int_mm``), efficiency against
  ``NpuConfig.peak_ops`` of the dtype (a preset without an int8 mode widens it: 1x).
- LLM: ``archsim llm MODEL --config P --weights W``, prefill 128, decode 16, batch 1:
  Llama-2-7B on one chip, Llama-2-70B on 8 (tensor parallel); TPOT next to the
  packed-bytes bandwidth roofline and as a share of bf16's.

Prints markdown tables; the figures go into BENCHMARKS.md by hand, with the machine and
date.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

from archsim.app.pipeline import run
from archsim.app.workload import Workload
from archsim.config import load_config
from archsim.errors import DeviceMemoryError
from serving.plan import WEIGHT_BYTES, Parallelism, Request
from serving.run import serve

PRESETS = ("atom", "tpu-v3", "tpu-v4", "ascend-910b", "ascend-910b4")
"""The shipped presets of real parts (edge and tiny are teaching sizes)."""
LLM_CASES = (("llama-2-7b", 1), ("llama-2-70b", 8))  # model, chips (tensor parallel)


def gemm_table(size: int) -> None:
    print(f"GEMM {size}^3, performance-only\n")
    print("| preset | dtype | cycles | TFLOP/s or TOPS | peak of the dtype | efficiency | "
          "DRAM MiB | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for preset in PRESETS:
        config = load_config(preset)
        for dtype in (config.core.matrix.input_dtype, "i8"):
            start = time.perf_counter()
            result = run(Workload.parse("gemm", seq=size, dtype=dtype), config,
                         mode="performance")
            rate = 2 * size ** 3 / result.seconds
            peak = result.matrix_peak_flops
            print(f"| {preset} | {dtype} | {result.total_cycles:,} | {rate / 1e12:.1f} | "
                  f"{peak / 1e12:.1f} | {rate / peak:.1%} | {result.dram_bytes / 2**20:,.0f} | "
                  f"{time.perf_counter() - start:.1f} |", flush=True)
    print()


def llm_table(presets: tuple[str, ...]) -> None:
    formats = ("", *WEIGHT_BYTES)  # "" = the activations' dtype (bf16)
    print("Llama-2, prefill 128, decode 16, batch 1, bf16 activations and KV cache\n")
    print("| preset | model (chips) | weights | TTFT ms | TPOT ms | TPOT roofline ms | "
          "TPOT / roofline | TPOT / bf16 | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for preset in presets:
        config = load_config(preset)
        for model, chips in LLM_CASES:
            bf16_tpot = None
            for weights in formats:
                start = time.perf_counter()
                row = f"| {preset} | {model} ({chips}) | {weights or 'bf16'} | "
                try:
                    result = serve(model, config, Request(1, 128, 16, weights=weights),
                                   Parallelism(chips, 1, 1))
                except DeviceMemoryError as error:  # e.g. 70B in bf16 on 8 x 16 GiB
                    print(row + f"does not fit: {str(error).split(':')[0]} | | | | | |")
                    continue
                tpot, roof = result.tpot_s, result.roofline.tpot_s
                if not weights:
                    bf16_tpot = tpot
                share = f"{tpot / bf16_tpot:.2f}x" if bf16_tpot else "-"
                print(row + f"{result.ttft_s * 1e3:.2f} | {tpot * 1e3:.2f} | "
                      f"{roof * 1e3:.2f} | {tpot / roof:.2f}x | {share} | "
                      f"{time.perf_counter() - start:.1f} |", flush=True)
    print()


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096, help="GEMM size (default 4096)")
    parser.add_argument("--gemm-only", action="store_true")
    parser.add_argument("--presets", default=",".join(PRESETS),
                        help="presets of the LLM table (default: every preset of a real "
                             "part; atom's 16 GiB holds Llama-2-7B in bf16 only barely)")
    args = parser.parse_args(argv)
    gemm_table(args.size)
    if not args.gemm_only:
        llm_table(tuple(args.presets.split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
