"""ResNet-18's convolutions through the full compile path against SCALE-Sim's im2col
cycles: ``python benchmarks/conv_mapping.py [--dataflow ws|os] [--channels-last]``.

Each layer of ``benchmarks/scalesim_agreement.py``'s ResNet-18 (as SCALE-Sim's topology
states it: no padding, batch 1) is compiled from an ``nn.Conv2d`` and simulated with
``archsim.estimate`` on one array (ws 128x128 or os 32x32, one weight buffer, f32 native:
``archsim.agreement.array_config``) whose memory does not bound it: DMA, DRAM, NoC and
scratchpad ports at 4096 B/cycle (``--lanes``: the vector unit's width, 128 by default),
so the figure is the mapping's (how well the compiler's lowering fills the array and
what its data rearrangement costs), not the memory system's. The
reference is SCALE-Sim 3.0.0's "Total Cycles" for the im2col GEMM, which
``archsim.agreement.conv_agreement`` reproduces exactly (BENCHMARKS.md, "SCALE-Sim
agreement"). Prints per layer both cycle counts, their ratio and the engines' busy
cycles, then the network's total (repeated shapes counted). With ``--channels-last``
the image and the result are in torch's channels-last memory (NHWC, the order
im2col's rows take): the convolution reads and writes them without rearranging
(``compiler.layout``); by default NCHW, where its result is transposed back.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import archsim  # noqa: E402
from archsim.agreement import ConvLayer, array_config, conv_agreement  # noqa: E402
from scalesim_agreement import ARRAYS, RESNET18  # noqa: E402

WIDE = {
    "core.dma.bandwidth_bytes_per_cycle": 4096,
    "dram.channel_bandwidth_gb_per_s": 4096.0,
    "noc.link_bandwidth_bytes_per_cycle": 4096,
    "core.scratchpad.port_bandwidth_bytes_per_cycle": 8192,
}
"""Overrides that keep memory off the critical path."""


def measure(dataflow: str, lanes: int, channels_last: bool = False
            ) -> list[tuple[str, int, int, int, dict[str, int]]]:
    """Per layer: name, times in the net, SCALE-Sim cycles, archsim cycles, busy.
    ``channels_last``: the image (and so torch's result) in channels-last memory, as
    im2col's [pixels, K] rows assume and an NPU keeps activations; else NCHW."""
    rows, cols = ARRAYS[dataflow]
    config = array_config(rows, cols, dataflow).with_overrides(
        {**WIDE, "core.vector.lanes": lanes})
    out = []
    for name, times, (h, w, r, s, c, f, stride) in RESNET18:
        reference = conv_agreement(ConvLayer(h, w, r, s, c, f, stride), rows=rows, cols=cols,
                                   dataflow=dataflow)
        model = torch.nn.Conv2d(c, f, (r, s), stride=stride, bias=False)
        image = torch.zeros(1, c, h, w, device="meta")
        if channels_last:  # on CPU: a meta convolution reports a contiguous result
            model = model.to(memory_format=torch.channels_last)
            image = torch.zeros(1, c, h, w).to(memory_format=torch.channels_last)
        result = archsim.estimate(model, image, config)
        busy = {e.split(".")[-1]: int(b) for e, b in result.engine_busy_cycles.items() if b}
        out.append((name, times, reference.scalesim_total_cycles, result.total_cycles, busy))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataflow", choices=("ws", "os"), default="ws")
    parser.add_argument("--lanes", type=int, default=128,
                        help="vector lanes (default 128: one per column of a 128-wide array)")
    parser.add_argument("--channels-last", action="store_true",
                        help="images in channels-last memory (NHWC), as torch's "
                             "channels_last; default NCHW")
    args = parser.parse_args()
    start = time.time()
    rows = measure(args.dataflow, args.lanes, args.channels_last)
    array = "x".join(map(str, ARRAYS[args.dataflow]))
    print("| layer | SCALE-Sim im2col | archsim compiled | ratio | mxu busy |")
    print("|---|---:|---:|---:|---:|")
    total_ref = total = 0
    for name, times, ref, cycles, busy in rows:
        total_ref += times * ref
        total += times * cycles
        print(f"| {name} | {ref:,} | {cycles:,} | {cycles / ref:.2f}x | {busy.get('mxu0', 0):,} |")
    layout = "NHWC" if args.channels_last else "NCHW"
    print(f"| ResNet-18 convs ({args.dataflow} {array}, {args.lanes} lanes, {layout}) | "
          f"{total_ref:,} | {total:,} | "
          f"{total / total_ref:.2f}x | |")
    worst = max(rows, key=lambda r: r[3] / r[2])
    print(f"\nworst layer {worst[0]}: {worst[3] / worst[2]:.2f}x; {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
