"""Compiler benchmark: compile and simulate times for the standard workloads, and the
efficiency figures per preset. Prints markdown tables.

    python benchmarks/compiler_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "compiler"))

from archsim.config import load_config  # noqa: E402
from archsim.simulator import Simulator  # noqa: E402
from compiler import compile_graph, compile_op, export_decompositions  # noqa: E402
from compiler.compile import clear_cache  # noqa: E402
from compiler_models import GPT2Block, LlamaLayer, ResNetBlock, rotary  # noqa: E402

aten = torch.ops.aten
PRESETS = ("tiny", "edge", "atom", "tpu-v3", "tpu-v4", "ascend-910b")


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def _gpt2() -> tuple[Any, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = GPT2Block(768, 12).eval()
    x = torch.randn(1, 128, 768)
    return torch.export.export(model, (x,)).run_decompositions(), (x,)


def _resnet() -> tuple[Any, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = ResNetBlock(64, 128, 2).eval()
    x = torch.randn(1, 64, 56, 56)
    return torch.export.export(model, (x,)).run_decompositions(), (x,)


def _llama() -> tuple[Any, None]:
    with torch.device("meta"):
        model = LlamaLayer(4096, 32, 11008).eval().to(torch.bfloat16)
        x = torch.empty(1, 2048, 4096, dtype=torch.bfloat16)
        cos, sin = (t.to(torch.bfloat16) for t in rotary(2048, 128))
        ep = torch.export.export(model, (x, cos, sin)).run_decompositions(
            export_decompositions())
    return ep, None


def workloads(presets: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = []
    builders = {"GPT-2 block (seq 128, h 768, functional)": _gpt2,
                "ResNet block (64->128, 56x56, functional)": _resnet,
                "Llama-7B layer (seq 2048, bf16, perf-only)": _llama}
    for name, build in builders.items():
        ep, inputs = build()
        for preset in presets:
            cfg = load_config(preset)
            clear_cache()
            compiled, t_compile = _timed(lambda: compile_graph(ep, cfg))
            if inputs is not None:
                (_, result), t_sim = _timed(lambda: compiled.run(*inputs, verify=False))
            else:
                result, t_sim = _timed(lambda: Simulator(cfg).run(compiled.program,
                                                                  verify=False))
            rows.append({"workload": name, "preset": preset, "compile_s": t_compile,
                         "simulate_s": t_sim, "commands": len(compiled.program.commands),
                         "latency_ms": result.seconds * 1e3,
                         "matrix_util": result.matrix_utilization,
                         "host_ops": len(compiled.fallbacks)})
    return rows


def efficiency(presets: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = []
    for preset in presets:
        cfg = load_config(preset)
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}.get(
            cfg.core.matrix.input_dtype, torch.float32)
        n = 1024 if preset in ("tiny", "edge") else 4096  # small arrays: keep runs short
        a = torch.empty(n, n, dtype=dtype, device="meta")
        gemm, t_compile = _timed(lambda: compile_op(aten.mm.default, (a, a), {}, cfg))
        gemm_result, t_sim = _timed(lambda: Simulator(cfg).run(gemm.program, verify=False))
        x = torch.empty(n // 2, n, dtype=torch.float32, device="meta")
        add = compile_op(aten.add.Tensor, (x, x), {}, cfg)
        add_result = Simulator(cfg).run(add.program, verify=False)
        rows.append({"preset": preset, "gemm": f"{n}^3 {str(dtype).split('.')[-1]}",
                     "matrix_util": gemm_result.matrix_utilization,
                     "gemm_commands": len(gemm.program.commands),
                     "gemm_compile_s": t_compile, "gemm_simulate_s": t_sim,
                     "add_dram_util": add_result.dram_bandwidth_utilization})
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="only tpu-v3 and atom")
    args = parser.parse_args()
    presets = ("atom", "tpu-v3") if args.quick else PRESETS
    print("## Efficiency (GEMM: matrix peak; elementwise add: DRAM bandwidth)\n")
    print(_table(efficiency(presets)))
    print("\n## Workloads (compile and simulate wall time)\n")
    print(_table(workloads(presets if args.quick else ("atom", "tpu-v3", "tpu-v4",
                                                       "ascend-910b"))))


if __name__ == "__main__":
    main()
