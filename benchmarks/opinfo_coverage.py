"""Eager coverage over PyTorch's OpInfo database: for every op in ``op_db`` with float32
samples, run up to ``--samples`` of them on ``"npu"`` and on CPU and count

- **match**: every sample gives CPU's values (shapes only for ``empty``-like ops) (same shapes, NaNs where CPU has them, within
  the op's float32 tolerance, default 1e-4 relative and 1e-5 absolute), or fails on npu
  exactly where it fails on CPU;
- **no host work**: ``torch_bridge.profile()`` lists no host work for any sample (reading
  a value back with ``.item()`` does not count).

Ops of the linalg, fft and special families are counted apart (the issue's bar for host
work leaves them out). Run: ``python benchmarks/opinfo_coverage.py [--samples 3]
[--limit N] [--list]``; about 5-10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import Counter
from typing import Any

import torch

import torch_bridge
from torch_bridge import numerics, runtime

EXCLUDED_FAMILIES = ("linalg", "fft", "special")
UNINITIALIZED = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                 "empty_permuted")
"""Ops whose values are uninitialized memory: only shapes and dtypes are compared (as
PyTorch's own CPU-comparison test skips them)."""


def _to(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    return value


def _same(got: Any, want: Any, values: bool = True) -> bool:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != want.shape \
                or got.dtype != want.dtype:
            return False
        if not values:
            return True
        got = got.cpu()
        if want.is_floating_point() or want.is_complex():
            return torch.allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)
        return bool(torch.equal(got, want))
    if isinstance(want, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(got) == len(want) and \
            all(_same(g, w) for g, w in zip(got, want))
    if isinstance(want, (int, float, bool)) or want is None:
        return got == want or (isinstance(want, float) and want != want and got != got)
    return True  # other results (e.g. torch.Size, dtypes): nothing to compare


def check_op(op: Any, samples: int) -> tuple[bool, bool, str]:
    """(matches CPU, ran with no host work, why not)."""
    try:
        inputs = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))[:samples]
    except Exception as exc:  # noqa: BLE001 - an OpInfo without float32 samples
        return True, True, f"no samples ({type(exc).__name__})"
    if not inputs:
        return True, True, "no samples"
    host_ops: set[str] = set()
    for sample in inputs:
        args = (sample.input, *sample.args)
        try:
            want = op.op(*_to(args, "cpu"), **_to(sample.kwargs, "cpu"))
            cpu_error = None
        except Exception as exc:  # noqa: BLE001
            want, cpu_error = None, type(exc)
        try:
            with torch_bridge.profile() as prof:
                got = op.op(*_to(args, "npu"), **_to(sample.kwargs, "npu"))
                got = _to(got, "cpu")
        except Exception as exc:  # noqa: BLE001
            if cpu_error is None:
                return False, False, f"npu raised {type(exc).__name__}: {str(exc)[:80]}"
            continue
        if cpu_error is not None:
            return False, False, f"npu succeeded where CPU raised {cpu_error.__name__}"
        if not _same(got, want, values=op.name not in UNINITIALIZED):
            return False, False, "values differ from CPU"
        host_ops |= {r.name for r in prof.result.host_work} - {"aten._local_scalar_dense"}
    return True, not host_ops, ", ".join(sorted(host_ops))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3, help="samples per op (default 3)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N ops")
    parser.add_argument("--list", action="store_true", help="list the ops that miss")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except ImportError as exc:  # PyTorch's test utilities import expecttest
        print(f"skipped: PyTorch's op_db needs {exc.name} (pip install -e '.[opinfo]')")
        return 0

    runtime.set_config("atom")
    numerics.set_mode("simulate")  # every sample through its program, none from CPU
    ops = [op for op in op_db if torch.float32 in op.supported_dtypes("cpu")][:args.limit]
    start = time.perf_counter()
    tally: dict[bool, Counter] = {True: Counter(), False: Counter()}
    misses: list[str] = []
    for op in ops:
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        family = name.split(".")[0] in EXCLUDED_FAMILIES or name.startswith(
            tuple(f"{f}_" for f in EXCLUDED_FAMILIES))
        match, on_device, why = check_op(op, args.samples)
        counts = tally[family]
        counts["ops"] += 1
        counts["match"] += match
        counts["device"] += match and on_device
        if not (match and on_device):
            misses.append(f"{name}: {'host: ' if match else ''}{why}")
    seconds = time.perf_counter() - start
    every = tally[True] + tally[False]
    rest = tally[False]
    print(f"OpInfo float32, up to {args.samples} samples per op, torch {torch.__version__}, "
          f"{seconds:.0f} s")
    print("| ops | count | match CPU | no host work |\n|---|---|---|---|")
    print(f"| all | {every['ops']} | {every['match'] / every['ops']:.1%} | "
          f"{every['device'] / every['ops']:.1%} |")
    print(f"| outside linalg/fft/special | {rest['ops']} | {rest['match'] / rest['ops']:.1%} | "
          f"{rest['device'] / rest['ops']:.1%} |")
    if args.list:
        print("\n".join(sorted(misses)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
