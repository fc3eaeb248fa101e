"""group_norm (Wav2Vec2's feature extractor, diffusion UNets) on the vector engine: each
sample's channel groups normalized over their channels and positions, the affine per
channel; the mean and 1/std per [N, groups] as torch returns them."""

from __future__ import annotations

import pytest
import torch
from compiler_helpers import check_op

aten = torch.ops.aten


@pytest.mark.parametrize("shape, groups", [((2, 6, 5), 3), ((1, 8, 3, 4), 8), ((2, 4, 6), 1)])
def test_native_group_norm_matches_torch(shape: tuple[int, ...], groups: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(shape) * 3 + 1
    c = shape[1]
    spatial = x[0, 0].numel()
    weight, bias = torch.randn(c), torch.randn(c)
    compiled, _ = check_op(aten.native_group_norm.default,
                           (x, weight, bias, shape[0], c, spatial, groups, 1e-5), "tiny",
                           tol={"rtol": 1e-4, "atol": 1e-5})
    assert compiled.fallbacks == ()


def test_without_an_affine() -> None:
    x = torch.randn(2, 4, 7)
    compiled, _ = check_op(aten.native_group_norm.default, (x, None, None, 2, 4, 7, 2, 1e-5),
                           "tiny", tol={"rtol": 1e-4, "atol": 1e-5})
    assert compiled.fallbacks == ()
