"""Upsampling (``interpolate``) on the eager npu device matches CPU, with no host work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from device_check import assert_on_device_like_cpu

CASES: dict[str, tuple[Callable[[torch.Tensor], Any], tuple[int, ...]]] = {
    "nearest1d": (lambda x: F.interpolate(x, size=7), (2, 3, 5)),
    "nearest1d_scale": (lambda x: F.interpolate(x, scale_factor=1.7), (2, 3, 5)),
    "nearest2d_fraction": (lambda x: F.interpolate(x, size=(7, 3)), (2, 3, 5, 4)),
    "nearest2d_whole": (lambda x: F.interpolate(x, scale_factor=2), (2, 3, 5, 4)),
    "nearest3d": (lambda x: F.interpolate(x, size=(3, 7, 5)), (1, 2, 4, 5, 6)),
    "nearest_exact1d": (lambda x: F.interpolate(x, size=8, mode="nearest-exact"), (2, 3, 5)),
    "nearest_exact2d": (lambda x: F.interpolate(x, scale_factor=0.6, mode="nearest-exact"),
                        (2, 3, 9, 8)),
    "linear": (lambda x: F.interpolate(x, size=9, mode="linear"), (2, 3, 5)),
    "linear_align": (lambda x: F.interpolate(x, size=9, mode="linear", align_corners=True),
                     (2, 3, 5)),
    "bilinear_down": (lambda x: F.interpolate(x, size=(3, 5), mode="bilinear"), (2, 3, 7, 9)),
    "bilinear_align": (lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear",
                                               align_corners=True), (2, 3, 4, 5)),
    "bilinear_antialias": (lambda x: F.interpolate(x, size=(3, 4), mode="bilinear",
                                                   antialias=True), (2, 3, 8, 9)),
    "trilinear": (lambda x: F.interpolate(x, size=(3, 6, 4), mode="trilinear"),
                  (1, 2, 4, 5, 3)),
    "bicubic": (lambda x: F.interpolate(x, size=(7, 6), mode="bicubic"), (2, 3, 4, 5)),
    "bicubic_align": (lambda x: F.interpolate(x, size=(3, 8), mode="bicubic",
                                              align_corners=True), (2, 3, 4, 5)),
    "area": (lambda x: F.interpolate(x, size=(3, 4), mode="area"), (2, 3, 7, 9)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_interpolate_matches_cpu_on_the_device(name: str) -> None:
    fn, shape = CASES[name]
    torch.manual_seed(0)
    assert_on_device_like_cpu(fn, torch.randn(*shape), rtol=1e-5, atol=1e-5)
