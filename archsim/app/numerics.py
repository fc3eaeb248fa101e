"""Numbers are a contract: a functional run's outputs against the same model on CPU."""

from __future__ import annotations

import sys
from typing import Any

from archsim.app.progress import Progress
from archsim.errors import NumericsError


def check_numerics(module: Any, tensors: tuple[Any, ...], outputs: tuple[Any, ...],
                   progress: Progress) -> float:
    """The largest difference between the schedule's outputs and the model run by torch
    on CPU; a :class:`NumericsError` when an output is off by more than its dtype's
    tolerance (torch.testing's, with the absolute part scaled to the output's size:
    a long chain of roundings in a model is not a wrong number)."""
    import torch

    from torch_bridge.numerics import TOLERANCE

    with torch.no_grad(), _triton_on_cpu():
        expected = module(*tensors)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    if len(outputs) != len(expected):
        raise NumericsError(f"the schedule returned {len(outputs)} outputs, torch on CPU "
                            f"{len(expected)}")
    worst = 0.0
    for index, (got, want) in enumerate(zip(outputs, expected)):
        if got.shape != want.shape:
            raise NumericsError(f"output {index}: shape {tuple(got.shape)}, torch on CPU "
                                f"{tuple(want.shape)}")
        if not want.is_floating_point():
            if not torch.equal(got.to(want.dtype), want):
                raise NumericsError(f"output {index}: {want.dtype} values differ from "
                                    f"torch on CPU")
            continue
        if not got.numel():
            continue
        rtol, atol = TOLERANCE.get(want.dtype, TOLERANCE[torch.float32])
        got, want = got.double(), want.double()
        if not bool((got.isnan() == want.isnan()).all()):
            raise NumericsError(f"output {index}: NaN where torch on CPU has none, or "
                                f"the reverse")
        diff = float((got - want).nan_to_num(nan=0.0).abs().max())
        allowed = max(atol, rtol * float(want.nan_to_num(nan=0.0, posinf=0.0,
                                                         neginf=0.0).abs().max()))
        if diff > allowed:
            raise NumericsError(f"output {index}: max |npu - torch cpu| = {diff:.3g}, over "
                                f"the {expected[index].dtype} tolerance {allowed:.3g} "
                                f"(rtol {rtol:g} of the largest |value|, at least {atol:g})")
        worst = max(worst, diff)
    progress.note(f"numerics: max |npu - torch cpu| = {worst:.3g} over {len(outputs)} "
                  f"output(s)")
    return worst


def _triton_on_cpu() -> Any:
    """The CPU reference runs a model's Triton kernels on Triton's interpreter."""
    import contextlib

    if "triton" not in sys.modules:
        return contextlib.nullcontext()
    from torch_bridge.triton_launch import interpreted_on_cpu

    return interpreted_on_cpu()


__all__ = ["check_numerics"]
