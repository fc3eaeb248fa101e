"""What issue 33 added beyond the torch_openreg cases: LSTM gradients, the "npu"
compile backend's latency, SDPA's overrideable numbers and autocast's refusal of BCE."""

import warnings

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import torch_bridge  # noqa: F401  (registers the npu device)
from torch_bridge.fallback import HostFallbackWarning


def test_lstm_gradients_match_cpu() -> None:
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(6, 8, num_layers=2, bidirectional=True)
    x = torch.randn(3, 2, 6, requires_grad=True)
    out, (h, c) = lstm(x)
    (out.sum() + 2 * h.sum() + c.sum()).backward()
    expected = [p.grad.clone() for p in lstm.parameters()] + [x.grad]
    lstm.zero_grad()
    lstm.to("npu")
    xn = x.detach().to("npu").requires_grad_()
    out, (h, c) = lstm(xn)
    (out.sum() + 2 * h.sum() + c.sum()).backward()
    for got, want in zip([p.grad for p in lstm.parameters()] + [xn.grad], expected):
        torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("bias", [True, False])
def test_gru_gradients_match_cpu(bias: bool) -> None:
    """``nn.GRU`` steps with ``_thnn_fused_gru_cell``, which has no CPU kernel: it
    crashed on npu (a probe's finding) until its equations ran as npu ops."""
    torch.manual_seed(0)
    gru = torch.nn.GRU(6, 8, num_layers=2, bias=bias, bidirectional=True)
    x = torch.randn(3, 2, 6, requires_grad=True)
    h0 = torch.randn(4, 2, 8, requires_grad=True)
    out, h = gru(x, h0)
    (out.pow(2).sum() + 2 * h.sum()).backward()
    expected = [out.detach(), *(p.grad.clone() for p in gru.parameters()), x.grad, h0.grad]
    gru.zero_grad()
    gru.to("npu")
    xn, hn = (t.detach().to("npu").requires_grad_() for t in (x, h0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", HostFallbackWarning)  # every step on the device
        out, h = gru(xn, hn)
        (out.pow(2).sum() + 2 * h.sum()).backward()
    got = [out.detach(), *(p.grad for p in gru.parameters()), xn.grad, hn.grad]
    for mine, want in zip(got, expected):
        torch.testing.assert_close(mine.cpu(), want)


def test_gru_cell_matches_cpu() -> None:
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(4, 5)
    x, hx = torch.randn(2, 4), torch.randn(2, 5)
    expected = cell(x, hx)
    got = cell.to("npu")(x.to("npu"), hx.to("npu"))
    torch.testing.assert_close(got.cpu(), expected)


def test_npu_backend_is_archsim_under_the_device_name() -> None:
    torch._dynamo.reset()
    model = torch.nn.Linear(8, 8).to("npu")
    x = torch.randn(4, 8, device="npu")
    runs = []
    for backend in ("archsim", "npu"):
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=backend)
        compiled(x)
        start = torch.npu.elapsed_cycles()
        y = compiled(x)
        runs.append((y.cpu(), torch.npu.elapsed_cycles() - start))
    assert torch.equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1] > 0


@pytest.mark.parametrize("bias", [None, "float", "causal"])
def test_overrideable_attention_equals_cpu_math(bias: str | None) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 8, 16, requires_grad=True) for _ in range(3))
    mask = torch.randn(1, 2, 8, 8, requires_grad=True) if bias == "float" else None
    ref = torch.ops.aten._scaled_dot_product_attention_math(
        q, k, v, mask, is_causal=bias == "causal")[0]
    grad = torch.randn_like(ref)
    ref.backward(grad)
    qn, kn, vn = (t.detach().to("npu") for t in (q, k, v))
    mn = mask.detach().to("npu") if mask is not None else None
    fwd = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        qn, kn, vn, mn, is_causal=bias == "causal")
    torch.testing.assert_close(fwd[0].cpu(), ref)
    grads = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
        grad.to("npu"), qn, kn, vn, mn, [True, True, True, mask is not None], fwd[0], fwd[1],
        fwd[2], fwd[3], fwd[4], fwd[5], 0.0, bias == "causal", fwd[6], fwd[7])
    for got, want in zip(grads, (q.grad, k.grad, v.grad, getattr(mask, "grad", None))):
        if want is not None:
            torch.testing.assert_close(got.cpu(), want)


def test_autocast_refuses_binary_cross_entropy() -> None:
    x, t = torch.rand(4, device="npu"), torch.rand(4, device="npu")
    with torch.autocast("npu", dtype=torch.float16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(x, t)
        assert F.binary_cross_entropy_with_logits(x, t).dtype == torch.float32
    F.binary_cross_entropy(x, t)  # outside autocast it runs


def test_missing_device_index_raises_as_torch_cuda() -> None:
    with pytest.raises(AssertionError, match="Invalid device id"):
        torch.npu.get_device_capability(1)
    with pytest.raises(RuntimeError, match="out of range"):
        torch.npu.set_device(1)
    assert torch.npu.get_device_capability(0) == (0, 0)
