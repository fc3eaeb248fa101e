"""No host work goes unannounced on the eager device: every path that runs an op on the
host warns once per op and reason and is listed by the profiler."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
from torch.testing import assert_close

import torch_bridge
from torch_bridge import fallback

Op = Callable[..., torch.Tensor]


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch) -> None:
    monkeypatch.setattr(fallback, "_warned_ops", set())


def _run(fn: Op, *args: torch.Tensor) -> tuple[torch.Tensor, torch_bridge.profile, list]:
    with warnings.catch_warnings(record=True) as caught, torch_bridge.profile() as prof:
        warnings.simplefilter("always")
        got = fn(*(a.to("npu") for a in args))
    return got, prof, [w for w in caught if issubclass(w.category,
                                                      torch_bridge.HostFallbackWarning)]


HOST_PATHS: dict[str, tuple[Op, tuple[torch.Tensor, ...], str]] = {
    "no_npu_kernel": (lambda x: torch.linalg.qr(x)[0], (torch.randn(4, 4),),
                      "aten.linalg_qr.out has no npu kernel"),
    "device_dtype": (lambda x: x * 3, (torch.randn(4, dtype=torch.float64),),
                     "aten.mul.Tensor runs on the host: dtype torch.float64"),
    "zero_element_operand": (lambda b, a, m: torch.addmm(b, a, m),
                             (torch.randn(4), torch.randn(5, 0), torch.randn(0, 4)),
                             "aten.addmm runs on the host: a zero-element operand"),
    "out_of_another_shape": (lambda x: torch.exp(x, out=torch.empty(3, device=x.device)),
                             (torch.randn(4),), "aten.exp.out runs on the host: result"),
}


@pytest.mark.parametrize("name", list(HOST_PATHS))
def test_every_host_path_warns_once_and_is_listed(name: str) -> None:
    fn, args, message = HOST_PATHS[name]
    first, prof, warned = _run(fn, *args)
    again, _, warned_again = _run(fn, *args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own (resizing a non-empty out=)
        want = fn(*args)
    assert_close(first.cpu(), want)
    assert_close(again.cpu(), want)
    assert [str(w.message)[:len(message)] for w in warned] == [message]
    assert warned[0].filename == __file__
    assert not warned_again
    assert prof.result.host_work and prof.result.host_cycles > 0
