"""Argument parsing and dispatch for ``archsim``; each subcommand lives in
:mod:`archsim.cli.commands`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from archsim.errors import ArchsimError

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


_DTYPE_SPELLINGS = {"int8": "i8", "float32": "f32", "float16": "f16", "bfloat16": "bf16"}
"""Other names ``--dtype`` takes for its choices (torch's and the issue tracker's)."""


def positive(text: str) -> int:
    """argparse type: an integer >= 1 (argparse prints the one-line error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def output_file(text: str) -> str:
    """argparse type: a file that can be written (its directory exists), checked before
    anything is simulated so a long run is not lost to a typo in ``--json``."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a directory; give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text}: directory {str(parent)!r} is not writable")
    return text


def build_parser() -> argparse.ArgumentParser:
    from archsim.cli import commands
    from archsim.cli.kwargs import kwarg
    from archsim.config import DEFAULT_PRESET

    parser = argparse.ArgumentParser(
        prog="archsim",
        description="Cycle-approximate NPU simulator: run models and scheduled programs on "
                    "configurable NPUs and see latency, utilization and what limited them.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def config_args(p: argparse.ArgumentParser, many: bool = False) -> None:
        if many:
            p.add_argument("--config", "-c", action="append", required=True, metavar="NAME",
                           help="preset name or YAML file; repeat to compare")
        else:  # None: a saved program's target, else the default preset (commands.py)
            p.add_argument("--config", "-c", default=None, metavar="NAME",
                           help=f"preset name or YAML file (default: a .rbln program's "
                                f"target, the preset it was compiled for; else "
                                f"{DEFAULT_PRESET}; see 'archsim configs')")
        p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                       dest="overrides",
                       help="override a config field by dotted path, e.g. "
                            "core.matrix.rows=256 (repeatable)")

    def workload_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("model", metavar="MODEL",
                       help="built-in or sized workload (see 'archsim workloads'), a .py file, "
                            "a .rbln program, or a transformers config.json (or a model "
                            "bundled with 'archsim llm')")
        p.add_argument("--batch", type=positive, default=None,
                       help="batch size (built-in models that take it, transformers "
                            "configs; refused elsewhere)")
        p.add_argument("--seq", type=positive, default=None,
                       help="sequence length (built-in language models, transformers "
                            "configs; refused elsewhere), at most the model's positions "
                            "(see 'archsim workloads')")
        p.add_argument("--layers", type=positive, default=None,
                       help="number of layers (built-in transformer models, transformers "
                            "configs; refused elsewhere)")
        p.add_argument("--dtype", choices=("f32", "f16", "bf16", "i8"), default=None,
                       type=lambda name: _DTYPE_SPELLINGS.get(name, name),
                       help="model dtype: built-in models are built in it, a model file's "
                            "weights and inputs are converted to it (default: f32 for "
                            "functional runs, the matrix engine's native dtype for "
                            "performance-only; a model file as it is); i8 (or int8), "
                            "built-in gemm only: int8 x int8 -> int32, at the arrays' "
                            "int8 rate")
        p.add_argument("--perf-only", action="store_true",
                       help="performance-only: shapes only, no data (automatic for large "
                            "models)")
        p.add_argument("--all-layers", action="store_true",
                       help="performance-only runs: simulate every layer of a stack of "
                            "identical layers and every output tile of a large final "
                            "matmul (default: the first 3 layers or tile panels, the "
                            "others extended from them)")
        p.add_argument("--quiet", "-q", action="store_true",
                       help="print only the summary line (compare: one per config), no "
                            "progress (for scripts)")
        p.add_argument("--kwarg", action="append", default=[], type=kwarg,
                       metavar="NAME=VALUE", dest="kwargs",
                       help="keyword argument for a model file's forward call, typed: "
                            "true/false, none, ints, floats, JSON, else text; e.g. "
                            "--kwarg use_cache=true (repeatable)")

    run = sub.add_parser("run", help="simulate a model or program and print the report",
                         description="Simulate MODEL on one NPU config and print a summary, "
                                     "the top ops and the critical path.")
    workload_args(run)
    config_args(run)
    run.add_argument("--top", type=positive, default=10, help="ops to list (default 10)")
    run.add_argument("--out", metavar="DIR",
                     help="also write summary.txt, trace.json (Perfetto), result.json, "
                          "report.html and figures to DIR")
    run.add_argument("--json", metavar="FILE", type=output_file, help="write the result as JSON to FILE")
    run.add_argument("--save-program", metavar="FILE", type=output_file,
                     help="write the scheduled program the run simulated as text (.rbln) "
                          "to FILE: 'archsim show FILE' prints and verifies it, 'archsim "
                          "run FILE' simulates it again (of a run whose layers or tiles "
                          "were extended, the simulated part)")
    run.add_argument("--list", action="store_true", help=argparse.SUPPRESS)
    run.set_defaults(handler=commands.run)

    compare = sub.add_parser("compare", help="simulate one model on several configs",
                             description="Simulate MODEL on each --config and print a "
                                         "side-by-side table.")
    workload_args(compare)
    config_args(compare, many=True)
    compare.add_argument("--out", metavar="DIR", help="write a Pareto plot and per-config "
                                                      "results to DIR")
    compare.set_defaults(handler=commands.compare)

    from archsim.cli import llm, serve, sweep, validate

    sweep.add_parser(sub)
    validate.add_parser(sub)
    llm.add_parser(sub)
    serve.add_parser(sub)

    configs = sub.add_parser("configs", help="list hardware presets with their peak numbers")
    configs.add_argument("--explain", action="store_true",
                         help="print the accepted range (numbers) or values (choices) of every "
                              "config field instead")
    configs.add_argument("--energy", metavar="PRESET",
                         help="print one preset's (or YAML file's) area and static power "
                              "per component and its per-operation energies instead")
    configs.set_defaults(handler=commands.configs)

    workloads = sub.add_parser("workloads", help="list the built-in workloads")
    workloads.set_defaults(handler=commands.workloads)

    show = sub.add_parser("show", help="print and verify a saved .rbln program")
    show.add_argument("program", metavar="PROGRAM.rbln")
    config_args(show)
    show.set_defaults(handler=commands.show)

    report = sub.add_parser("report", help="re-render the report of a saved result.json")
    report.add_argument("result", metavar="RESULT.json")
    report.add_argument("--top", type=positive, default=10, help="ops to list (default 10)")
    report.add_argument("--out", metavar="DIR", help="write HTML and figures to DIR")
    report.set_defaults(handler=commands.report)
    return parser


QUIET_LOGGERS = ("torchao", "torch.utils._pytree")
"""Loggers whose warnings a command's user cannot act on: torchao (imported by
transformers when installed) warns that its CUDA and mxfp8 extensions fail to load on a
CPU-only machine, and registers enums through a pytree API torch deprecates; four lines
on stderr before every transformers model's report."""


def main(argv: Sequence[str] | None = None, *, exiting: bool = False) -> int:
    """Run one command; ``exiting``: the process ends after it (the console script), so
    commands need not leave Python's collector a clean heap."""
    # torch.export's own use of a deprecated pytree API; nothing a user can act on
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.exiting = exiting
    try:
        return args.handler(args)
    except ArchsimError as exc:
        print(f"archsim: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("archsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `archsim configs | head`: the reader left; not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return EXIT_OK
