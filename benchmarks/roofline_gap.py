"""Where the compiler's mappings stand against the hardware, per layer family:
``python benchmarks/roofline_gap.py [--configs atom,tpu-v4,ascend-910b]``.

Runs a small model zoo performance-only (ResNet-18 and ResNet-50; MobileNetV2 and one
ViT-B/16 layer from transformers' default configs; one BERT-base layer; Llama-2-7B
blocks as a 2048-token prefill and as a one-token step, i.e. the decode-shaped GEMVs
without a KV cache), each in the config's native dtype, on each config, and for every op
of the per-op table (:mod:`reports.ops`) compares its time with its roofline
(:mod:`reports.roofline_gap`): the largest of its matrix FLOPs at the matrix peak (plus
the vector units' multiply-adds), its other FLOPs at the vector peak, and its *compulsory* bytes (each element of each tensor
it reads read once, each it writes written once, at its stored size:
:mod:`reports.compulsory`, the op table's DRAM/min) at DRAM bandwidth, except that an
intermediate tensor the chip's shared SRAM could hold counts at the shared SRAM port's
bandwidth instead. That is the least time any schedule of the op could take: keeping a
hand-off on chip is one schedule, so its bytes cannot count at DRAM speed in a lower
bound; yet whether the compiler does keep it on chip does not move the bound (the bytes
come from each model compiled a second time without :mod:`compiler.residency`), so an
op's gap drops exactly when it gets faster, and a hand-off left in DRAM that could have
stayed on chip shows as a gap. Each intermediate is judged by itself (it fits in the
whole shared SRAM), the loosest reading, so the bound holds even where an op's tensors
could not all be on chip at once. Before, the roofline took the op's own DRAM bytes:
BERT's embedding add went 8.83x -> 18.92x on tpu-v4 as residency made it faster.

An op's time is the cycles its busiest engine kind ran its commands (its coverage; not
its span, which for an epilogue fused into a matmul's tiles covers the whole matmul).
Ops are grouped by family (the aten op: ``convolution``, ``mm``, ``_softmax``...); a
family's gap is its times' sum over its rooflines' sum. Printed worst first per config,
with the single worst op of each family, and beside it the gap on the op's own DRAM
bytes (what its schedule moved; the yardstick this table used before, which grows when
an op's inputs move on chip). Ops under 0.5% of their model's run are left out.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from archsim.app.pipeline import native_dtype, run  # noqa: E402
from archsim.app.workload import Workload  # noqa: E402
from archsim.config import load_config  # noqa: E402
from reports.roofline_gap import op_gaps  # noqa: E402
from torch_bridge.shapes import estimate_options  # noqa: E402

BUILTIN_ZOO: list[tuple[str, str, dict[str, int]]] = [
    ("resnet-18", "resnet-18", {}),
    ("resnet-50", "resnet-50", {}),
    ("bert layer", "bert-base", {"layers": 1}),
    ("llama prefill", "llama-7b", {"seq": 2048, "layers": 4}),
    ("llama 1-token", "llama-7b", {"seq": 1, "layers": 4}),
]
"""(label, built-in workload, sizes): ``archsim workloads`` lists them."""


def transformers_zoo(dtype: str) -> list[tuple[str, Workload]]:
    """MobileNetV2 (1.0, 224) and one ViT-B/16 layer from transformers' default configs,
    on meta (shapes only), in ``dtype``: no built-in workload has them."""
    import torch
    import transformers

    with torch.device("meta"):
        mobilenet = transformers.MobileNetV2Model(transformers.MobileNetV2Config())
        vit = transformers.ViTModel(transformers.ViTConfig(num_hidden_layers=1),
                                    add_pooling_layer=False)
        image = torch.zeros(1, 3, 224, 224)
    return [("mobilenet-v2", Workload.of_module(mobilenet.eval(), image, name="mobilenet-v2",
                                                dtype=dtype)),
            ("vit layer", Workload.of_module(vit.eval(), image, name="vit-b/16", dtype=dtype))]


def zoo(config: str) -> list[tuple[str, Workload]]:
    """The models of the table, each in the config's native dtype."""
    builtins = [(label, Workload.builtin(name, **sizes)) for label, name, sizes in BUILTIN_ZOO]
    return builtins + transformers_zoo(native_dtype(load_config(config)))


CONFIGS = ("atom", "tpu-v4", "ascend-910b")
MIN_SHARE = 0.005


@dataclass
class Family:
    time: float = 0.0
    roof: float = 0.0
    own_roof: float = 0.0
    ops: int = 0
    models: set[str] = field(default_factory=set)
    worst: tuple[float, str] = (0.0, "")

    @property
    def gap(self) -> float:
        return self.time / self.roof

    @property
    def own_bytes_gap(self) -> str:
        return f"{self.time / self.own_roof:.2f}x" if self.own_roof else "-"


def family_of(source: str) -> str:
    """``layers.0.up:mm_5`` -> ``mm``; a source without an aten op stays itself."""
    op = source.rsplit(":", 1)[-1]
    return re.sub(r"_\d+$", "", op)


def gaps(config: str) -> tuple[dict[str, Family], list[str]]:
    """Per family on ``config``, and the ops that took less than their roofline (a
    roofline that is no lower bound: a modelling error to look into)."""
    families: dict[str, Family] = {}
    under: list[str] = []
    unplaced_options = dataclasses.replace(estimate_options(), on_chip_temps=False)
    for label, workload in zoo(config):
        result = run(workload, config, mode="performance")
        unplaced = run(workload, config, mode="performance", options=unplaced_options)
        for op in op_gaps(result, unplaced.program, MIN_SHARE):
            fam = families.setdefault(family_of(op.source), Family())
            fam.time += op.cycles
            fam.roof += op.roofline_cycles
            fam.own_roof += op.own_bytes_roofline_cycles
            fam.ops += 1
            fam.models.add(label)
            fam.worst = max(fam.worst, (op.gap, f"{label}: {op.source}"))
            if op.gap < 1:
                under.append(f"{label}: {op.source} ({op.gap:.2f}x)")
    return families, under


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    args = parser.parse_args()
    start = time.time()
    for config in args.configs.split(","):
        families, under = gaps(config)
        print(f"\n{config}: time over roofline per layer family, worst first\n")
        print("| family | ops | time / roofline | on own bytes | worst op (its gap) | models |")
        print("|---|---:|---:|---:|---|---|")
        for name, fam in sorted(families.items(), key=lambda kv: -kv[1].gap):
            print(f"| {name} | {fam.ops} | {fam.gap:.2f}x | {fam.own_bytes_gap} | "
                  f"{fam.worst[1]} ({fam.worst[0]:.2f}x) | {', '.join(sorted(fam.models))} |")
        if under:
            print(f"\nFaster than their roofline (not a bound: look into it): {'; '.join(under)}")
    print(f"\n{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
