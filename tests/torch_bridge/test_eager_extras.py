"""PReLU, angle, the cross product, addbmm, histc, ldexp, logaddexp2, dropout's
backward and frexp on the eager npu device match CPU, with no host work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from device_check import assert_on_device_like_cpu

CASES: dict[str, Callable[..., Any]] = {
    "prelu_channels": lambda x, y: F.prelu(x, y[0, :3]),
    "prelu_one": lambda x, y: F.prelu(x, y[0, :1]),
    "angle": lambda x, y: torch.angle(torch.where(x > 1, float("nan"), x)),
    "cross_dim1": lambda x, y: torch.linalg.cross(x, y[:, :3, None, None].expand(
        2, 3, 4, 5), dim=1),
    "addbmm": lambda x, y: torch.addbmm(y[:1, :1], x[0], x[1].transpose(1, 2), beta=0.5,
                                        alpha=2.0),
    "histc_data_range": lambda x, y: torch.histc(x, bins=7),
    "histc_given_range": lambda x, y: torch.histc(x, bins=5, min=-1.0, max=1.5),
    "ldexp": lambda x, y: torch.ldexp(x, (x * 3).round().int()),
    "logaddexp2": lambda x, y: torch.logaddexp2(x, y[:, :, None, None]),
    "dropout_backward": lambda x, y: torch.ops.aten.native_dropout_backward(x, x > 0, 2.0),
    "frexp": lambda x, y: torch.frexp(torch.where(x > 1.5, float("inf"), x * 1e3)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_cpu_on_the_device(name: str) -> None:
    torch.manual_seed(0)
    assert_on_device_like_cpu(CASES[name], torch.randn(2, 3, 4, 5), torch.randn(2, 3))
