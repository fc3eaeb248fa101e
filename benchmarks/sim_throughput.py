"""Simulator throughput: commands per second on a large generated program.

Times are CPU seconds of this process, so other load on the machine disturbs them less.

Runs a tiled-GEMM-shaped program (loads on two DMA engines per core, matmuls
accumulating on the matrix engine, a vector epilogue and a store per output tile)
across all cores of a preset, in performance-only and functional mode, and the rate of
bare SimPy timeouts measured in the same run for scale.

    python benchmarks/sim_throughput.py [--commands 100000] [--config tiny]
"""

from __future__ import annotations

import argparse
import platform
import time

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


def bare_simpy_rate(count: int) -> float:
    env = simpy.Environment()

    def loop():
        for _ in range(count):
            yield env.timeout(1)

    env.process(loop())
    seconds, _ = timed(env.run)
    return count / seconds


def timed(fn) -> tuple[float, object]:
    """CPU seconds of this process (steadier than wall time on a shared machine)."""
    start = time.process_time()
    value = fn()
    return time.process_time() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=100_000)
    parser.add_argument("--config", default="tiny")
    args = parser.parse_args()
    config = load_config(args.config)
    program = generated_program(args.commands, config.cores)
    n = len(program.commands)
    sim = Simulator(config)
    verify_s, _ = timed(lambda: verify(program, config))
    perf_s, perf = timed(lambda: sim.run(program, verify=False))
    rng = np.random.default_rng(0)
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32)
              for t in program.tensors if t.role == "in"}
    func_s, func = timed(lambda: sim.run(program, inputs, verify=False))
    if func.total_cycles != perf.total_cycles:
        raise SystemExit("functional and performance-only cycles differ")
    bare = bare_simpy_rate(n)
    print(f"machine: {platform.processor() or platform.machine()}, "
          f"python {platform.python_version()}, simpy {simpy.__version__}")
    print(f"program: {n} commands on {args.config}, {perf.total_cycles} cycles simulated")
    print("| what | CPU seconds | commands/s |")
    print("|---|---|---|")
    print(f"| verify | {verify_s:.2f} | {n / verify_s:,.0f} |")
    print(f"| simulate, performance-only | {perf_s:.2f} | {n / perf_s:,.0f} |")
    print(f"| simulate, functional | {func_s:.2f} | {n / func_s:,.0f} |")
    print(f"| bare SimPy timeouts (same count) | {n / bare:.2f} | {bare:,.0f} |")
    print(f"ratio performance-only / bare SimPy: {n / perf_s / bare:.2f}")


if __name__ == "__main__":
    main()
