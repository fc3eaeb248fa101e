"""Swin-like window attention, performance-only: ``python benchmarks/window_attention.py
[--configs tpu-v4,atom,ascend-910b]``.

``softmax(q @ k^T * d^-0.5 [+ bias]) @ v`` over 64 windows x 3 heads of 49 tokens,
head dim 32, as q, k, v [192, 49, 32] (3d), [64, 3, 49, 32] (4d) and the 4-D form
plus a [3, 49, 49] position bias shared by the windows (4d-bias), in bf16 and f32.
Prints cycles, the DMA loads the program issues and their median size: the kernel's
items are small, so their count of DMA commands is what bounds them where each
command's latency outweighs its matmuls (:mod:`compiler.kernels.attention_items`).
"""

from __future__ import annotations

import argparse
import math
import statistics

import torch

import compiler
from archsim.config import load_config
from compiler.compile import clear_cache
from compiler.ir.ops import Load


class Plain(torch.nn.Module):
    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) * 32 ** -0.5, -1) @ v


class Biased(torch.nn.Module):
    def forward(self, q, k, v, bias):
        return torch.softmax(q @ k.transpose(-1, -2) * 32 ** -0.5 + bias, -1) @ v


def case(form: str, dtype: torch.dtype) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    shape = (192, 49, 32) if form == "3d" else (64, 3, 49, 32)
    args = tuple(torch.randn(shape, dtype=dtype) for _ in range(3))
    if form == "4d-bias":
        return Biased(), args + (torch.randn(3, 49, 49, dtype=dtype),)
    return Plain(), args


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="tpu-v4,atom,ascend-910b")
    args = parser.parse_args()
    print(f"{'config':12s} {'dtype':9s} {'form':8s} {'cycles':>9s} {'loads':>6s} "
          f"{'median B':>9s}")
    for preset in args.configs.split(","):
        config = load_config(preset)
        for dtype in (torch.bfloat16, torch.float32):
            for form in ("3d", "4d", "4d-bias"):
                module, inputs = case(form, dtype)
                clear_cache()
                exported = torch.export.export(module, inputs).run_decompositions()
                compiled = compiler.compile_graph(exported, config)
                cycles = compiled.simulate().total_cycles
                sizes = [math.prod(c.op.dst.shape) * c.op.dst.dtype.itemsize
                         for c in compiled.program.commands if isinstance(c.op, Load)]
                print(f"{preset:12s} {str(dtype)[6:]:9s} {form:8s} {cycles:>9,} "
                      f"{len(sizes):>6} {statistics.median(sizes):>9.0f}")


if __name__ == "__main__":
    main()
