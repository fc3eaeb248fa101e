"""How close each convolution mapping's cycle estimate comes to its simulated cycles on
the zoo's layers, and whether the cost-based choice takes the faster mapping:
``python benchmarks/conv_estimate.py [--configs atom,tpu-v4] [--models resnet-18]
[--json out.jsonl]``.

Every convolution of ResNet-18, ResNet-50 (the built-in models) and MobileNetV2
(transformers' default config, after its TF-style padding) is compiled alone with the
epilogue the model fuses into it (batch norm with its reciprocal precomputed, as the
models hoist it; ReLU or ReLU6; ResNet's residual add), in the config's native dtype,
each distinct layer once (``archsim.estimate`` of the layer, on CPU: the program is the
convolution's one kernel). Each mapping that has a tiling is then forced in turn
(``compiler.kernels.conv._taken`` patched) and simulated, so its estimate (from the
choice string) stands beside its own simulated cycles. Prints a row per layer and
config, and per config and mapping the geometric mean and range of estimate/simulated,
the layers whose choice was not the fastest mapping and the cycles that costs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import compiler.kernels.conv as conv  # noqa: E402
from archsim.app.pipeline import native_dtype  # noqa: E402
from archsim.config import load_config  # noqa: E402
from compiler.ir.dtypes import DType  # noqa: E402
from compiler.torch_types import torch_dtype  # noqa: E402
from depthwise_estimate import CONFIGS, BatchNorm, estimates, forced  # noqa: E402

MODELS = ("resnet-18", "resnet-50", "mobilenet-v2")


class Layer(torch.nn.Module):
    """A convolution, batch norm, optional residual add and activation."""

    def __init__(self, conv2d: torch.nn.Conv2d, act: str, residual: bool) -> None:
        super().__init__()
        self.conv, self.bn = conv2d, BatchNorm(conv2d.out_channels)
        self.act, self.residual = act, residual

    def forward(self, x: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.conv(x))
        if self.residual:
            y = y + rest[0]
        if self.act == "relu":
            return torch.relu(y)
        if self.act == "relu6":
            return torch.nn.functional.relu6(y)
        return y


@dataclass(frozen=True)
class Spec:
    cin: int
    cout: int
    kernel: int
    stride: int
    padding: int
    groups: int
    size: int
    """Input height and width (as the convolution reads it)."""
    act: str
    residual: bool

    @property
    def name(self) -> str:
        dw = " dw" if self.groups > 1 else ""
        epi = "bn" + ("+add" if self.residual else "") + (f"+{self.act}" if self.act else "")
        return (f"{self.kernel}x{self.kernel}/{self.stride}{dw} {self.cin}->{self.cout}"
                f"@{self.size} {epi}")

    def module(self, dtype: torch.dtype) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
        c = torch.nn.Conv2d(self.cin, self.cout, self.kernel, self.stride, self.padding,
                            groups=self.groups, bias=False)
        model = Layer(c, self.act, self.residual).eval().to(dtype)
        x = torch.zeros(1, self.cin, self.size, self.size, dtype=dtype)
        if not self.residual:
            return model, (x,)
        out = (self.size + 2 * self.padding - self.kernel) // self.stride + 1
        return model, (x, torch.zeros(1, self.cout, out, out, dtype=dtype))


def _resnet_epilogue(name: str, bottleneck: bool) -> tuple[str, bool]:
    """(activation, residual add) ResNet's blocks fuse after the convolution ``name``."""
    if name.endswith("down.0"):
        return "", False
    last = "conv3" if bottleneck else "conv2"
    if name.endswith(last):
        return "relu", True
    return "relu", False


def layers(model_name: str) -> list[tuple[Spec, int]]:
    """The model's convolutions, each distinct one with its count."""
    seen: dict[Spec, int] = {}
    with torch.device("meta"):
        if model_name == "mobilenet-v2":
            import transformers
            model = transformers.MobileNetV2Model(transformers.MobileNetV2Config()).eval()
        else:
            from archsim.app.models import ResNet
            model = ResNet((2, 2, 2, 2) if model_name == "resnet-18" else (3, 4, 6, 3),
                           model_name == "resnet-50").eval()
        image = torch.zeros(1, 3, 224, 224)
    names = {m: n for n, m in model.named_modules()}
    parents = {n: m for n, m in model.named_modules()}

    def hook(module: torch.nn.Conv2d, args: tuple[torch.Tensor, ...], _out) -> None:
        name = names[module]
        if model_name == "mobilenet-v2":
            parent = parents[name.rsplit(".", 1)[0]]
            act, residual = ("relu6" if getattr(parent, "activation", None) is not None
                             else ""), False
        else:
            act, residual = _resnet_epilogue(name, model_name == "resnet-50")
        spec = Spec(module.in_channels, module.out_channels, module.kernel_size[0],
                    module.stride[0], module.padding[0], module.groups, args[0].shape[-1],
                    act, residual)
        seen[spec] = seen.get(spec, 0) + 1

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        model(image)
    for h in handles:
        h.remove()
    return list(seen.items())


def simulate(spec: Spec, config: str, mapping: str | None = None) -> tuple[int, str]:
    """Simulated cycles of the layer alone, in the config's native dtype, and its
    convolution's choice string; ``mapping`` forces one (None: the cost model's)."""
    dtype = torch_dtype(DType(native_dtype(load_config(config))))
    return forced(*spec.module(dtype), config, mapping)


@dataclass(frozen=True)
class Row:
    model: str
    layer: str
    count: int
    config: str
    taken: str
    estimates: dict[str, float]
    simulated: dict[str, int]


def measure(model: str, spec: Spec, count: int, config: str) -> Row:
    cycles, choice = simulate(spec, config)
    est = estimates(choice)
    taken = next(m for m, label in conv._MAPPINGS.items() if choice.startswith(label))
    sims = {taken: cycles}
    for mapping in est:
        if mapping not in sims:
            sims[mapping] = simulate(spec, config, mapping)[0]
    return Row(model, spec.name, count, config, taken, est, sims)


def summary(rows: list[Row]) -> None:
    print("\n| config | mapping | layers | est/sim geomean | min | max |")
    print("|---|---|---:|---:|---:|---:|")
    for config in dict.fromkeys(r.config for r in rows):
        mine = [r for r in rows if r.config == config]
        for mapping in ("gemm", "packed", "depthwise", "patch"):
            ratios = [r.estimates[mapping] / r.simulated[mapping] for r in mine
                      if mapping in r.estimates and mapping in r.simulated]
            if ratios:
                gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
                print(f"| {config} | {mapping} | {len(ratios)} | {gm:.2f} | "
                      f"{min(ratios):.2f} | {max(ratios):.2f} |")
    print("\n| config | model | layers | wrong choices | chosen cycles (x count) | "
          "best cycles | lost |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for config in dict.fromkeys(r.config for r in rows):
        for model in dict.fromkeys(r.model for r in rows):
            mine = [r for r in rows if r.config == config and r.model == model]
            if not mine:
                continue
            wrong = sum(1 for r in mine if min(r.simulated.values()) < r.simulated[r.taken])
            chosen = sum(r.count * r.simulated[r.taken] for r in mine)
            best = sum(r.count * min(r.simulated.values()) for r in mine)
            print(f"| {config} | {model} | {len(mine)} | {wrong} | {chosen:,} | {best:,} | "
                  f"{(chosen - best) / best:.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--json", help="write the rows as JSON lines here")
    args = parser.parse_args()
    start = time.time()
    rows: list[Row] = []
    out = open(args.json, "w") if args.json else None
    print("| model | layer | config | taken | estimate / simulated per mapping |")
    print("|---|---|---|---|---|")
    for model in args.models.split(","):
        specs = layers(model)
        for config in args.configs.split(","):
            for spec, count in specs:
                row = measure(model, spec, count, config)
                rows.append(row)
                if out:
                    out.write(json.dumps(asdict(row)) + "\n")
                    out.flush()
                cells = ", ".join(
                    f"{m} {row.estimates[m]:,.0f}/{row.simulated[m]:,} "
                    f"({row.estimates[m] / row.simulated[m]:.2f})" for m in row.estimates)
                best = min(row.simulated, key=row.simulated.get)
                mark = "" if best == row.taken else f" (faster: {best})"
                print(f"| {model} | {spec.name} x{count} | {config} | {row.taken}{mark} | "
                      f"{cells} |", flush=True)
    summary(rows)
    print(f"\n{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
