"""fp8 GEMM efficiency per preset (issue 30): ``torch._scaled_mm`` of two n x n e4m3
matrices (per-tensor scales, bf16 out), compiled and simulated performance-only.

    python benchmarks/fp8_gemm.py [--size 4096] [--presets atom,tpu-v4]

Prints each preset's cycles, FLOP/s, the fp8 peak it is measured against
(``core.matrix.rates.fp8``; no mode: the native peak, inputs widened) and DRAM bytes.
"""

from __future__ import annotations

import argparse
import time

import torch

from archsim.config import load_config
from archsim.simulator import Simulator
from compiler import compile_op
from compiler.ir.dtypes import DType

PRESETS = ("atom", "tpu-v3", "tpu-v4", "ascend-910b", "ascend-910b4")


def measure(preset: str, n: int) -> dict[str, float]:
    config = load_config(preset)
    a = torch.empty(n, n, dtype=torch.float8_e4m3fn, device="meta")
    b = torch.empty(n, n, dtype=torch.float8_e4m3fn, device="meta").t()
    scale = torch.empty((), dtype=torch.float32, device="meta")
    compiled = compile_op(torch.ops.aten._scaled_mm.default, (a, b, scale, scale),
                          {"out_dtype": torch.bfloat16}, config)
    result = Simulator(config).run(compiled.program)
    seconds = result.total_cycles / config.clock_hz
    flops = 2 * n ** 3
    peak = config.peak_ops(DType.e4m3.rate_name)  # "fp8"
    return {"cycles": result.total_cycles, "flops": flops / seconds, "peak": peak,
            "dram": result.dram_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--presets", default=",".join(PRESETS))
    args = parser.parse_args()
    print(f"{'preset':14} {'cycles':>12} {'TFLOP/s':>9} {'fp8 peak':>9} {'eff':>7} "
          f"{'DRAM MiB':>9} {'wall s':>7}")
    for preset in args.presets.split(","):
        start = time.perf_counter()
        m = measure(preset, args.size)
        print(f"{preset:14} {m['cycles']:12,d} {m['flops'] / 1e12:9.1f} "
              f"{m['peak'] / 1e12:9.1f} {m['flops'] / m['peak']:7.1%} "
              f"{m['dram'] / 2**20:9.0f} {time.perf_counter() - start:7.1f}")


if __name__ == "__main__":
    main()
