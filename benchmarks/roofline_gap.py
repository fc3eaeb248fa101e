"""Where the compiler's mappings stand against the hardware, per layer family:
``python benchmarks/roofline_gap.py [--configs atom,tpu-v4,ascend-910b]``.

Runs a small model zoo performance-only (ResNet-18; one BERT-base layer; Llama-2-7B
blocks as a 2048-token prefill and as a one-token step, i.e. the decode-shaped GEMVs
without a KV cache) on each config, and for every op of the per-op table
(:mod:`reports.ops`) compares its time with its own roofline: the largest of its
matrix FLOPs at the matrix peak, its other FLOPs at the vector peak and its DRAM bytes
at DRAM bandwidth. An op's time is the cycles its busiest engine kind ran its commands
(its coverage; not its span, which for an epilogue fused into a matmul's tiles covers
the whole matmul). Ops are grouped by family (the aten op: ``convolution``, ``mm``,
``_softmax``...); a family's gap is its times' sum over its rooflines' sum. Printed
worst first per config, with the single worst op of each family, so the next weak spot
shows. Ops under 0.5% of their model's run are left out.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from archsim.app.pipeline import run  # noqa: E402
from archsim.app.workload import Workload  # noqa: E402
from reports.data import report_data  # noqa: E402
from reports.ops import op_rows  # noqa: E402

ZOO: list[tuple[str, str, dict[str, int]]] = [
    ("resnet-18", "resnet-18", {}),
    ("bert layer", "bert-base", {"layers": 1}),
    ("llama prefill", "llama-7b", {"seq": 2048, "layers": 4}),
    ("llama 1-token", "llama-7b", {"seq": 1, "layers": 4}),
]
"""(label, built-in workload, sizes): ``archsim workloads`` lists them."""

CONFIGS = ("atom", "tpu-v4", "ascend-910b")
MIN_SHARE = 0.005


@dataclass
class Family:
    time: float = 0.0
    roof: float = 0.0
    ops: int = 0
    models: set[str] = field(default_factory=set)
    worst: tuple[float, str] = (0.0, "")


def family_of(source: str) -> str:
    """``layers.0.up:mm_5`` -> ``mm``; a source without an aten op stays itself."""
    op = source.rsplit(":", 1)[-1]
    return re.sub(r"_\d+$", "", op)


def gaps(config: str) -> dict[str, Family]:
    families: dict[str, Family] = {}
    for label, name, sizes in ZOO:
        result = run(Workload.builtin(name, **sizes), config, mode="performance")
        data = report_data(result)
        total = data.total_cycles
        clock = data.clock_hz
        for row in op_rows(data):
            busy = max(row.coverage_cycles.values(), default=0)
            if busy < MIN_SHARE * total:
                continue
            roof_s = max(row.matmul_flops / data.peak_flops,
                         (row.flops - row.matmul_flops) / data.vector_peak_flops,
                         row.dram_bytes / data.dram_bandwidth_bytes_per_s)
            roof = roof_s * clock
            if roof <= 0:
                continue
            fam = families.setdefault(family_of(row.source), Family())
            fam.time += busy
            fam.roof += roof
            fam.ops += 1
            fam.models.add(label)
            fam.worst = max(fam.worst, (busy / roof, f"{label}: {row.source}"))
    return families


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    args = parser.parse_args()
    start = time.time()
    for config in args.configs.split(","):
        families = gaps(config)
        print(f"\n{config}: time over roofline per layer family, worst first\n")
        print("| family | ops | time / roofline | worst op (its gap) | models |")
        print("|---|---:|---:|---|---|")
        for name, fam in sorted(families.items(), key=lambda kv: -kv[1].time / kv[1].roof):
            print(f"| {name} | {fam.ops} | {fam.time / fam.roof:.2f}x | {fam.worst[1]} "
                  f"({fam.worst[0]:.2f}x) | {', '.join(sorted(fam.models))} |")
    print(f"\n{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
