"""Simulator throughput: commands per second on a large generated program.

Times are CPU seconds of this process, so other load on the machine disturbs them less.

Runs a tiled-GEMM-shaped program (loads on two DMA engines per core, matmuls
accumulating on the matrix engine, a vector epilogue and a store per output tile)
across all cores of a preset, in performance-only and functional mode, and the rate of
bare SimPy timeouts measured in the same run for scale.

    python benchmarks/sim_throughput.py [--commands 100000] [--config atom]
    python benchmarks/sim_throughput.py --workload llama --config atom

Rows: verification alone; a first run of a new program object (planning + simulation,
the headline figure); a re-run of the same object (plan cached); a functional re-run;
and ``Simulator(config).run(program)`` as a user calls it on a new program (verify +
plan + simulate).
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import simpy

from archsim.config import load_config
from archsim.simulator import Simulator
from compiler.ir import Binary, BinaryKind, DType, Load, MatMul, Scalar, SramRef, Store
from compiler.ir.builder import ProgramBuilder
from compiler.ir.verify import verify
from compiler.ir.ops import Program

F32 = DType.f32
TILE = 8


def generated_program(target_commands: int, cores: int, k_steps: int = 4) -> Program:
    """Output tiles round-robin over cores; per tile: 2*k_steps loads, k_steps matmuls,
    one vector op, one store. Double-buffered operand regions per core."""
    per_tile = 3 * k_steps + 2
    tiles = max(1, target_commands // per_tile)
    b = ProgramBuilder("throughput")
    k = TILE * k_steps
    b.tensor("A", (TILE * tiles, k), F32, "in")
    b.tensor("B", (k, TILE), F32, "in")
    b.tensor("C", (TILE * tiles, TILE), F32, "out")
    nbytes = TILE * TILE * 4
    last_use: dict[tuple[int, int], int] = {}  # (core, slot) -> last command reading it
    for t in range(tiles):
        core = t % cores
        space = f"sram{core}"
        acc = SramRef(space, 0, (TILE, TILE), F32)
        out = SramRef(space, nbytes, (TILE, TILE), F32)
        prev = None
        for s in range(k_steps):
            slot = (t // cores * k_steps + s) % 2
            a = SramRef(space, (2 + 2 * slot) * nbytes, (TILE, TILE), F32)
            w = SramRef(space, (3 + 2 * slot) * nbytes, (TILE, TILE), F32)
            war = [last_use[(core, slot)]] if (core, slot) in last_use else []
            la = b.add(f"core{core}.dma0", Load(b.ref("A", (TILE * t, TILE * t + TILE),
                                                       (TILE * s, TILE * s + TILE)), a), war)
            lb = b.add(f"core{core}.dma1", Load(b.ref("B", (TILE * s, TILE * s + TILE),
                                                       (0, TILE)), w), war)
            deps = [la, lb] + ([prev] if prev is not None else [])
            prev = b.add(f"core{core}.mxu0", MatMul(a, w, acc, accumulate=s > 0), deps)
            last_use[(core, slot)] = prev
        epi = b.add(f"core{core}.vpu", Binary(BinaryKind.mul, acc, Scalar(0.5), out), [prev])
        b.add(f"core{core}.dma0", Store(out, b.ref("C", (TILE * t, TILE * t + TILE), (0, TILE))),
              [epi])
    return b.build()


def best_of(repeats: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """Fewest CPU seconds of this process over ``repeats`` calls (the machine is shared;
    the minimum is the least disturbed run), with the last value."""
    best, value = float("inf"), None
    for _ in range(repeats):
        start = time.process_time()
        value = fn()
        best = min(best, time.process_time() - start)
    return best, value


def best_of_alternating(repeats: int, *fns: Callable[[], Any]) -> list[tuple[float, Any]]:
    """:func:`best_of` of several functions called in turn: the machine's speed drifts
    over minutes, so a ratio of two bests is only fair when both were taken together."""
    best, values = [float("inf")] * len(fns), [None] * len(fns)
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            start = time.process_time()
            values[k] = fn()
            best[k] = min(best[k], time.process_time() - start)
    return list(zip(best, values))


def llama_layer_program(config_name: str) -> Program:
    """A Llama-7B decoder layer with its embedding and LM head (seq 2048, bf16) compiled for a preset: real
    compiler output, built on the meta device."""
    import torch

    from archsim.app.models import Llama
    from compiler import compile_graph, export_decompositions

    with torch.device("meta"):
        model = Llama(layers=1).to(torch.bfloat16).eval()
        ids = torch.zeros(1, 2048, dtype=torch.long)
    exported = torch.export.export(model, (ids,)).run_decompositions(export_decompositions())
    return compile_graph(exported, load_config(config_name)).program


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=100_000)
    parser.add_argument("--config", default="atom")
    parser.add_argument("--workload", choices=("generated", "llama"), default="generated",
                        help="a generated GEMM schedule or a compiled Llama-7B layer")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    config = load_config(args.config)
    if args.workload == "llama":
        program = llama_layer_program(args.config)
    else:
        program = generated_program(args.commands, config.cores)
    n = len(program.commands)
    r = args.repeats
    verify_s, _ = best_of(min(r, 2), lambda: verify(program, config))
    default_s, _ = best_of(min(r, 2), lambda: Simulator(config).run(dataclasses.replace(program)))
    # first run: a fresh Simulator and an equal-but-new program object each time
    # (nothing cached); timed in turn with the re-run and bare SimPy, so the ratios
    # compare the same minutes
    (first_s, perf), (rerun_s, _), (bare_s, _) = best_of_alternating(
        r, lambda: Simulator(config).run(dataclasses.replace(program), verify=False),
        lambda: Simulator(config).run(program, verify=False), lambda: bare_simpy(n))
    rng = np.random.default_rng(0)
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32)
              for t in program.tensors if t.role in ("in", "inout")}
    functional_s, func = (best_of(r, lambda: Simulator(config).run(program, inputs,
                                                                   verify=False))
                          if args.workload == "generated" else (float("nan"), perf))
    if func.total_cycles != perf.total_cycles:
        raise SystemExit("functional and performance-only cycles differ")
    bare = n / bare_s
    print(f"machine: {platform.processor() or platform.machine()}, "
          f"python {platform.python_version()}, simpy {simpy.__version__}")
    print(f"program: {args.workload}, {n} commands on {args.config}, "
          f"{perf.total_cycles} cycles simulated; best of {r}, CPU seconds")
    print("| what | CPU seconds | commands/s |")
    print("|---|---|---|")
    rows = [("verify (once per program)", verify_s),
            ("simulate, performance-only (plan + run)", first_s),
            ("re-run the same program (plan cached)", rerun_s),
            ("re-run, functional (plan cached)", functional_s),
            ("run() on a new program: verify + plan + simulate", default_s),
            ("bare SimPy timeouts (same count)", n / bare)]
    for what, seconds in rows:
        if seconds == seconds:  # skip NaN (no functional run for meta-built programs)
            print(f"| {what} | {seconds:.2f} | {n / seconds:,.0f} |")
    print(f"ratio performance-only / bare SimPy: {n / first_s / bare:.2f} "
          f"(plan cached: {n / rerun_s / bare:.2f})")


def bare_simpy(count: int) -> None:
    env = simpy.Environment()

    def loop():
        for _ in range(count):
            yield env.timeout(1)

    env.process(loop())
    env.run()


if __name__ == "__main__":
    main()
