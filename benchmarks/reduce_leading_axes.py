"""Reductions over leading axes with a small kept innermost dim, performance-only:
``python benchmarks/reduce_leading_axes.py [--configs atom,tpu-v4]``.

wav2vec2's positional convolution has ``weight_norm(dim=2)``: ``vector_norm(v, 2,
dim=(0, 1), keepdim=True)`` of ``v`` [768, 48, 128]. Cases: that norm alone (``norm``),
the whole weight norm ``v * (g / norm)`` (``weight-norm``, the scaling needs the
whole space after the reduction) and a ``mean`` over the same axes, in bf16 and f32.
Prints cycles, the kernel's DRAM bytes over the compulsory ones (input read once,
results written once) and the mapping the compiler chose (``CompiledProgram.choices``).
"""

from __future__ import annotations

import argparse

import torch

from archsim.app.pipeline import run
from archsim.app.workload import Workload
from reports.data import report_data
from reports.ops import op_rows

SHAPE = (768, 48, 128)


class Norm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.v = torch.nn.Parameter(torch.randn(SHAPE))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.linalg.vector_norm(self.v, 2, dim=(0, 1), keepdim=True).sum()


class WeightNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.v = torch.nn.Parameter(torch.randn(SHAPE))
        self.g = torch.nn.Parameter(torch.randn(1, 1, SHAPE[2]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm = torch.linalg.vector_norm(self.v, 2, dim=(0, 1), keepdim=True)
        return self.v * (self.g / norm) + x.sum()


class Mean(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.v = torch.nn.Parameter(torch.randn(SHAPE))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.v.mean((0, 1)).sum()


CASES = {"norm": Norm, "weight-norm": WeightNorm, "mean": Mean}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="atom,tpu-v4")
    args = parser.parse_args()
    print(f"{'config':8} {'case':12} {'dtype':5} {'cycles':>9} {'DRAM/min':>8}  choice")
    for config in args.configs.split(","):
        for name, cls in CASES.items():
            for dtype in ("bf16", "f32"):
                torch.manual_seed(0)
                workload = Workload.of_module(cls().eval(), torch.randn(4), name=name,
                                              dtype=dtype)
                result = run(workload, config, mode="performance")
                rows = op_rows(report_data(result))
                row = max(rows, key=lambda r: r.dram_bytes)
                ratio = row.dram_bytes / row.compulsory_bytes if row.compulsory_bytes else 0.0
                choice = result.choices.get(row.source, "as planned before")
                print(f"{config:8} {name:12} {dtype:5} {result.total_cycles:>9,} "
                      f"{ratio:>7.2f}x  {choice}")


if __name__ == "__main__":
    main()
