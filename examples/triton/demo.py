"""Run an example kernel on the simulated ``npu`` device: its result checked against
torch on CPU, then the simulated time and the engines it kept busy
(``python examples/triton/vector_add.py`` and the others call :func:`demo`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import torch_bridge


def demo(name: str, kernel: Callable[..., Any], reference: Callable[..., Any],
         *inputs: torch.Tensor) -> None:
    """``kernel(*inputs)`` on npu copies of ``inputs`` against ``reference(*inputs)`` on
    CPU; a result off by more than float32 rounding exits non-zero."""
    on_npu = [x.to("npu") for x in inputs]
    with torch_bridge.profile() as prof:
        got = kernel(*on_npu)
    want = reference(*(x.clone() for x in inputs))
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-4)
    print(f"{name}: matches torch on CPU ({len(got)} output(s))")
    print(prof.summary())
