"""Padding, channel shuffle and unfold (im2col) on the eager npu device match CPU, with
no host work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import torch_bridge
from device_check import assert_on_device_like_cpu

CASES: dict[str, tuple[Callable[[torch.Tensor], Any], tuple[int, ...]]] = {
    "reflect1d": (lambda x: F.pad(x, (3, 2), mode="reflect"), (2, 3, 6)),
    "reflect2d": (lambda x: F.pad(x, (1, 3, 2, 0), mode="reflect"), (2, 3, 5, 6)),
    "reflect3d": (lambda x: F.pad(x, (1, 1, 2, 0, 1, 2), mode="reflect"), (1, 2, 4, 5, 3)),
    "replicate1d": (lambda x: F.pad(x, (4, 1), mode="replicate"), (2, 3, 6)),
    "replicate2d_negative": (lambda x: F.pad(x, (-1, 3, 2, -2), mode="replicate"),
                             (2, 3, 5, 6)),
    "replicate3d": (lambda x: F.pad(x, (2, 1, 0, 1, 1, 1), mode="replicate"), (1, 2, 3, 4, 5)),
    "constant_negative": (lambda x: F.pad(x, (-1, -2, 1, 1), value=1.5), (5, 4)),
    "constant_3_dims": (lambda x: F.pad(x, (1, 0, 2, 1, 1, 3), value=-2.0), (2, 3, 4, 5)),
    "channel_shuffle": (lambda x: F.channel_shuffle(x, 3), (2, 6, 3, 4)),
    "unfold": (lambda x: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
               (2, 3, 6, 7)),
    "unfold_unbatched": (lambda x: F.unfold(x, 2), (3, 4, 5)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_padding_matches_cpu_on_the_device(name: str) -> None:
    fn, shape = CASES[name]
    torch.manual_seed(0)
    assert_on_device_like_cpu(fn, torch.randn(*shape))


def test_results_of_empty_inputs_are_device_fills() -> None:
    """Padding an empty tensor, or mm with K = 0: no input data, so the results are
    fills written on the device (timed as a memset), not host work."""
    empty, left, right = torch.randn(0, 3, 3), torch.randn(5, 0), torch.randn(0, 4)
    with torch_bridge.profile() as prof:
        padded = F.pad(empty.to("npu"), (1, 1, 1, 1, 1, 1), value=2.0)
        product = left.to("npu") @ right.to("npu")
    torch.testing.assert_close(padded.cpu(), F.pad(empty, (1, 1, 1, 1, 1, 1), value=2.0))
    torch.testing.assert_close(product.cpu(), left @ right)
    assert prof.result.host_work == ()
