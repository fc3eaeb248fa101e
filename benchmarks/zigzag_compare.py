"""Energy per layer side by side with ZigZag 3.9.1 on its shipped ``tpu_like`` example.

Two interpreters, so archsim's environment never gets ZigZag's dependencies:

    python3 -m venv /tmp/zz-venv && /tmp/zz-venv/bin/pip install zigzag-dse==3.9.1 six
    /tmp/zz-venv/bin/python benchmarks/zigzag_compare.py --zigzag > /tmp/zigzag.json
    python benchmarks/zigzag_compare.py /tmp/zigzag.json

The first runs ZigZag's API on ``data/zigzag/zigzag_layers.yaml`` (a GEMM 512³, a GEMV
1x4096x4096 and a ResNet 3x3 conv, 28x28x128 -> 128) with its ``tpu_like`` hardware
and mapping and prints its energies; the second runs the same layers through archsim on
``data/zigzag/tpu_like.yaml`` (that hardware with ZigZag's per-access energies) and
prints both, by level. archsim runs the sized workloads in bf16 (integer matmuls are
the built-in gemm's only), so there its per-byte energies are halved: an element costs
what ZigZag charges for an 8-bit one; a last row runs the gemm in int8 on the int8
array (``data/zigzag/tpu_like_i8.yaml``, torch._int_mm: an int32 output).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "zigzag"
LAYERS = {"gemm_512": "gemm_512x512x512", "gemv_4096": "gemm_1x4096x4096",
          "conv3x3_28x28x128": "conv_1x28x28x128x128x3x1x1"}
"""ZigZag layer name -> archsim sized workload."""


def run_zigzag() -> dict:
    import importlib.resources
    import tempfile

    from zigzag.api import get_hardware_performance_zigzag

    inputs = importlib.resources.files("zigzag") / "inputs"
    with tempfile.TemporaryDirectory() as out:
        _, _, cmes = get_hardware_performance_zigzag(
            str(DATA / "zigzag_layers.yaml"), str(inputs / "hardware" / "tpu_like.yaml"),
            str(inputs / "mapping" / "tpu_like.yaml"), dump_folder=out,
            pickle_filename=f"{out}/cmes.pickle")
    results = {}
    for cme, _ in cmes[0][1]:
        levels = {op: [float(x) for x in v]
                  for op, v in cme.mem_energy_breakdown.items()}
        results[cme.layer.name] = {"total_pj": float(cme.energy_total),
                                   "mac_pj": float(cme.mac_energy),
                                   "levels_pj": {str(k): v for k, v in levels.items()},
                                   "latency_cycles": float(cme.latency_total2)}
    return results


def run_archsim(zigzag: dict) -> None:
    from archsim.app import Workload, run
    from archsim.config import load_config
    from archsim.energy import run_energy

    config = load_config(DATA / "tpu_like.yaml")
    print(f"{'layer':20} {'':8} {'total uJ':>9} {'MAC+rf':>8} {'SRAM':>7} {'DRAM':>8} "
          f"{'vector':>7} {'cycles':>10}")
    for name, workload in LAYERS.items():
        result = run(Workload.builtin(workload, dtype="bf16"), config, mode="performance")
        e = run_energy(result)
        d = {k: v * 1e6 for k, v in e.dynamic_j.items()}
        print(f"{name:20} {'archsim':8} {e.dynamic_total_j * 1e6:9.2f} {d['arrays']:8.2f} "
              f"{d['sram']:7.2f} {d['dram']:8.2f} {d['vector']:7.2f} {result.total_cycles:10,}")
        z = zigzag.get(name)
        if z is None:
            continue
        levels = z["levels_pj"]
        rf = levels["O"][0] + levels["W"][0]  # the registers next to the MACs
        sram = levels["O"][1] + levels["I"][0]
        dram = levels["O"][-1] + levels["I"][-1] + levels["W"][-1]
        print(f"{'':20} {'ZigZag':8} {z['total_pj'] * 1e-6:9.2f} "
              f"{(z['mac_pj'] + rf) * 1e-6:8.2f} {sram * 1e-6:7.2f} {dram * 1e-6:8.2f} "
              f"{'-':>7} {z['latency_cycles']:10,.0f}")
    # int8 on the int8 array: only the built-in square gemm runs integer matmuls
    config = load_config(DATA / "tpu_like_i8.yaml")
    result = run(Workload.builtin("gemm", seq=512, dtype="i8"), config, mode="performance")
    e = run_energy(result)
    d = {k: v * 1e6 for k, v in e.dynamic_j.items()}
    print(f"{'gemm_512 (int8)':20} {'archsim':8} {e.dynamic_total_j * 1e6:9.2f} "
          f"{d['arrays']:8.2f} {d['sram']:7.2f} {d['dram']:8.2f} {d['vector']:7.2f} "
          f"{result.total_cycles:10,}")


def main() -> int:
    if sys.argv[1:] == ["--zigzag"]:
        json.dump(run_zigzag(), sys.stdout, indent=1)
        return 0
    zigzag = json.loads(Path(sys.argv[1]).read_text()) if len(sys.argv) > 1 else {}
    run_archsim(zigzag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
