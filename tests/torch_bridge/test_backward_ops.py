"""Autograd's backward ops and nll_loss run on the device in eager mode: the compiler
lowers them through torch's core-ATen decompositions (they have no lowering of their
own), and the numbers equal torch's on CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torch_bridge  # noqa: F401 - registers the npu device
from torch_bridge import runtime

aten = torch.ops.aten

@pytest.fixture(autouse=True)
def _on_atom():
    """The cycles below are derived for atom: pinned, whatever an earlier test left."""
    with runtime.use_config("atom"):
        yield


def _cases() -> list[tuple[str, object, tuple, dict]]:
    torch.manual_seed(0)
    g, x = torch.randn(6, 10), torch.randn(6, 10)
    y, logy = torch.softmax(x, -1), torch.log_softmax(x, -1)
    target = torch.tensor([3, 7, 0, 9, -100, 2])  # -100: ignored
    return [
        ("threshold_backward", aten.threshold_backward.default, (g, x, 0.0), {}),
        ("gelu_backward", aten.gelu_backward.default, (g, x), {}),
        ("gelu_backward tanh", aten.gelu_backward.default, (g, x), {"approximate": "tanh"}),
        ("sigmoid_backward", aten.sigmoid_backward.default, (g, torch.sigmoid(x)), {}),
        ("tanh_backward", aten.tanh_backward.default, (g, torch.tanh(x)), {}),
        ("silu_backward", aten.silu_backward.default, (g, x), {}),
        ("_softmax_backward_data", aten._softmax_backward_data.default,
         (g, y, -1, torch.float32), {}),
        ("_log_softmax_backward_data", aten._log_softmax_backward_data.default,
         (g, logy, 1, torch.float32), {}),
        ("nll_loss_forward", aten.nll_loss_forward.default,
         (logy, target, None, 1, -100), {}),
        ("nll_loss_backward", aten.nll_loss_backward.default,
         (torch.tensor(1.0), logy, target, None, 1, -100, torch.tensor(5.0)), {}),
    ]


def _npu(value: object) -> object:
    return value.npu() if isinstance(value, torch.Tensor) else value


@pytest.mark.parametrize("name,op,args,kwargs", _cases(), ids=[c[0] for c in _cases()])
def test_backward_op_runs_on_the_device_and_matches_cpu(name, op, args, kwargs) -> None:
    device_args = tuple(map(_npu, args))
    line = runtime.reset_timeline()
    got = op(*device_args, **kwargs)
    (event,) = line.events
    want = op(*args, **kwargs)
    for got_one, want_one in zip(*((t,) if isinstance(t, torch.Tensor) else t
                                   for t in (got, want))):
        assert_close(got_one.cpu(), want_one, rtol=1e-5, atol=1e-6)
    assert (event.op, event.kind) == (str(op).rsplit(".", 1)[0], "device")
    # atom: at least one load (64 DMA setup + 300 DRAM latency), vector pass (pipeline 8)
    # and store (64 + 300) chain. The decompositions run one to a few dependent kernels
    # on these 6x10 operands (nll_loss_forward the most: ~7 chains, its gather, mask,
    # sum and divide), so 8 chains bound them all.
    chain = 64 + 300 + 8 + 64 + 300
    assert chain <= event.cycles < 8 * chain
    assert event.flops > 0


def test_mlp_cross_entropy_backward_runs_on_the_device_with_cpu_gradients() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 10))
    x, target = torch.randn(8, 16), torch.tensor([1, 4, 9, 0, 3, 3, 7, 2])
    device_model = __import__("copy").deepcopy(model).npu()

    def loss_of(m: torch.nn.Module, inputs: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(m(inputs), want)

    loss_of(model, x, target).backward()
    x_npu, target_npu = x.npu(), target.npu()
    line = runtime.reset_timeline()
    loss_of(device_model, x_npu, target_npu).backward()
    for cpu_param, npu_param in zip(model.parameters(), device_model.parameters()):
        assert_close(npu_param.grad.cpu(), cpu_param.grad, rtol=1e-4, atol=1e-5)
    on_device = {e.op for e in line.events if e.kind == "device"}
    assert {"aten.threshold_backward", "aten.gelu_backward", "aten._log_softmax_backward_data",
            "aten.nll_loss_forward", "aten.nll_loss_backward"} <= on_device
    assert not [e.op for e in line.events if e.kind == "host"]
