"""Batch norm in training mode on the eager npu device: outputs, saved statistics and the
running buffers' in-place update match CPU, with no host work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import torch_bridge

aten = torch.ops.aten

CASES: dict[str, Callable[..., Any]] = {
    "native_batch_norm": lambda x, w, b, m, v: aten.native_batch_norm(
        x, w, b, m, v, True, 0.2, 1e-5),
    "native_batch_norm_eval": lambda x, w, b, m, v: aten.native_batch_norm(
        x, w, b, m, v, False, 0.2, 1e-5)[0],
    "legit": lambda x, w, b, m, v: aten._native_batch_norm_legit(x, w, b, m, v, True, 0.1,
                                                                1e-3),
    "legit_no_stats": lambda x, w, b, m, v: aten._native_batch_norm_legit.no_stats(
        x, None, b, True, 0.1, 1e-5),
    "with_update": lambda x, w, b, m, v: aten._batch_norm_with_update(x, w, b, m, v, 0.1,
                                                                      1e-5)[:3],
    "functional_batch_norm": lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, training=True),
    "no_running_stats": lambda x, w, b, m, v: F.batch_norm(x, None, None, w, b,
                                                           training=True),
    "instance_norm": lambda x, w, b, m, v: F.instance_norm(x, m[:1].expand(3).contiguous(),
                                                           v[:1].expand(3).contiguous(), w, b,
                                                           use_input_stats=True),
    "instance_norm_no_stats": lambda x, w, b, m, v: F.instance_norm(x[:, :, :4]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_training_batch_norm_matches_cpu(name: str) -> None:
    torch.manual_seed(0)
    args = [torch.randn(4, 3, 5, 6), torch.randn(3), torch.randn(3), torch.randn(3),
            torch.rand(3) + 0.5]
    on_npu = [t.to("npu") for t in args]
    with torch_bridge.profile() as prof:
        got = CASES[name](*on_npu)
    want = CASES[name](*args)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-5)
    for g, w in zip(on_npu[3:], args[3:]):  # running statistics updated in place
        torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-5)
    assert prof.result.host_work == ()


def test_batch_norm_module_trains_on_the_device() -> None:
    torch.manual_seed(0)
    cpu = torch.nn.BatchNorm2d(3)
    npu = torch.nn.BatchNorm2d(3).to("npu")
    x = torch.randn(2, 3, 4, 4)
    with torch_bridge.profile() as prof:
        got = npu(x.to("npu"))
    torch.testing.assert_close(got.cpu(), cpu(x), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(npu.running_var.cpu(), cpu.running_var)
    assert prof.result.host_work == ()
