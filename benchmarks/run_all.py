"""Run every benchmark and print its tables: ``python benchmarks/run_all.py``.

Figures go into BENCHMARKS.md by hand, with the machine and the date.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
BENCHMARKS = [
    ["sim_throughput.py", "--config", "atom"],
    ["sim_throughput.py", "--config", "tiny"],
    ["sim_throughput.py", "--config", "atom", "--workload", "llama"],
    ["energy_overhead.py", "--config", "atom"],
    ["compiler_bench.py"],
    ["bridge_bench.py"],
    ["validation.py", "--out", "-"],
    ["llm_bench.py"],
    ["serve_bench.py"],
    ["wall_bench.py"],
    ["triton_bench.py"],
    ["opinfo_coverage.py"],  # needs the opinfo extra (expecttest)
    ["scalesim_agreement.py", "--quick"],  # says why and skips without SCALE-Sim
]


def main() -> int:
    failed = 0
    for argv in BENCHMARKS:
        script = HERE / argv[0]
        print(f"\n## {' '.join(argv)}\n", flush=True)
        if not script.exists():
            print(f"(missing: {script.name})")
            failed += 1
            continue
        failed += subprocess.call([sys.executable, str(script), *argv[1:]]) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
