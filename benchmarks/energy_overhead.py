"""Cost of the energy accounting against the simulation it accounts for.

For a large generated program (the throughput benchmark's tiled GEMM) and for real
workloads through the pipeline, times the simulation and then
:func:`archsim.energy.run_energy` plus the report's summary of it (power curve, peak,
TDP window) on the same result; the issue's budget is 10% of the simulation. Times
are CPU seconds of this process (``time.process_time``).

    python benchmarks/energy_overhead.py [--commands 100000] [--config atom]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_throughput import generated_program  # noqa: E402

from archsim.app import Workload, run  # noqa: E402
from archsim.config import load_config  # noqa: E402
from archsim.energy import run_energy  # noqa: E402
from archsim.simulator import Simulator  # noqa: E402
from reports.energy import energy_summary  # noqa: E402


def timed(fn):
    start = time.process_time()
    value = fn()
    return value, time.process_time() - start


def energy_seconds(result) -> float:
    _, seconds = timed(lambda: (run_energy(result), energy_summary(result)))
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=100_000)
    parser.add_argument("--config", default="atom")
    args = parser.parse_args()
    config = load_config(args.config)
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"{'case':52} {'commands':>9} {'simulate s':>11} {'energy s':>9} {'overhead':>9}")
    program = generated_program(args.commands, config.cores)
    result, sim = timed(lambda: Simulator(config).run(program))
    rows = [(f"generated GEMM tiles on {args.config}", len(program.commands), sim,
             energy_seconds(result))]
    for name, preset in (("gemm_2048x2048x2048", "tpu-v3"), ("gpt2", "atom")):
        result, sim = timed(lambda: run(Workload.builtin(name), preset, mode="performance"))
        rows.append((f"{name} on {preset} (compile + simulate)",
                     len(result.program.commands), sim, energy_seconds(result)))
    for case, commands, sim, energy in rows:
        print(f"{case:52} {commands:>9,} {sim:>11.3f} {energy:>9.4f} {energy / sim:>9.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
