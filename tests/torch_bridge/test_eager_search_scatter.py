"""Counting searches (searchsorted, bucketize, isin, mode), scatters along any dim and
segment reductions on the eager npu device match CPU, with no host work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import torch_bridge

torch.manual_seed(0)
SEQ = torch.sort(torch.randn(3, 6))[0]
INDEX = torch.randint(0, 5, (3, 4))
SRC = torch.randn(3, 5)

CASES: dict[str, Callable[[Callable[[torch.Tensor], torch.Tensor], torch.Tensor], Any]] = {
    "searchsorted": lambda on, x: torch.searchsorted(on(SEQ), x[:, :4]),
    "searchsorted_right_1d": lambda on, x: torch.searchsorted(on(SEQ[0]), x, right=True),
    "bucketize": lambda on, x: torch.bucketize(x, on(SEQ[1]), out_int32=True),
    "isin": lambda on, x: torch.isin(x.round(), on(torch.tensor([0.0, 1.0, -2.0]))),
    "mode": lambda on, x: torch.mode(x.round(), dim=1),
    "scatter_src_dim0": lambda on, x: x.scatter(0, on(INDEX[:2, :3] % 3), on(SRC)),
    "scatter_value_dim0": lambda on, x: x.scatter(0, on(INDEX[:2] % 3), 2.5),
    "scatter_add_dim1": lambda on, x: x.scatter_add(1, on(INDEX), on(SRC)),
    "scatter_reduce_mean": lambda on, x: x.scatter_reduce(1, on(INDEX), on(SRC), "mean",
                                                          include_self=False),
    "scatter_reduce_amax": lambda on, x: x.scatter_reduce(1, on(INDEX[:2]), on(SRC), "amax"),
    "scatter_reduce_prod": lambda on, x: x.scatter_reduce(1, on(INDEX), on(SRC), "prod"),
    "segment_mean_lengths": lambda on, x: torch.segment_reduce(
        x, "mean", lengths=on(torch.tensor([[0, 2, 3], [1, 1, 3], [5, 0, 0]])), axis=1),
    "segment_max_offsets_initial": lambda on, x: torch.segment_reduce(
        x, "max", offsets=on(torch.tensor([0, 0, 2, 3])), initial=0.5),
    "segment_prod": lambda on, x: torch.segment_reduce(x, "prod",
                                                       lengths=on(torch.tensor([2, 0, 1]))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_cpu_on_the_device(name: str) -> None:
    x = torch.randn(3, 5) * 2
    npu = (lambda t: t.to("npu"))
    with torch_bridge.profile() as prof:
        got = CASES[name](npu, x.to("npu"))
    want = CASES[name](lambda t: t, x)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g.cpu(), w, equal_nan=True)
    assert prof.result.host_work == ()
