"""How close the depthwise mapping's cycle estimate comes to its simulated cycles, and
whether the estimates rank the convolution mappings as the simulator does:
``python benchmarks/depthwise_estimate.py [--configs atom,tpu-v4] [--alternatives]``.

The convolution lowering (``compiler.kernels.conv``) takes the mapping with the lowest
estimate among depthwise-on-the-vector-unit, taps packed into K and implicit GEMM
(``_taken``); the estimates it compared are in the result's ``choices``. Each layer here
is compiled alone (``archsim.estimate`` of the layer, on CPU, so the program is the
convolution's one kernel with its fused epilogue) and its estimate set against the
program's simulated cycles: MobileNetV2's depthwise convolutions (transformers' default
config, 224x224; each distinct shape once, as the model runs it after its TF-style
padding: padding 0 on the padded image, batch norm (its reciprocal precomputed, as the
model hoists it) and ReLU6 fused) and a few standalone
layers (3x3 stride 1 and 2, 5x5, f16, NHWC). With ``--alternatives`` every mapping that
has a tiling is forced in turn (``_taken`` patched) and simulated, so a ranking the
estimates get wrong shows. Then MobileNetV2 whole, for its total cycles.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import archsim  # noqa: E402
import compiler.kernels.conv as conv  # noqa: E402
from compiler.compile import clear_cache  # noqa: E402

CONFIGS = ("atom", "tpu-v4", "ascend-910b", "tpu-v3")


class BatchNorm(torch.nn.Module):
    """Inference batch norm with ``1 / sqrt(var + eps)`` already computed: the four
    per-channel ops MobileNetV2's layers fuse after each convolution. (``nn.BatchNorm2d``
    alone would add a kernel computing that reciprocal before the convolution's, which
    the whole model hoists away from its layers.)"""

    def __init__(self, channels: int) -> None:
        super().__init__()
        for name in ("mean", "inv_std", "weight", "bias"):
            self.register_buffer(name, torch.rand(channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) * self.inv_std * self.weight + self.bias


@dataclass(frozen=True)
class Layer:
    name: str
    channels: int
    size: int
    """The image's height and width as the convolution reads it."""
    kernel: int
    stride: int
    padding: int
    dtype: torch.dtype = torch.float32
    channels_last: bool = False
    epilogue: bool = False
    """Batch norm and ReLU6 fused after it (MobileNetV2's)."""

    def module(self) -> tuple[torch.nn.Module, torch.Tensor]:
        # on CPU (small): a meta convolution reports a contiguous result, NHWC or not
        layers = [torch.nn.Conv2d(self.channels, self.channels, self.kernel, self.stride,
                                  self.padding, groups=self.channels, bias=False)]
        if self.epilogue:
            layers += [BatchNorm(self.channels), torch.nn.ReLU6()]
        model = torch.nn.Sequential(*layers).eval().to(self.dtype)
        x = torch.zeros(1, self.channels, self.size, self.size, dtype=self.dtype)
        if self.channels_last:
            model, x = (model.to(memory_format=torch.channels_last),
                        x.to(memory_format=torch.channels_last))
        return model, x


def mobilenet_layers() -> list[tuple[Layer, int]]:
    """MobileNetV2's depthwise convolutions, each distinct shape with its count."""
    import transformers

    with torch.device("meta"):
        model = transformers.MobileNetV2Model(transformers.MobileNetV2Config()).eval()
        image = torch.zeros(1, 3, 224, 224)
    seen: dict[Layer, int] = {}

    def hook(module: torch.nn.Conv2d, args: tuple[torch.Tensor, ...], _out) -> None:
        c, size = module.in_channels, args[0].shape[-1]
        layer = Layer(f"mnv2 {c}@{size} s{module.stride[0]}", c, size, module.kernel_size[0],
                      module.stride[0], module.padding[0], epilogue=True)
        seen[layer] = seen.get(layer, 0) + 1

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, torch.nn.Conv2d) and m.groups > 1
               and m.groups == m.in_channels]
    with torch.no_grad():
        model(image)
    for h in handles:
        h.remove()
    return list(seen.items())


STANDALONE = [
    Layer("3x3 s1 144@56", 144, 56, 3, 1, 1),
    Layer("3x3 s2 144@56", 144, 56, 3, 2, 1),
    Layer("5x5 s1 240@14", 240, 14, 5, 1, 2),
    Layer("3x3 s1 144@56 f16", 144, 56, 3, 1, 1, torch.float16),
    Layer("3x3 s1 144@56 NHWC", 144, 56, 3, 1, 1, channels_last=True),
    Layer("3x3 s2 96@112 f16 NHWC", 96, 112, 3, 2, 1, torch.float16, channels_last=True),
]


def estimates(choice: str) -> dict[str, float]:
    """The estimates a convolution's choice string lists, by mapping
    (``compiler.kernels.conv._ESTIMATED`` names them)."""
    found = {}
    for mapping, label in conv._ESTIMATED.items():
        hit = re.search(label + r" ([\d,]+) cycles", choice)
        if hit:
            found[mapping] = float(hit.group(1).replace(",", ""))
    return found


def forced(model: torch.nn.Module, inputs: tuple, config: str, mapping: str | None = None
           ) -> tuple[int, str]:
    """Simulated cycles of a one-convolution model and its convolution's choice string;
    ``mapping`` forces one (``conv._taken`` patched; None: the cost model's)."""
    original = conv._taken
    if mapping is not None:
        conv._taken = lambda *_: mapping
    clear_cache()  # a schedule compiled under another mapping is cached
    try:
        result = archsim.estimate(model, inputs, config)
    finally:
        conv._taken = original
        clear_cache()
    choice = next(c for s, c in result.choices.items() if "conv" in s)
    return result.total_cycles, choice


def simulate(layer: Layer, config: str, mapping: str | None = None
             ) -> tuple[int, str]:
    """Simulated cycles of the layer alone, and the convolution's choice string;
    ``mapping`` forces one (None: the cost model's)."""
    model, x = layer.module()
    return forced(model, (x,), config, mapping)


def layer_rows(config: str, layers: list[tuple[Layer, int]], alternatives: bool) -> None:
    for layer, count in layers:
        cycles, choice = simulate(layer, config)
        est = estimates(choice)
        taken = next(m for m, label in conv._MAPPINGS.items() if choice.startswith(label))
        line = (f"| {layer.name}{f' (x{count})' if count > 1 else ''} | {config} | {taken} | "
                f"{est.get('depthwise', float('nan')):,.0f} | ")
        if "depthwise" not in est:
            line += "no tiling fits | |"
        elif taken == "depthwise":
            line += f"{cycles:,} | {est['depthwise'] / cycles:.2f} |"
        else:
            forced, _ = simulate(layer, config, "depthwise")
            line += f"{forced:,} | {est['depthwise'] / forced:.2f} |"
        if alternatives:
            sims = {taken: cycles}
            for mapping in est:
                if mapping not in sims:
                    sims[mapping] = simulate(layer, config, mapping)[0]
            best = min(sims, key=sims.get)
            line += " " + ", ".join(f"{m} {est[m]:,.0f}/{sims[m]:,}" for m in est)
            line += f" | {'yes' if best == taken else 'NO: ' + best} |"
        print(line, flush=True)


def whole_model(config: str) -> None:
    """MobileNetV2 whole: its cycles, and its depthwise layers' estimates summed. (The
    layers' own cycles are not separable there: their commands' spans include waits on
    their neighbours and the batch norms' hoisted preparation.)"""
    import transformers

    with torch.device("meta"):
        model = transformers.MobileNetV2Model(transformers.MobileNetV2Config()).eval()
        image = torch.zeros(1, 3, 224, 224)
    clear_cache()
    result = archsim.estimate(model, image, config)
    est = sum(estimates(c)["depthwise"] for c in result.choices.values()
              if c.startswith(conv._MAPPINGS["depthwise"]))
    print(f"| MobileNetV2 whole | {config} | depthwise estimates summed {est:,.0f} | "
          f"model {result.total_cycles:,} cycles |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--alternatives", action="store_true",
                        help="force and simulate every mapping with a tiling")
    parser.add_argument("--no-model", action="store_true", help="skip the whole model")
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}")
    print("| layer | config | taken | depthwise estimate | simulated | ratio |"
          + (" estimate/simulated per mapping | ranking right |" if args.alternatives else ""))
    layers = mobilenet_layers() + [(layer, 1) for layer in STANDALONE]
    for config in args.configs.split(","):
        start = time.perf_counter()
        layer_rows(config, layers, args.alternatives)
        if not args.no_model:
            whole_model(config)
        print(f"# {config}: {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
