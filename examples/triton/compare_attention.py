"""The hand-written flash-attention kernel next to archsim's own SDPA lowering, same
shapes, same NPU: which is faster, and why (engine utilization; --trace writes both
Perfetto timelines).

    python examples/triton/compare_attention.py --config atom --seq 512
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import archsim
from archsim.config import load_config
from flash_attention import flash_attention_naive_prefill_kernel
from torch_bridge.triton_launch import warmup


class Sdpa(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def compare(config: str = "atom", batch: int = 1, heads: int = 8, seq: int = 512,
            dim: int = 64, dtype: torch.dtype = torch.float16) -> dict[str, object]:
    """Both results (SimResults) on meta tensors: nothing is computed, only timed."""
    shape = (batch, heads, seq, dim)
    q, k, v, o = (torch.empty(shape, dtype=dtype, device="meta") for _ in range(4))
    runtime_config = load_config(config)
    from torch_bridge import runtime

    runtime.set_config(runtime_config)
    kernel = warmup(flash_attention_naive_prefill_kernel, q, k, v, o, dim ** -0.5, seq,
                    grid=(seq // 64, batch * heads), BM=64, BN=64, D=dim)
    return {"triton": kernel.simulate(), "compiler": archsim.estimate(Sdpa(), (q, k, v),
                                                                      config=config)}


def _line(name: str, result) -> str:
    busy = result.utilization
    groups = {kind: max((u for e, u in busy.items() if f".{kind}" in e), default=0.0)
              for kind in ("dma", "mxu", "vpu")}
    return (f"{name:<28} {result.total_cycles:>10,} cycles  matrix {groups['mxu']:6.1%}  "
            f"vector {groups['vpu']:6.1%}  DMA {groups['dma']:6.1%}  "
            f"DRAM {result.dram_bytes / 1024:,.0f} KiB")


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="atom")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--trace", type=Path, help="directory for the Perfetto traces")
    args = parser.parse_args(argv)
    results = compare(args.config, heads=args.heads, seq=args.seq)
    lines = [f"causal attention, {args.heads} heads x {args.seq} tokens x 64, f16, "
             f"on {args.config} (busiest engine of each kind)",
             _line("Triton kernel (hand)", results["triton"]),
             _line("compiler SDPA lowering", results["compiler"])]
    fast, slow = sorted(results, key=lambda n: results[n].total_cycles)
    ratio = results[slow].total_cycles / max(1, results[fast].total_cycles)
    lines.append(f"{fast} is {ratio:.2f}x faster")
    if args.trace:
        from reports.perfetto import write_trace

        args.trace.mkdir(parents=True, exist_ok=True)
        for name, result in results.items():
            write_trace(result, args.trace / f"attention_{name}.json")
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    main()
