"""grid_sample on the eager npu device (run-time positions, indexed gathers) matches CPU,
with no host work."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import torch_bridge


@pytest.mark.parametrize("mode,padding,align", list(itertools.product(
    ("bilinear", "nearest", "bicubic"), ("zeros", "border", "reflection"), (False, True))))
def test_grid_sample_2d_matches_cpu(mode: str, padding: str, align: bool) -> None:
    torch.manual_seed(0)
    x, grid = torch.randn(2, 3, 5, 6), torch.rand(2, 4, 7, 2) * 2.6 - 1.3
    with torch_bridge.profile() as prof:
        got = F.grid_sample(x.to("npu"), grid.to("npu"), mode=mode, padding_mode=padding,
                            align_corners=align)
    want = F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    assert prof.result.host_work == ()


@pytest.mark.parametrize("mode", ("bilinear", "nearest"))
def test_grid_sample_3d_matches_cpu(mode: str) -> None:
    torch.manual_seed(0)
    x, grid = torch.randn(1, 2, 3, 4, 5), torch.rand(1, 2, 3, 4, 3) * 2.4 - 1.2
    with torch_bridge.profile() as prof:
        got = F.grid_sample(x.to("npu"), grid.to("npu"), mode=mode, padding_mode="border",
                            align_corners=False)
    want = F.grid_sample(x, grid, mode=mode, padding_mode="border", align_corners=False)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    assert prof.result.host_work == ()
