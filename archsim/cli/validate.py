"""``archsim validate``: simulated against measured cycles for the rows of a CSV file.

See :mod:`reports.validation` for the file format and :mod:`reports.validation_workloads`
for the workload names.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``validate`` on the subparsers of ``archsim``."""
    from archsim.cli.main import output_file
    from archsim.config import DEFAULT_PRESET

    p = sub.add_parser(
        "validate", help="compare simulated with measured figures from a CSV file "
                         "(kernel cycles or LLM serving)",
        description="Simulate every workload of DATA.csv (a 'workload' column and one "
                    "column of measured cycles named '*cycles') on --config, performance-"
                    "only in float32 inputs, and print measured vs simulated cycles per "
                    "row, the signed error, the roofline bound and the mean absolute "
                    "error. Workload names: gemm_MxKxN, conv_BxHxWxCINxCOUTxKxSTRIDExPAD, "
                    "layernorm_NxD, softmax_NxM, attention_HxSxD, bert_base, bert_large, "
                    "bert_xlarge, resnet18, resnet50. A file of LLM serving rows (columns model, "
                    "config, chips, tp, pp, batch, prefill, decode, dtype, kv_dtype, "
                    "metric, measured; metric: ttft_ms, decode_step_ms or tokens_per_s) "
                    "runs each row as archsim llm does, on its config column (or "
                    "--config for all).")
    p.add_argument("data", metavar="DATA.csv", help="measurements, e.g. "
                   "benchmarks/data/tpuv3-calibration.csv (in archsim's repository)")
    p.add_argument("--config", "-c", default=None, metavar="NAME",
                   help=f"preset name or YAML file (default: {DEFAULT_PRESET}, or each LLM "
                        f"row's config; the TPU v3 measurements are for tpu-v3)")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   dest="overrides", help="override a config field by dotted path, e.g. "
                                          "core.matrix.f32_precision=high (repeatable)")
    p.add_argument("--workload", "-w", action="append", default=[], metavar="NAME",
                   help="only this row of DATA.csv (repeatable)")
    p.add_argument("--json", metavar="FILE", type=output_file,
                   help="also write the rows and the mean absolute error as JSON to FILE")
    p.set_defaults(handler=run)
    return p


def run(args: argparse.Namespace) -> int:
    from archsim.app.validate import is_llm_file, validate, validate_serving
    from archsim.cli.commands import resolve_config
    from archsim.config import DEFAULT_PRESET
    from archsim.errors import ArchsimError
    from reports.validation import write_json

    if is_llm_file(args.data):
        if args.workload:
            raise ArchsimError("--workload picks rows of a kernel measurements file; LLM "
                               "rows have no workload names")
        report: Any = validate_serving(
            args.data, lambda name: resolve_config(args.config or name, args.overrides))
    else:
        config = resolve_config(args.config or DEFAULT_PRESET, args.overrides)
        report = validate(args.data, config, args.workload or None)
    print(report.table())
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0
