"""``archsim llm``: how fast a language model serves on one chip or many: TTFT, TPOT,
tokens/s and memory per chip, against the rooflines. See :mod:`serving`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

_DTYPES = ("bf16", "f16", "f32")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """What ``archsim llm`` and ``archsim serve`` share: MODEL, the hardware, how the
    model is split over chips and the format of its weights."""
    from archsim.cli.main import positive
    from archsim.config import DEFAULT_PRESET
    from serving.plan import ACTIVATIONS, DEFAULT_GROUP_SIZE, INT4_GROUP_SIZES, WEIGHT_BYTES
    from serving.spec import bundled_models

    p.add_argument("model", metavar="MODEL",
                   help=f"a bundled model ({', '.join(bundled_models())}), a transformers "
                        f"config.json or a model directory holding one")
    p.add_argument("--config", "-c", default=DEFAULT_PRESET, metavar="NAME",
                   help=f"preset name or YAML file (default: {DEFAULT_PRESET})")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   dest="overrides", help="override a config field by dotted path, e.g. "
                                          "interconnect.link_bandwidth_gb_per_s=100 (repeatable)")
    p.add_argument("--chips", type=positive, default=None,
                   help="chips in all (default tp x pp); sets whichever of --tp/--pp is "
                        "missing (alone: --tp)")
    p.add_argument("--tp", type=positive, default=None, help="tensor-parallel chips per stage")
    p.add_argument("--pp", type=positive, default=None, help="pipeline stages")
    p.add_argument("--collectives", choices=("auto", "bidir_ring", "ring", "tree"),
                   default="auto", help="all-reduce algorithm for --tp (default auto: per "
                                        "collective the cheapest by its alpha-beta cost, "
                                        "a tree for small messages, a bidirectional ring "
                                        "for large ones)")
    p.add_argument("--weights", choices=tuple(WEIGHT_BYTES), default="",
                   help="quantized matmul weights: int8 (weight-only: one byte each, a "
                        "scale per output channel); int4 (weight-only: half a byte each, a "
                        "scale and zero point per --group-size inputs, torch's CPU int4 "
                        "op); both dequantized where core.matrix.dequant says (the arrays' "
                        "input path, or the vector unit: --set core.matrix.dequant=vector); "
                        "fp8 (e4m3 weights with a scale per output channel, "
                        "activations quantized to e4m3 per token, torch._scaled_mm at the "
                        "arrays' fp8 rate); default: --dtype")
    p.add_argument("--group-size", type=int, default=None, metavar="N",
                   help=f"int4 inputs per scale and zero point: "
                        f"{', '.join(map(str, INT4_GROUP_SIZES))} (default "
                        f"{DEFAULT_GROUP_SIZE}); --weights int4 only")
    p.add_argument("--activations", choices=tuple(ACTIVATIONS), default=None,
                   help="quantize the matmuls' activations per token on the vector unit: "
                        "int8 with --weights int8 (W8A8: torch._int_mm at the arrays' "
                        "int8 rate, both scales in the epilogue); fp8 with --weights fp8 "
                        "(what --weights fp8 does anyway)")


def weight_format_text(args: argparse.Namespace) -> str:
    """The ``Request.weights`` string of ``--weights``, ``--group-size`` and
    ``--activations`` (a ModelConfigError for a combination that cannot run)."""
    from serving.plan import check_weight_options, weight_format

    if not args.weights:
        check_weight_options("", args.group_size, args.activations)
        return ""
    return weight_format(args.weights, args.group_size, args.activations).text


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``llm`` on the subparsers of ``archsim``."""
    from archsim.cli.main import output_file, positive

    p = sub.add_parser(
        "llm", help="LLM serving: prefill and decode with a KV cache, on one chip or many",
        description="Simulate serving MODEL: a prefill of --prefill prompt tokens for "
                    "--batch sequences, then --decode generated tokens with a KV cache. "
                    "Prints TTFT, TPOT, tokens/s and memory per chip next to the "
                    "rooflines. Each distinct layer shape is compiled and simulated once on "
                    "one chip (weights are never allocated) and the identical layers are "
                    "composed; with --tp/--pp, collectives and stage-to-stage sends are "
                    "simulated on the chip-to-chip links.")
    add_model_arguments(p)
    p.add_argument("--batch", type=positive, default=1,
                   help="sequences served together (default 1)")
    p.add_argument("--prefill", type=positive, default=128,
                   help="prompt tokens per sequence (default 128)")
    p.add_argument("--decode", type=int, default=16,
                   help="generated tokens per sequence, one decode step each (default 16)")
    p.add_argument("--dtype", choices=_DTYPES, default="bf16", help="weights and activations "
                                                                     "(default bf16)")
    p.add_argument("--kv-dtype", choices=(*_DTYPES, "int8", "fp8"), default=None,
                   help="KV cache (default: --dtype); int8 or fp8 (e4m3): quantized on "
                        "write with a scale per token and head, read as stored by the "
                        "attention kernel")
    p.add_argument("--micro-batches", type=positive, default=None,
                   help="micro-batches through the pipeline (default: min(batch, pp))")
    p.add_argument("--json", metavar="FILE", type=output_file, help="also write the results as JSON to FILE")
    p.add_argument("--trace", metavar="FILE", type=output_file,
                   help="also write a Perfetto trace (one track group per chip) to FILE")
    p.set_defaults(handler=run)
    return p


def parallelism(args: argparse.Namespace) -> Any:
    from archsim.errors import ModelConfigError
    from serving.plan import Parallelism

    tp, pp, chips = args.tp, args.pp, args.chips
    for flag, given in (("--tp", tp), ("--pp", pp)) if (tp is None) != (pp is None) else ():
        if chips is not None and given is not None and chips % given:
            raise ModelConfigError(f"--chips {chips} is not a multiple of {flag} {given}")
    if chips is not None:  # the missing factor follows from --chips
        if tp is None:
            tp = chips // pp if pp and chips % pp == 0 else (chips if pp is None else None)
        elif pp is None and tp > 0 and chips % tp == 0:
            pp = chips // tp
    tp, pp = 1 if tp is None else tp, 1 if pp is None else pp
    if chips is not None and tp * pp != chips:
        raise ModelConfigError(f"--chips {chips} is not --tp {tp} x --pp {pp} = {tp * pp}")
    if args.micro_batches is not None and args.micro_batches > 1 and pp == 1:
        raise ModelConfigError(f"--micro-batches {args.micro_batches} needs --pp > 1 (they "
                               f"overlap pipeline stages; on one stage they only split "
                               f"the batch into slower steps)")
    micro = args.micro_batches if args.micro_batches is not None else min(args.batch, pp)
    return Parallelism(tp, pp, micro)


def run(args: argparse.Namespace) -> int:
    from archsim.cli.commands import resolve_config
    from reports.llm import llm_table, write_llm_json, write_llm_trace
    from serving.plan import Request
    from serving.run import serve

    config = resolve_config(args.config, args.overrides)
    request = Request(args.batch, args.prefill, args.decode, args.dtype,
                      args.kv_dtype or args.dtype, weight_format_text(args))
    result = serve(args.model, config, request, parallelism(args), args.collectives)
    print(llm_table(result))
    if args.json:
        write_llm_json(result, args.json)
        print(f"wrote {args.json}", file=sys.stderr)
    if args.trace:
        write_llm_trace(result, args.trace)
        print(f"wrote {args.trace}", file=sys.stderr)
    return 0
