"""Pooling on the eager npu device: values and indices match CPU, with no host work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import torch_bridge
from device_check import assert_on_device_like_cpu

aten = torch.ops.aten

CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "max_pool2d_ceil_dilation_indices": lambda x: F.max_pool2d(
        x, 3, 2, padding=1, dilation=2, ceil_mode=True, return_indices=True),
    "max_pool2d_indices": lambda x: F.max_pool2d(x, 2, return_indices=True),
    "max_pool2d_ceil": lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True),
    "max_pool1d_indices": lambda x: F.max_pool1d(x[0], 3, 2, padding=1, ceil_mode=True,
                                                 return_indices=True),
    "max_pool3d_indices": lambda x: F.max_pool3d(x, (2, 3, 2), (1, 2, 2), padding=(1, 1, 0),
                                                 return_indices=True),
    "avg_pool2d_exclude_pad_ceil": lambda x: F.avg_pool2d(
        x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False),
    "avg_pool2d_divisor": lambda x: F.avg_pool2d(x, 4, 3, padding=2, ceil_mode=True,
                                                 divisor_override=3),
    "avg_pool1d_ceil": lambda x: F.avg_pool1d(x[0], 4, 3, padding=1, ceil_mode=True),
    "avg_pool3d": lambda x: F.avg_pool3d(x, 2, (1, 2, 3), padding=1,
                                         count_include_pad=False),
    "adaptive_avg_pool2d": lambda x: F.adaptive_avg_pool2d(x, (5, 4)),
    "adaptive_avg_pool3d": lambda x: F.adaptive_avg_pool3d(x, (3, 5, 4)),
    "adaptive_max_pool2d": lambda x: F.adaptive_max_pool2d(x, (5, 3), return_indices=True),
    "adaptive_max_pool3d": lambda x: F.adaptive_max_pool3d(x, (2, 3, 4), return_indices=True),
    "max_unpool2d": lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2,
                                                 output_size=x.shape[-2:]),
    "max_unpool3d": lambda x: F.max_unpool3d(*F.max_pool3d(x, 2, return_indices=True), 2,
                                                 output_size=x.shape[-3:]),
    "max_pool2d_backward": lambda x: aten.max_pool2d_with_indices_backward(
        x[..., :4, :5], x, [3, 3], [2, 2], [1, 1], [1, 1], False,
        F.max_pool2d(x, 3, 2, 1, return_indices=True)[1]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_pooling_matches_cpu_on_the_device(name: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 9)
    if "3d" in name:
        x = torch.randn(2, 5, 6, 7)
    assert_on_device_like_cpu(CASES[name], x, rtol=1e-5, atol=1e-5)


def test_max_pool_indices_keep_cpu_tie_and_nan_rules() -> None:
    x = torch.tensor([[[[1.0, 1.0, 0.0, 2.0], [float("nan"), 1.0, 2.0, float("nan")],
                        [3.0, 3.0, 3.0, 3.0]]]])
    with torch_bridge.profile() as prof:
        got = F.max_pool2d(x.to("npu"), 2, 1, ceil_mode=True, return_indices=True)
    want = F.max_pool2d(x, 2, 1, ceil_mode=True, return_indices=True)
    torch.testing.assert_close(got[0].cpu(), want[0], equal_nan=True)
    assert torch.equal(got[1].cpu(), want[1])
    assert prof.result.host_work == ()
