"""3-D and transposed convolutions on the eager npu device (on the 2-D convolution unit)
match CPU, with no host work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from device_check import assert_on_device_like_cpu

CASES: dict[str, tuple[Callable[..., Any], tuple[int, ...], tuple[int, ...]]] = {
    "conv3d": (lambda x, w, bias: F.conv3d(x, w, bias, stride=(2, 1, 2), padding=(1, 0, 1),
                                           dilation=(1, 2, 1)), (2, 4, 5, 6, 7), (3, 4, 3, 2, 3)),
    "conv3d_groups": (lambda x, w, bias: F.conv3d(x, w, bias, groups=2), (1, 4, 3, 4, 5),
                      (4, 2, 2, 2, 2)),
    "conv_transpose1d": (lambda x, w, bias: F.conv_transpose1d(
        x, w, bias, stride=3, padding=1, output_padding=2, groups=2, dilation=2),
        (2, 4, 5), (4, 3, 3)),
    "conv_transpose2d": (lambda x, w, bias: F.conv_transpose2d(
        x, w, bias, stride=(2, 1), padding=(0, 1), output_padding=(1, 0)),
        (2, 3, 4, 5), (3, 2, 3, 3)),
    "conv_transpose3d": (lambda x, w, bias: F.conv_transpose3d(x, w, bias, stride=2, padding=1),
                         (1, 2, 3, 3, 4), (2, 3, 2, 3, 2)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_cpu_on_the_device(name: str) -> None:
    fn, x_shape, w_shape = CASES[name]
    torch.manual_seed(0)
    x, w = torch.randn(*x_shape), torch.randn(*w_shape)
    transposed = "transpose" in name
    bias = torch.randn(w_shape[1] * (2 if "1d" in name else 1) if transposed else w_shape[0])
    assert_on_device_like_cpu(fn, x, w, bias, rtol=1e-4, atol=1e-4)
