"""Sorting on the eager npu device: values and indices match CPU (stable, NaN last
ascending and first descending), with no host work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import torch_bridge
from device_check import assert_on_device_like_cpu

CASES: dict[str, tuple[Callable[[torch.Tensor], Any], tuple[int, ...]]] = {
    "sort_rank": (lambda x: torch.sort(x, dim=1, stable=True), (3, 9, 2)),
    "sort_rank_descending": (lambda x: torch.sort(x, descending=True, stable=True), (4, 7)),
    "sort_bitonic": (lambda x: torch.sort(x, dim=0, stable=True), (40, 3)),
    "sort_bitonic_descending": (lambda x: torch.sort(x, descending=True, stable=True),
                                (2, 45)),
    "argsort": (lambda x: torch.argsort(x, dim=-1, stable=True), (3, 6)),
    "msort": (lambda x: torch.msort(x), (5, 4)),
    "topk_largest": (lambda x: torch.topk(x, 3, dim=0), (6, 5)),
    "topk_smallest": (lambda x: torch.topk(x, 4, largest=False), (3, 50)),
    "kthvalue": (lambda x: torch.kthvalue(x, 3, dim=1, keepdim=True), (4, 7)),
    "kthvalue_long": (lambda x: torch.kthvalue(x, 20), (2, 40)),
    "median_rank": (lambda x: torch.median(x, dim=0), (7, 3)),
    "nanmedian_rank": (lambda x: torch.nanmedian(x, dim=1, keepdim=True), (3, 12)),
    "median_all": (lambda x: torch.median(x), (4, 5)),
    "quantile": (lambda x: torch.quantile(x, 0.3, dim=1), (3, 8)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_sort_matches_cpu_on_the_device(name: str) -> None:
    fn, shape = CASES[name]
    torch.manual_seed(0)
    x = torch.randn(*shape)
    if "rank" in name or "bitonic" in name:  # ties and NaNs
        x = (x * 2).round()
        x.view(-1)[::11] = float("nan")
    assert_on_device_like_cpu(fn, x)


def test_a_sort_beyond_the_bitonic_bound_runs_on_the_host_visibly() -> None:
    from compiler.lowerings.sorting import MAX_BITONIC

    x = torch.randn(MAX_BITONIC + 1)
    with pytest.warns(torch_bridge.HostFallbackWarning, match=r"aten\.sort"):
        with torch_bridge.profile() as prof:
            got = torch.sort(x.to("npu"))
    assert torch.equal(got.values.cpu(), torch.sort(x).values)
    assert [r.name for r in prof.result.host_work] == ["aten.sort"]
