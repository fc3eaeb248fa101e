"""``archsim sweep``: one model on the cartesian product of ``--grid`` config values.

The command parses the grid, runs :func:`archsim.sweep.sweep` on the chosen backend
and prints :func:`reports.sweep_table`; with ``--out`` it writes sweep.csv, sweep.json
and pareto.png.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from archsim.config import DEFAULT_PRESET

if TYPE_CHECKING:
    from archsim.config import NpuConfig
    from archsim.sweep import SweepPoint

GRID_SYNTAX = "expected PATH=V1,V2,... (e.g. core.matrix.rows=64,128,256)"


def grid_axis(text: str) -> tuple[str, tuple[Any, ...]]:
    """``core.matrix.rows=64,128`` -> ``("core.matrix.rows", (64, 128))``; each value
    is read as YAML, like ``--set``. argparse reports the error with the argument named."""
    path, eq, values = text.partition("=")
    items = [item.strip() for item in values.split(",")]
    if not eq or not path.strip() or not all(items):
        raise argparse.ArgumentTypeError(f"{GRID_SYNTAX}, got {text!r}")
    try:
        return path.strip(), tuple(yaml.safe_load(item) for item in items)
    except yaml.YAMLError:
        raise argparse.ArgumentTypeError(f"{GRID_SYNTAX}, got {text!r} (a value is not "
                                         f"valid YAML)") from None


COSTS = ("peak_flops", "sram_bytes", "dram_bandwidth", "cores", "energy", "power", "area", "edp")
"""The keys of ``reports.figures.COST_METRICS``, named here so that building the
parser does not import matplotlib (a test keeps the two equal)."""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``sweep`` on the subparsers of ``archsim``."""
    from archsim.cli.main import positive
    p = sub.add_parser(
        "sweep", help="simulate one model on a grid of hardware configs",
        description="Simulate MODEL on every combination of the --grid values applied to "
                    "--config (after the fixed --set overrides), in parallel, and print one "
                    "row per point sorted by latency with the Pareto-optimal points marked "
                    "(latency vs --cost). Sweeps are performance-only by default: only "
                    "timing matters, and cycles equal those of a functional run. A point "
                    "whose values are invalid or whose model does not fit is listed with "
                    "its error; the other points still run (the exit status is 1 only if "
                    "no point ran).",
        epilog="example: archsim sweep gemm --config atom --grid core.matrix.rows=64,128,256 "
               "--grid dram.channels=8,16 --out sweep/")
    p.add_argument("model", metavar="MODEL",
                   help="what 'archsim run' takes: a built-in or sized workload (see "
                        "'archsim workloads'), a .py file, a .rbln program or a "
                        "transformers config.json")
    p.add_argument("--config", "-c", default=None, metavar="NAME",
                   help=f"base preset name or YAML file (default: a saved program's own "
                        f"preset, else {DEFAULT_PRESET})")
    p.add_argument("--grid", "-g", action="append", default=[], type=grid_axis,
                   metavar="PATH=V1,V2,...",
                   help="a swept config field and its values, e.g. core.matrix.rows=64,128 "
                        "(repeat for more axes; the sweep is their cartesian product)")
    p.add_argument("--dvfs", metavar="HZ:V,HZ:V,...",
                   help="a grid axis of DVFS operating points, each a clock and the core "
                        "voltage it runs at (e.g. 0.7e9:0.7,1e9:0.8,1.2e9:0.9): dynamic "
                        "energy scales with V², static power with V")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   dest="overrides",
                   help="a fixed override applied to every point, e.g. dram.channels=16 "
                        "(repeatable)")
    p.add_argument("--workers", "-j", type=positive, default=None, metavar="N",
                   help=f"points run in parallel (default: the CPU count, "
                        f"{os.cpu_count()} here; 1 runs them one by one in this process)")
    p.add_argument("--ray", action="store_true",
                   help="run points as Ray tasks (on the cluster RAY_ADDRESS names, else "
                        "on a new local Ray with --workers CPUs); needs pip install "
                        "'archsim[ray]'")
    p.add_argument("--cost", choices=COSTS, default="peak_flops",
                   help="cost for the Pareto front (default: peak_flops): a hardware "
                        "figure, the run's energy or average power, the chip's estimated "
                        "area, or the energy-delay product; --out also draws latency vs "
                        "energy and latency vs area")
    p.add_argument("--out", metavar="DIR",
                   help="write sweep.csv, sweep.json and pareto.png to DIR")
    p.add_argument("--batch", type=positive, default=None, help="batch size (built-in models)")
    p.add_argument("--seq", type=positive, default=None,
                   help="sequence length, or the size for gemm (built-in models)")
    p.add_argument("--layers", type=positive, default=None,
                   help="number of layers (built-in transformer models)")
    p.add_argument("--dtype", choices=("f32", "f16", "bf16"), default=None,
                   help="model dtype (built-in models; default: each point's matrix "
                        "engine's native dtype, f32 with --functional)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--perf-only", dest="perf_only", action="store_true", default=True,
                      help="performance-only: shapes only, no data (the default)")
    mode.add_argument("--functional", dest="perf_only", action="store_false",
                      help="run with data (f32 unless --dtype) instead: slower, and the "
                           "same cycles for the same dtype")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no per-point progress on stderr")
    p.set_defaults(handler=run)
    return p


def _base_config(args: argparse.Namespace) -> NpuConfig:
    """``--config`` with its overrides; without it, a saved program's own preset (as
    ``archsim run`` takes it), else the default."""
    from archsim.cli.commands import program_config, resolve_config

    path = Path(args.model)
    if args.config is None and path.suffix == ".rbln" and path.is_file():
        from compiler.ir.text import load_program

        return program_config(args, load_program(path), args.model)
    return resolve_config(args.config or DEFAULT_PRESET, args.overrides)


def run(args: argparse.Namespace) -> int:
    from archsim.cli.commands import output_dir
    from archsim.sweep import DVFS_AXIS, sweep

    import reports

    grid: dict[str, tuple[Any, ...]] = {}
    for path, values in args.grid:
        if path in grid:
            return _usage(f"argument --grid: {path} is given twice; list all its values "
                          f"in one --grid")
        grid[path] = values
    if args.dvfs:
        grid[DVFS_AXIS] = tuple(item.strip() for item in args.dvfs.split(","))
    if not grid:
        return _usage("give at least one --grid PATH=V1,V2,... or --dvfs HZ:V,...")
    dvfs_paths = {"clock_hz", "energy.voltage_v"} & set(grid)
    if args.dvfs and dvfs_paths:
        return _usage(f"argument --dvfs: {sorted(dvfs_paths)[0]} is also swept by --grid; "
                      f"drop one")
    fixed = [item for item in args.overrides if item.partition("=")[0].strip() in grid]
    if fixed:
        return _usage(f"argument --set: {fixed[0].partition('=')[0].strip()} is also swept "
                      f"by --grid; drop one")
    base = _base_config(args)
    out = output_dir(args.out) if args.out else None  # refused now, not after the sweep

    def report(point: SweepPoint, done: int, total: int) -> None:
        if args.quiet:
            return
        outcome = (f"{point.report.total_cycles:,} cycles" if point.report is not None
                   else point.status)
        print(f"[{done}/{total}] {point.label}: {outcome} ({point.wall_seconds:.2f} s)",
              file=sys.stderr, flush=True)

    points = sweep(args.model, base, grid, backend="ray" if args.ray else "process",
                   workers=args.workers, batch=args.batch, seq=args.seq, layers=args.layers,
                   dtype=args.dtype, perf_only=args.perf_only, on_point=report)
    print(reports.sweep_table(points, cost=args.cost))
    if out is not None:
        _write(points, args, grid, out, base.name)
    return 0 if any(p.ok for p in points) else 1


def _write(points: Sequence[SweepPoint], args: argparse.Namespace, grid: dict[str, tuple[Any, ...]],
           out: Path, config: str) -> None:
    import reports

    meta = {"model": args.model, "config": args.config or config,
            "fixed_overrides": {path.strip(): yaml.safe_load(value) for path, _, value
                                in (item.partition("=") for item in args.overrides)},
            "grid": {path: list(values) for path, values in grid.items()},
            "workload": {"batch": args.batch, "seq": args.seq, "layers": args.layers,
                         "dtype": args.dtype, "perf_only": args.perf_only}}
    reports.write_sweep_csv(points, out / "sweep.csv", cost=args.cost)
    reports.write_sweep_json(points, out / "sweep.json", cost=args.cost, meta=meta)
    written = "sweep.csv, sweep.json"
    if any(p.ok for p in points):
        figure = reports.sweep_pareto_figure(points, cost=args.cost)
        figure.savefig(out / "pareto.png", dpi=110, bbox_inches="tight")
        written += ", pareto.png"
        for cost in ("energy", "area"):  # the design's other two axes, always drawn
            if cost != args.cost:
                figure = reports.sweep_pareto_figure(points, cost=cost)
                figure.savefig(out / f"pareto_{cost}.png", dpi=110, bbox_inches="tight")
                written += f", pareto_{cost}.png"
    print(f"\nwrote {out}/: {written}")


def _usage(message: str) -> int:
    """An argument error found after parsing, printed like argparse's own."""
    from archsim.cli.main import EXIT_USAGE

    print(f"archsim sweep: error: {message}", file=sys.stderr)
    return EXIT_USAGE


__all__ = ["GRID_SYNTAX", "add_parser", "grid_axis", "run"]
