"""archsim against the real SCALE-Sim 3.0.0: ``python benchmarks/scalesim_agreement.py``.

Runs SCALE-Sim (one array, SRAMs large enough for every layer, CALC bandwidth mode:
no stalls) and ``archsim.agreement`` on the same layers and prints both "Total Cycles"
(SCALE-Sim's convention, see ``archsim/agreement.py``) with the difference: GEMM cubes
64-1024 and skinny shapes, and ResNet-18's convolutions as SCALE-Sim's own topology
file states them (``topologies/conv_nets/Resnet18.csv``: ifmap sizes without padding),
under ws on 128x128, os on 32x32 and is on 32x32.

SCALE-Sim is optional (``pip install '.[scalesim]'``); without it the script says so
and exits 0. SCALE-Sim 3.0.0 fails under NumPy >= 2.4 (it converts one-element arrays
with ``int()``, an error since 2.4), so run it from an environment with NumPy 2.3:

    python -m venv /tmp/scalesim-venv
    /tmp/scalesim-venv/bin/pip install scalesim==3.0.0 numpy==2.3.5 simpy pyyaml
    PYTHONPATH=$PWD /tmp/scalesim-venv/bin/python benchmarks/scalesim_agreement.py

(``import archsim`` needs neither torch nor the rest of the project's dependencies.)
SCALE-Sim walks every cycle in Python: the full set takes tens of minutes; ``--quick``
drops the 1024 cube and the largest skinny shape.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

GEMMS: list[tuple[str, tuple[int, int, int]]] = [  # name, (M, K, N)
    *[(f"gemm {s}^3", (s, s, s)) for s in (64, 128, 256, 512, 1024)],
    ("gemm 1024x64x1024", (1024, 64, 1024)),   # short K
    ("gemm 64x1024x64", (64, 1024, 64)),       # long K, few rows and columns
    ("gemm 16x512x1024", (16, 512, 1024)),     # few rows (a small batch)
    ("gemm 2048x256x32", (2048, 256, 32)),     # few columns
]
QUICK_SKIP = {"gemm 1024^3", "gemm 1024x64x1024"}

# ResNet-18 as SCALE-Sim states it: ifmap H, W, filter R, S, channels, filters, stride.
# Repeated shapes are run once and counted.
RESNET18: list[tuple[str, int, tuple[int, ...]]] = [  # name, times in the net, layer
    ("Conv1", 1, (224, 224, 7, 7, 3, 64, 2)),
    ("Conv2_*", 4, (56, 56, 3, 3, 64, 64, 1)),
    ("Conv3_1a", 1, (56, 56, 3, 3, 64, 128, 2)),
    ("Conv3_1b,2a,2b", 3, (28, 28, 3, 3, 128, 128, 1)),
    ("Conv3_s", 1, (56, 56, 1, 1, 64, 128, 2)),
    ("Conv4_1a", 1, (28, 28, 3, 3, 128, 256, 2)),
    ("Conv4_1b,2a,2b", 3, (14, 14, 3, 3, 256, 256, 1)),
    ("Conv4_s", 1, (28, 28, 1, 1, 128, 256, 2)),
    ("Conv5_1a", 1, (14, 14, 3, 3, 256, 512, 2)),
    ("Conv5_1b,2a,2b", 3, (7, 7, 3, 3, 512, 512, 1)),
    ("Conv5_s", 1, (14, 14, 1, 1, 256, 512, 2)),
]
ARRAYS = {"ws": (128, 128), "os": (32, 32), "is": (32, 32)}

_CONFIG = """[general]
run_name = agreement
[architecture_presets]
ArrayHeight = {rows}
ArrayWidth = {cols}
ifmapsramszkB = 1048576
filtersramszkB = 1048576
ofmapsramszkB = 1048576
IfmapOffset = 0
FilterOffset = 100000000
OfmapOffset = 200000000
Dataflow = {dataflow}
Bandwidth = 10
ReadRequestBuffer = 32
WriteRequestBuffer = 32
[layout]
IfmapCustomLayout = False
IfmapSRAMBankBandwidth = 10
IfmapSRAMBankNum = 10
IfmapSRAMBankPort = 2
FilterCustomLayout = False
FilterSRAMBankBandwidth = 10
FilterSRAMBankNum = 10
FilterSRAMBankPort = 2
[sparsity]
SparsitySupport = false
SparseRep = ellpack_block
OptimizedMapping = false
BlockSize = 8
RandomNumberGeneratorSeed = 40
[run_presets]
InterfaceBandwidth = CALC
UseRamulatorTrace = False
"""


def scalesim_cycles(layer: tuple[int, ...], gemm: bool, rows: int, cols: int,
                    dataflow: str) -> tuple[int, int]:
    """SCALE-Sim's (Total Cycles, Stall Cycles) for one layer: a GEMM (M, K, N) or a
    convolution topology row."""
    from scalesim.scale_sim import scalesim

    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp)
        (top / "run.cfg").write_text(_CONFIG.format(rows=rows, cols=cols, dataflow=dataflow))
        if gemm:
            m, k, n = layer
            topology = f"Layer, M, N, K,\nl0, {m}, {n}, {k},\n"
        else:
            topology = ("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                        "Channels, Num Filter, Strides,\nl0, "
                        + ", ".join(map(str, layer)) + ",\n")
        (top / "topology.csv").write_text(topology)
        (top / "layout.csv").write_text("Layer name,\n")
        with contextlib.redirect_stdout(io.StringIO()):
            sim = scalesim(save_disk_space=True, verbose=False, config=str(top / "run.cfg"),
                           topology=str(top / "topology.csv"),
                           layout=str(top / "layout.csv"), input_type_gemm=gemm)
            sim.run_scale(top_path=str(top))
        items = sim.runner.single_layer_sim_object_list[0].get_compute_report_items()
        return int(items[1]), int(items[2])


def missing_scalesim() -> str | None:
    """Why SCALE-Sim cannot run here, or None."""
    try:
        import numpy
        import scalesim  # noqa: F401
    except ImportError:
        return ("SCALE-Sim is not installed: pip install 'scalesim==3.0.0' (or the "
                "project's 'scalesim' extra); skipping the agreement benchmark")
    from numpy.lib import NumpyVersion

    if NumpyVersion(numpy.__version__) >= "2.4.0":
        return (f"SCALE-Sim 3.0.0 cannot run under NumPy {numpy.__version__} (it calls "
                "int() on one-element arrays, an error since NumPy 2.4); run this script "
                "from an environment with numpy==2.3.5 (see its docstring); skipping")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="skip the largest GEMMs (SCALE-Sim is slow on them)")
    parser.add_argument("--dataflows", default="ws,os,is",
                        help="comma-separated subset of ws,os,is (default: all)")
    args = parser.parse_args(argv)
    reason = missing_scalesim()
    if reason:
        print(reason)
        return 0
    sys.path.insert(0, str(ROOT))
    from archsim.agreement import ConvLayer, conv_agreement, gemm_agreement

    print("| dataflow | array | layer | M x K x N | SCALE-Sim | archsim | diff |")
    print("|---|---|---|---|---:|---:|---:|")
    worst: dict[str, float] = {}
    start = time.perf_counter()
    for dataflow in args.dataflows.split(","):
        rows, cols = ARRAYS[dataflow]
        work = [(name, 1, mkn, True) for name, mkn in GEMMS
                if not (args.quick and name in QUICK_SKIP)]
        work += [(name, count, layer, False) for name, count, layer in RESNET18]
        for name, count, layer, gemm in work:
            if gemm:
                ours = gemm_agreement(*layer, rows=rows, cols=cols, dataflow=dataflow)
            else:
                ours = conv_agreement(ConvLayer(*layer), rows=rows, cols=cols,
                                      dataflow=dataflow)
            theirs, stalls = scalesim_cycles(layer, gemm, rows, cols, dataflow)
            diff = ours.scalesim_total_cycles / theirs - 1
            worst[dataflow] = max(worst.get(dataflow, 0.0), abs(diff))
            label = name if count == 1 else f"{name} (x{count})"
            stall = "" if stalls == 0 else f" ({stalls} stalls)"
            print(f"| {dataflow} | {rows}x{cols} | {label} | {ours.m}x{ours.k}x{ours.n} | "
                  f"{theirs:,}{stall} | {ours.scalesim_total_cycles:,} | {diff:+.2%} |",
                  flush=True)
    summary = ", ".join(f"{df} {value:.2%}" for df, value in worst.items())
    print(f"\nlargest |diff| per dataflow: {summary} "
          f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
