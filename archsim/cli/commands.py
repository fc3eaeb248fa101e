"""The subcommands of ``archsim``. Each takes parsed arguments and returns an exit code;
errors are raised as :class:`~archsim.errors.ArchsimError` and printed by ``main``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from archsim.config import DEFAULT_PRESET, NpuConfig, load_config, preset_names
from archsim.errors import ArchsimError, ConfigError, VerifyError


def resolve_config(name: str, overrides: list[str]) -> NpuConfig:
    """A preset or YAML file with ``PATH=VALUE`` overrides applied."""
    config = load_config(name)
    if not overrides:
        return config
    parsed: dict[str, Any] = {}
    problems = []
    for item in overrides:
        path, eq, text = item.partition("=")
        if not eq or not path:
            problems.append(f"--set {item!r}: expected PATH=VALUE, e.g. core.matrix.rows=256")
            continue
        try:
            parsed[path.strip()] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            problems.append(f"--set {item!r}: the value is not valid YAML "
                            f"({str(exc).splitlines()[0]})")
    if problems:
        raise ConfigError(problems, source="command line")
    return config.with_overrides(parsed)


# ---------------------------------------------------------------- run / compare


def run(args: argparse.Namespace) -> int:
    from compiler.ir.collector import paused

    # Python's cyclic collector would walk torch's and the program's objects some 950
    # times (about 15% of `archsim run gpt2`) for the few cycles importing torch and
    # torch.export leave (about 10 MB on GPT-2); it resumes when the command returns.
    with paused(exiting=args.exiting):
        return _run(args)


def workload_of(args: argparse.Namespace) -> Any:
    """The :class:`~archsim.app.Workload` that MODEL and its options name."""
    from archsim.app.workload import Workload

    return Workload.parse(args.model, batch=args.batch, seq=args.seq, layers=args.layers,
                          dtype=args.dtype, kwargs=dict(args.kwargs or ()))


def simulate(args: argparse.Namespace, config: NpuConfig, workload: Any = None) -> Any:
    """``archsim run``'s workload (parsed from ``args`` unless given) on ``config``
    through the one pipeline."""
    from archsim.app.pipeline import run
    from archsim.app.progress import StderrProgress

    return run(workload or workload_of(args), config,
               mode="performance" if args.perf_only else "auto",
               all_layers=args.all_layers, progress=StderrProgress(args.quiet))


def program_config(args: argparse.Namespace, program: Any, path: str) -> NpuConfig:
    """``--config`` with its overrides; without it, the preset a saved program was
    compiled for (its header's ``target=``), said on stderr unless quiet, else the
    default preset."""
    from archsim.app.pipeline import program_target

    target = program_target(program)
    quiet = getattr(args, "quiet", True)
    if args.config is None and target is not None:
        if not quiet:
            print(f"{path}: on {target}, the preset it was compiled for "
                  f"(--config to choose another)", file=sys.stderr)
        return resolve_config(target, args.overrides)
    if args.config is None and program.target and not quiet:
        print(f"{path}: compiled for {program.target}, not a preset as it is; on "
              f"{DEFAULT_PRESET} (give --config and --set as when it was saved)",
              file=sys.stderr)
    return resolve_config(args.config or DEFAULT_PRESET, args.overrides)


def _run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from archsim.app.workload import Kind

    workload = workload_of(args)
    if workload.kind is Kind.PROGRAM:  # parsed once, here: its target is the default
        workload = replace(workload, program=workload.load_program())
        config = program_config(args, workload.program, args.model)
    else:
        config = resolve_config(args.config or DEFAULT_PRESET, args.overrides)
    if args.out:
        output_dir(args.out)  # refused now, not after the simulation
    result = simulate(args, config, workload)
    import reports

    if args.quiet:
        print(_one_line(result))
    else:
        print(reports.summary(result))
        print()
        print(reports.op_table(result, top=args.top))
        print()
        print(reports.critical_path_text(result, max_rows=12))
    if args.json:
        reports.write_json(result, args.json)
    if args.save_program:
        _save_program(result, args.save_program)
    if args.out:
        write_outputs(result, Path(args.out), args.quiet)
    return 0


def _save_program(result: Any, path: str) -> None:
    """Write the run's program; from a run that extended layers or tile panels it holds
    only the simulated ones, so its name says so (re-running it simulates those alone)."""
    from dataclasses import replace

    from compiler.ir.text import save_program

    program = result.program
    if program.target in preset_names() and result.config != load_config(program.target):
        # compiled with --set or from a YAML file of a preset's name: re-running it on
        # the preset as it is would announce another machine as its own
        program = replace(program, target=f"{program.target} (changed)")
    partial = [part.describe() for part in (result.layers, result.tiles)
               if part is not None and part.simulated < part.total]
    note = ""
    if partial:
        note = f" (the simulated part only: {'; '.join(partial)})"
        program = replace(program, name=program.name + " [saved" + note + "]")
    save_program(program, path)
    print(f"wrote {path}{note}", file=sys.stderr)


def compare(args: argparse.Namespace) -> int:
    from compiler.ir.collector import paused

    import reports

    workload_of(args)  # a bad MODEL or option is refused before any config runs
    configs = [resolve_config(name, args.overrides) for name in args.config]  # a bad -c
    out = output_dir(args.out) if args.out else None  # and a bad --out
    results = []
    for config in configs:
        with paused(exiting=args.exiting):  # as in `run`, config by config
            results.append(simulate(args, config))
    if args.quiet:  # the summary line of each config, as `run --quiet` prints one
        print("\n".join(_one_line(result) for result in results))
    else:
        print(reports.compare_table(results, labels=args.config))
    if out is not None:
        figure = reports.pareto_figure(results)
        figure.savefig(out / "pareto.png", dpi=110, bbox_inches="tight")
        for label, result in zip(args.config, results):
            reports.write_json(result, out / f"result-{Path(label).stem}.json")
        if not args.quiet:
            print(f"\nwrote {out}/pareto.png and one result-<config>.json per config")
    return 0


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def output_dir(path: str | Path, flag: str = "--out") -> Path:
    """``flag``'s directory (created), or an ArchsimError saying why it cannot be; called
    before simulating, so a long run is not lost to a path that cannot take its output."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ArchsimError(f"{flag} {out}: is a file; give a directory (created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ArchsimError(f"{flag} {out}: cannot create the directory "
                           f"({exc.strerror})") from None
    return out


def write_outputs(result, out: Path, quiet: bool) -> None:
    import reports
    from archsim.app.progress import StderrProgress

    out = output_dir(out)
    with StderrProgress(quiet).step(f"writing reports to {out}"):
        (out / "summary.txt").write_text(reports.summary(result) + "\n")
        reports.export_perfetto(result, out / "trace.json")
        reports.write_json(result, out / "result.json")
        reports.write_html(result, out / "report.html")
        reports.save_figures(result, out)
    if not quiet:
        print(f"\nwrote {out}/: summary.txt, trace.json (open in ui.perfetto.dev), "
              f"result.json, report.html, figures (*.png)")


def _one_line(result) -> str:
    return (f"{result.program.name} on {result.config.name}: {result.total_cycles} cycles, "
            f"{result.seconds * 1e6:.3f} us, matrix {result.matrix_utilization:.1%} of peak, "
            f"DRAM {result.dram_bandwidth_utilization:.1%} of peak")


# ---------------------------------------------------------------- configs / workloads


def configs(args: argparse.Namespace) -> int:
    from archsim.area import area_mm2
    from reports.text import format_bytes, format_table

    if getattr(args, "explain", False):
        from archsim.config.bounds import explain
        from archsim.config.load import choice_fields

        print(explain())
        print("\nfield                            accepted values")
        for path, values in choice_fields():
            print(f"{path:32s} {' | '.join(map(str, values))}")
        return 0
    if getattr(args, "energy", None):
        print(_energy_sheet(load_config(args.energy)))
        return 0

    rows = []
    placements: dict[str, list[str]] = {}
    for name in preset_names():
        c = load_config(name)
        placements.setdefault(c.core.matrix.dequant, []).append(name)
        rows.append([
            name + (" (default)" if name == preset_names()[0] else ""),
            str(c.cores),
            f"{c.core.matrix.arrays}x {c.core.matrix.rows}x{c.core.matrix.cols} "
            f"{c.core.matrix.dataflow} {c.core.matrix.input_dtype}",
            f"{c.clock_hz / 1e9:g} GHz",
            f"{c.peak_flops / 1e12:.2f}",
            _narrow_peaks(c),
            f"{c.dram_bandwidth_bytes_per_s / 1e9:g} {c.dram.kind}",
            format_bytes(c.core.scratchpad.size_bytes),
            format_bytes(c.shared_sram.size_bytes) if c.shared_sram.size_bytes else "-",
            _links(c),
            f"{c.energy.node_nm:g} nm",
            f"{sum(area_mm2(c).values()):.0f}",
            f"{c.power.tdp_w:g}" if c.power.tdp_w else "-",
        ])
    print(format_table(["preset", "cores", "matrix per core", "clock", "peak TFLOP/s",
                        "i8/i4/fp8 TOPS", "DRAM GB/s", "SRAM/core", "shared", "chip links",
                        "node", "mm²", "TDP W"], rows))
    print("\ni8/i4/fp8 TOPS: the arrays' peak on narrow inputs (core.matrix.rates); '-': no "
          "such mode,\nthe compiler widens those inputs and they run at the native rate.")
    print("Weight-only quantized weights dequantized (core.matrix.dequant): " + "; ".join(
        f"{placement} on {', '.join(names)}" for placement, names in placements.items()))
    print("\nOverride any field with --set PATH=VALUE; a YAML file works as --config too.")
    print("Area (mm², estimated) and energy per component: archsim configs --energy PRESET.")
    return 0


def _energy_sheet(config: Any) -> str:
    """Area and static power per component and the per-operation energies of a config
    (:mod:`archsim.area`, :mod:`archsim.config.energy_reference`)."""
    from archsim.area import COMPONENTS, area_mm2, static_power_w
    from archsim.config.energy_reference import energy_table, table_rows
    from reports.text import format_table

    areas, static = area_mm2(config), static_power_w(config)
    rows = [[name, f"{areas[name]:.2f}", f"{static[name]:.2f}"] for name in COMPONENTS]
    rows.append(["total", f"{sum(areas.values()):.2f}", f"{sum(static.values()):.2f}"])
    energy = config.energy
    head = (f"{config.name}: {energy.node_nm:g} nm, {energy.voltage_v:g} V, "
            f"{config.clock_hz / 1e9:g} GHz; TDP "
            + (f"{config.power.tdp_w:g} W" if config.power.tdp_w else "not set")
            + f"; power gating: {config.power.gating}")
    ops = [[name, f"{pj:.4g}"] for name, pj in table_rows(energy_table(config))]
    return "\n\n".join([
        head,
        format_table(["component", "area mm² (est.)", "static W"], rows),
        format_table(["dynamic energy", "pJ"], ops),
        "Derived from the 45 nm reference table unless set in the config's energy section "
        "(DESIGN.md, 'Energy and power')."])


def _narrow_peaks(config: Any) -> str:
    from archsim.config.model import NARROW_DTYPES

    rates = config.core.matrix.rates
    return "/".join(f"{config.peak_ops(d) / 1e12:.3g}" if getattr(rates, d) else "-"
                    for d in NARROW_DTYPES)


def _links(config: Any) -> str:
    link = config.interconnect
    if link is None:
        return "-"
    return (f"{link.topology} {link.links_per_chip}x {link.link_bandwidth_gb_per_s:g} GB/s")


def workloads(args: argparse.Namespace) -> int:
    from archsim.app.catalog import BUILTINS, FAMILIES

    width = max(map(len, BUILTINS))
    for name, builtin in BUILTINS.items():
        print(f"{name:<{width}}  {builtin.description}")
    print("\nSized workloads (the sizes in the name, float32, batch 1 unless named):")
    width = max(len(f.example) for f in FAMILIES)
    for family in FAMILIES:
        print(f"{family.example:<{width}}  {family.summary}")
    return 0


# ---------------------------------------------------------------- show / report


def show(args: argparse.Namespace) -> int:
    from compiler.ir.text import load_program, print_program
    from compiler.ir.verify import verify

    path = Path(args.program)
    if not path.is_file():
        raise ArchsimError(f"no such program file: {path} (expected a saved .rbln program)")
    program = load_program(path)
    # A program compiled for one preset is checked against that preset unless the
    # user names another: 'valid for atom' about a tiny program would be wrong.
    config = program_config(args, program, args.program)
    print(print_program(program), end="")
    try:
        verify(program, config)
    except VerifyError as exc:
        from archsim.app.pipeline import program_config_error

        raise program_config_error(program, config, exc.problems) from None
    engines = sorted({c.engine for c in program.commands})
    print(f"\n# {len(program.commands)} commands on {len(engines)} engines, "
          f"{len(program.tensors)} DRAM tensors; valid for {config.name}")
    return 0


def report(args: argparse.Namespace) -> int:
    import reports

    path = Path(args.result)
    if not path.is_file():
        raise ArchsimError(f"no such result file: {path}")
    try:
        data = reports.read_json(path)
    except (UnicodeDecodeError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
        raise ArchsimError(f"{path}: not an archsim result.json ({_first_line(exc)})") from None
    out = output_dir(args.out) if args.out else None
    try:
        text = [reports.summary(data), reports.op_table(data, top=args.top),
                reports.critical_path_text(data, max_rows=12)]
    except ValueError as exc:  # e.g. a trace whose timeline an edit broke
        raise ArchsimError(f"{path}: not a consistent archsim result "
                           f"({_first_line(exc)})") from None
    print("\n\n".join(text))
    if out is not None:
        reports.write_html(data, out / "report.html")
        reports.save_figures(data, out)
        print(f"\nwrote {out}/report.html and figures")
    return 0
