"""The check the eager-op tests share: ``fn`` on npu copies of CPU inputs gives npu
results equal to ``fn`` on the inputs themselves, with no host work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import torch_bridge


def assert_on_device_like_cpu(fn: Callable[..., Any], *inputs: torch.Tensor,
                              **tolerance: float) -> tuple[torch.Tensor, ...]:
    """Run ``fn`` on npu copies of ``inputs`` and on ``inputs``; every result is an npu
    tensor close to CPU's (``rtol``/``atol`` given together, else torch's defaults; NaN
    where CPU has NaN; integers exact) and nothing ran on the host. Returns the npu
    results as CPU tensors."""
    with torch_bridge.profile() as prof:
        got = fn(*(t.to("npu") for t in inputs))
    want = fn(*inputs)
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device.type == "npu"
        torch.testing.assert_close(g.cpu(), w, equal_nan=True, **tolerance)
    assert prof.result.host_work == (), [r.name for r in prof.result.host_work]
    return tuple(g.cpu() for g in got)
