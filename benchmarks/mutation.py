"""Mutation score of core modules, each against its own tests only.

Runs mutmut (the ``mutation`` extra: ``pip install -e .[mutation]``) once per module in a
scratch copy of the project, so the worktree gets no ``mutants/`` directory and one
module's run cannot see another's results. A module is mutated and then tested only by
the test files listed beside it: a mutant that some far-away end-to-end test happens to
catch still counts as surviving, because the module's own tests did not say which part
broke.

    python benchmarks/mutation.py                         # every module below
    python benchmarks/mutation.py archsim/bandwidth.py    # one
    python benchmarks/mutation.py --survivors             # also print each survivor's diff
    python benchmarks/mutation.py archsim/simulator.py --only '*_drain*'   # some mutants

Prints killed / survived / timeout / no-tests per module and the score
(killed + timeout) / all mutants run (``--only`` runs the mutants whose names match
its patterns, e.g. one function's, so a large module can be scored in parts). Surviving,
untested and timed-out mutants are listed by name;
BENCHMARKS.md records, for each, the test that now kills it or why it is equivalent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MODULES: dict[str, list[str]] = {
    "archsim/bandwidth.py": [
        "tests/archsim/test_bandwidth_edges.py",
        "tests/archsim/test_bandwidth_sharing.py",
        "tests/archsim/test_flow_network.py",
        "tests/archsim/test_timing.py",
    ],
    "archsim/timing.py": [
        "tests/archsim/test_cost_key_fields.py",
        "tests/compiler/test_cost_keys.py",  # equal keys cost the same, over real programs
        "tests/archsim/test_timing.py",
        "tests/archsim/test_precision_and_vector_bandwidth.py",
        "tests/archsim/test_weight_buffers.py",
        "tests/archsim/test_simulator.py",
    ],
    "archsim/simulator.py": [
        "tests/archsim/test_simulator_mutants.py",
        "tests/archsim/test_simulator.py",
        "tests/archsim/test_timing.py",
        "tests/archsim/test_functional.py",
        "tests/archsim/test_weight_buffers.py",  # back-to-back matmuls save their fill
        "tests/archsim/test_bandwidth_sharing.py",  # transfers in flight share links
    ],
    "archsim/matrix.py": [  # the systolic arrays' closed forms
        "tests/archsim/test_matrix_mutants.py",
        "tests/archsim/test_timing.py",
        "tests/archsim/test_weight_buffers.py",
        "tests/archsim/test_precision_and_vector_bandwidth.py",
        "tests/archsim/test_agreement.py",  # against SCALE-Sim's own cycle counts
    ],
    "archsim/plan.py": [
        "tests/archsim/test_archsim_plan_mutants.py",
        "tests/archsim/test_simulator_mutants.py",
        "tests/archsim/test_simulator.py",
        "tests/archsim/test_timing.py",
        "tests/archsim/test_functional.py",
        "tests/archsim/test_replay.py",  # the bound program and its dependency order
    ],
    "compiler/kernels/matmul.py": [
        "tests/quant/test_dequant_placement.py",  # B tiles dequantized on the vector unit
        "tests/compiler/test_matmul_mutants.py",
        "tests/compiler/test_matmul_tiling.py",
        "tests/compiler/test_matmul_panels.py",
        "tests/compiler/test_matmul_staging.py",
        "tests/quant/test_quantized.py",
        "tests/quant/test_int4_input_path.py",  # weights dequantized on the way in
        # batched, broadcast and transposed operands, against torch
        "tests/compiler/test_lowerings.py::test_matmul_family",
    ],
    "compiler/kernels/matmul_dequant.py": [
        "tests/quant/test_dequant_placement.py",  # the vector unit's tiles
        "tests/quant/test_dequantize_op.py",
        "tests/quant/test_int4_input_path.py",
        "tests/quant/test_int4.py",
        "tests/quant/test_exported_quantized.py",  # torchao's float8 weight-only
    ],
    "compiler/kernels/matmul_staging.py": [
        "tests/compiler/test_matmul_staging.py",
    ],
    "compiler/kernels/conv_depthwise.py": [  # depthwise convolutions on the vector unit
        "tests/compiler/test_conv_depthwise.py",
    ],
    "torch_bridge/eager.py": [
        "tests/torch_bridge/test_eager_mutants.py",
        "tests/torch_bridge/test_eager_accounting.py",
        "tests/torch_bridge/test_eager_compiled.py",
        "tests/torch_bridge/test_runtime_overhead.py",
    ],
    "serving/plan.py": [
        "tests/serving/test_plan_mutants.py",
        "tests/serving/test_serving_bounds.py",
        "tests/serving/test_serving_plan.py",
        "tests/quant/test_llm_weights.py",
    ],
    "serving/roofline.py": [
        "tests/serving/test_roofline_mutants.py",
        "tests/serving/test_serving_bounds.py",
        "tests/serving/test_serving_plan.py",
        "tests/serving/test_serving_run.py",
        "tests/quant/test_llm_weights.py",
    ],
    "serving/scheduler.py": [  # request-level serving: admission, batching, preemption
        "tests/serving/test_serve_mutants.py",
        "tests/serving/test_serve_engine.py",
        "tests/serving/test_serve_sim.py",
        "tests/serving/test_serve_capacity.py",
    ],
    "serving/kv_cache.py": [
        "tests/serving/test_serve_mutants.py",
        "tests/serving/test_serve_engine.py",
        "tests/serving/test_serve_sim.py",
        "tests/serving/test_serve_capacity.py",
    ],
    "serving/metrics.py": [
        "tests/serving/test_serve_mutants.py",
        "tests/serving/test_serve_engine.py",
        "tests/serving/test_serve_sim.py",
        "tests/serving/test_serve_capacity.py",
    ],
    "reports/critical_path.py": [
        "tests/reports/test_reports_critical_path.py",
        "tests/reports/test_reports_extended.py",  # the path through extended spans
        "tests/reports/test_reports_tie_rules.py",
    ],
    "compiler/ir/verify.py": [
        "tests/compiler/ir/test_verify_mutants.py",
        "tests/compiler/ir/test_verify.py",
        "tests/compiler/ir/test_verify_shortcuts.py",
        "tests/compiler/ir/test_strided_sram.py",
    ],
    "compiler/ir/verify_ops.py": [
        "tests/compiler/ir/test_muladd_mutants.py",  # the multiply-add's checks
        "tests/quant/test_dequantize_op.py",  # the vector unit's dequantize command
        "tests/quant/test_int4_input_path.py",  # the dequantizing matmul's checks
        "tests/compiler/ir/test_verify_mutants.py",
        "tests/compiler/ir/test_verify.py",
        "tests/compiler/ir/test_verify_shortcuts.py",
        "tests/compiler/ir/test_strided_sram.py",
    ],
    "compiler/ir/verify_order.py": [
        "tests/compiler/ir/test_verify_order_mutants.py",
        "tests/compiler/ir/test_verify.py",
        "tests/compiler/ir/test_verify_shortcuts.py",
        "tests/compiler/ir/test_strided_sram.py",
    ],
    "compiler/layout.py": [  # channels-last images folded into convolutions
        "tests/compiler/test_channels_last_pass.py",
        "tests/compiler/test_channels_last.py",
    ],
    "compiler/layout_regions.py": [  # activations NHWC between convolutions
        "tests/compiler/test_channels_last_regions.py",
    ],
    "compiler/residency.py": [  # intermediate tensors in shared SRAM
        "tests/compiler/test_residency_mutants.py",
        "tests/compiler/test_residency.py",
    ],
    "torch_bridge/numerics.py": [  # eager's first-call check, float64 judging rounding
        "tests/torch_bridge/test_numerics.py",
        "tests/app/test_pipeline.py::TestNumerics",
        "tests/torch_bridge/test_compile_backend.py",
    ],
    "compiler/kernels/pool.py": [  # pooling's tiles per core and one-pass tap reduction
        "tests/compiler/test_pool_mutants.py",
        "tests/compiler/test_pool_tiles.py",
        "tests/compiler/test_pool_padding.py",
        "tests/compiler/test_lowerings.py::test_pooling",
        "tests/compiler/test_lowerings.py::"
        "test_avg_pool_excluding_padding_without_ceil_mode_matches_torch",
        "tests/compiler/test_reshaped_inputs.py",
    ],
    "compiler/kernels/attention_items.py": [  # small attention items in groups
        "tests/compiler/test_attention_items_mutants.py",
        "tests/compiler/test_attention_batched_items.py",
        "tests/compiler/test_attention_small_steps.py",
    ],
    "compiler/kernels/packed_runs.py": [  # int4 packed weights' DMA commands
        "tests/quant/test_packed_runs_mutants.py",
        "tests/quant/test_int4_strided_loads.py",
        "tests/quant/test_int4.py",
        "tests/quant/test_int4_input_path.py",
    ],
    # the multiply-add: run each with --only on its functions (see BENCHMARKS.md)
    "compiler/ir/text.py": [
        "tests/compiler/ir/test_text.py",
    ],
    "compiler/ir/text_parse.py": [
        "tests/compiler/ir/test_muladd_mutants.py",
        "tests/compiler/ir/test_text.py",
        "tests/compiler/ir/test_verify.py",
    ],
    "archsim/vector.py": [
        "tests/archsim/test_vector_mutants.py",
        "tests/archsim/test_muladd.py",
        "tests/archsim/test_precision_and_vector_bandwidth.py",
        "tests/archsim/test_timing.py",
    ],
    "archsim/functional_steps.py": [
        "tests/archsim/test_vector_mutants.py",
        "tests/archsim/test_muladd.py",
        "tests/compiler/test_conv_depthwise.py",
    ],
    "compiler/ir/verify_races.py": [
        "tests/compiler/ir/test_verify.py",
        "tests/compiler/ir/test_verify_shortcuts.py",
        "tests/compiler/ir/test_verify_race_history.py",
    ],
    "compiler/kernels/conv_arrays.py": [  # a conv tile over a core's arrays
        "tests/compiler/test_conv_k_split.py",
    ],
    "torch_bridge/float64_reference.py": [  # quantized matmuls' float64 reference
        "tests/torch_bridge/test_float64_reference.py",
    ],
    "compiler/kernels/matmul_vector.py": [  # the vector units' share of a decode GEMV
        "tests/quant/test_vector_share.py",
    ],
}
"""Module -> the test files that are its own tests."""

PACKAGES = ("archsim", "compiler", "reports", "torch_bridge", "serving")
"""Copied into the scratch project: the tests import across packages."""


TIMEOUTS: dict[str, tuple[float, float]] = {"archsim/simulator.py": (3.0, 5.0),
                                            "archsim/plan.py": (3.0, 5.0),
                                            "compiler/kernels/pool.py": (3.0, 5.0)}
"""Per module, mutmut's ``(timeout_multiplier, timeout_constant)`` when not its defaults
(15, 1 s): a mutant times out (and counts as caught) after (its tests' time + constant)
x multiplier seconds of wall time (twice that of CPU time). The defaults give a mutant
that loops 15 times its tests' time, and most of ``archsim/simulator.py``'s run (over 30
min) was spent waiting on its ~20 looping mutants. A lower multiplier alone (x 3, 1 s)
timed out mutants that only ran slowly on the loaded machine; the constant keeps every
limit above 15 s. The timed-out mutants are listed: check them (``--survivors`` shows
their diffs) before trusting a score."""


FRESH_CACHES = "mutation_fresh_caches"
"""A pytest plugin written into the scratch project: before each test it empties the
in-process caches of compiled schedules, Triton kernels, matmul tilings and eager ops.
mutmut forks each mutant's test run from a process that has already run the tests, so
without it a test finds the schedule the unmutated code compiled, the mutated kernel
code never runs and every mutant of ``compiler/kernels/matmul.py`` survives ("Unable to
force test failures"). It also forgets which host fallbacks were already warned of
(once per process): a test that expects the warning fails when an earlier run in the
same process gave it (``tests/torch_bridge/test_eager_compiled.py``)."""

FRESH_CACHES_PLUGIN = '''"""Empty archsim's in-process caches before each test (benchmarks/mutation.py)."""
import sys

import pytest


@pytest.fixture(autouse=True)
def _fresh_caches():
    for name in ("compiler.compile", "compiler.triton", "torch_bridge.eager"):
        module = sys.modules.get(name)
        if module is not None:
            module.clear_cache()
    fallback = sys.modules.get("torch_bridge.fallback")
    if fallback is not None:  # fallback warnings are given once per process
        fallback._warned_ops.clear()
    cost = sys.modules.get("compiler.cost")
    clear_tilings = getattr(getattr(cost, "choose_matmul_tiling", None), "cache_clear", None)
    if clear_tilings is not None:  # (not when cost.py itself is mutated)
        clear_tilings()
    yield
'''


ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""mutmut forks each mutant's tests from a process that has run them once; a forked
child whose parent had started torch's OpenMP thread pool hangs at its first parallel
torch op (libgomp is not fork-safe). Those hangs counted as timeouts, that is as caught:
67 of ``archsim/simulator.py``'s 321 mutants, killed or not. With one thread torch
starts no pool."""


def mutmut_config(module: str, tests: list[str]) -> str:
    """The ``[tool.mutmut]`` section for one module's run."""
    def toml_list(items: list[str]) -> str:
        return "[" + ", ".join(json.dumps(item) for item in items) + "]"

    return (
        "\n[tool.mutmut]\n"
        f"source_paths = {toml_list(list(PACKAGES))}\n"
        f"only_mutate = {toml_list([module])}\n"
        f"pytest_add_cli_args_test_selection = {toml_list(tests)}\n"
        f'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "{FRESH_CACHES}", "-x"]\n'
        f"timeout_multiplier = {TIMEOUTS.get(module, (15.0, 1.0))[0]}\n"
        f"timeout_constant = {TIMEOUTS.get(module, (15.0, 1.0))[1]}\n"
        f'also_copy = ["tests", "pyproject.toml", "{FRESH_CACHES}.py"]\n'
    )


def run_module(module: str, tests: list[str], workers: int, survivors: bool,
               only: list[str]) -> dict:
    """Mutate ``module`` in a scratch copy, run mutmut (on the mutants matching ``only``
    when given), return its counts."""
    with tempfile.TemporaryDirectory(prefix="archsim-mutation-") as scratch:
        work = Path(scratch)
        for package in PACKAGES:
            shutil.copytree(ROOT / package, work / package,
                            ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(ROOT / "tests", work / "tests",
                        ignore=shutil.ignore_patterns("__pycache__"))
        pyproject = (ROOT / "pyproject.toml").read_text()
        (work / "pyproject.toml").write_text(pyproject + mutmut_config(module, tests))
        (work / f"{FRESH_CACHES}.py").write_text(FRESH_CACHES_PLUGIN)
        mutmut = [sys.executable, "-m", "mutmut"]
        start = time.perf_counter()
        run = subprocess.run([*mutmut, "run", "--max-children", str(workers), *only], cwd=work,
                             capture_output=True, text=True, env={**os.environ, **ONE_THREAD})
        seconds = time.perf_counter() - start
        if run.returncode != 0:
            sys.stderr.write(run.stdout[-4000:] + run.stderr[-4000:])
            raise SystemExit(f"mutmut failed on {module} (exit {run.returncode})")
        subprocess.run([*mutmut, "export-cicd-stats"], cwd=work, check=True,
                       capture_output=True)
        stats = json.loads((work / "mutants" / "mutmut-cicd-stats.json").read_text())
        # with --only, mutants not run are neither caught nor surviving: leave them out
        stats["total"] = sum(stats[kind] for kind in ("killed", "timeout", "survived",
                                                       "no_tests", "suspicious", "segfault"))
        results = subprocess.run([*mutmut, "results"], cwd=work, check=True,
                                 capture_output=True, text=True).stdout
        surviving = [line.split(":")[0].strip() for line in results.splitlines()
                     if line.strip().endswith("survived")]
        untested = [line.split(":")[0].strip() for line in results.splitlines()
                    if line.strip().endswith("no tests")]
        timed_out = [line.split(":")[0].strip() for line in results.splitlines()
                     if line.strip().endswith("timeout")]
        diffs = {}
        if survivors:
            for name in surviving + untested + timed_out:
                diffs[name] = subprocess.run([*mutmut, "show", name], cwd=work, check=True,
                                             capture_output=True, text=True).stdout
    return {"module": module, "seconds": seconds, "stats": stats,
            "survivors": surviving, "untested": untested, "timed_out": timed_out,
            "diffs": diffs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", default=list(MODULES),
                        help="modules to mutate (default: all of MODULES)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--survivors", action="store_true",
                        help="print each surviving mutant's diff")
    parser.add_argument("--only", action="append", default=[], metavar="PATTERN",
                        help="run only the mutants whose names match this fnmatch pattern "
                             "(e.g. '*_drain*'; repeatable)")
    args = parser.parse_args()
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        raise SystemExit(f"no tests listed for {unknown}; known: {list(MODULES)}")
    print(f"# mutation score, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, {args.workers} workers, "
          f"python {platform.python_version()}, {time.strftime('%Y-%m-%d')}")
    for module in args.modules:
        result = run_module(module, MODULES[module], args.workers, args.survivors,
                            args.only)
        stats = result["stats"]
        caught = stats["killed"] + stats["timeout"]
        score = caught / stats["total"] if stats["total"] else float("nan")
        print(f"{module}: score {score:.1%} ({caught}/{stats['total']}) "
              f"killed {stats['killed']} timeout {stats['timeout']} "
              f"survived {stats['survived']} no-tests {stats['no_tests']} "
              f"in {result['seconds']:.0f} s")
        for name in result["untested"]:
            print(f"  no tests: {name}")
            if name in result["diffs"]:
                print("    " + result["diffs"][name].replace("\n", "\n    "))
        for name in result["timed_out"]:
            print(f"  timeout: {name}")
            if name in result["diffs"]:
                print("    " + result["diffs"][name].replace("\n", "\n    "))
        for name in result["survivors"]:
            print(f"  survived: {name}")
            if name in result["diffs"]:
                print("    " + result["diffs"][name].replace("\n", "\n    "))


if __name__ == "__main__":
    main()
