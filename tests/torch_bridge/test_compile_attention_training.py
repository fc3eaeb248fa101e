"""Training through ``F.scaled_dot_product_attention`` under ``torch.compile(backend=
"archsim")``: the gradients are torch's, and the attention's forward and backward run
on the device (no host fallback)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torch_bridge  # noqa: F401 - registers the backend
from torch_bridge import compile_backend, runtime


@pytest.fixture(autouse=True)
def _fresh() -> None:
    torch._dynamo.reset()
    with runtime.use_config("atom"):
        yield


def _runners(monkeypatch) -> list[compile_backend.GraphRunner]:
    made: list[compile_backend.GraphRunner] = []
    init = compile_backend.GraphRunner.__init__

    def record(self, gm, label):
        init(self, gm, label)
        made.append(self)

    monkeypatch.setattr(compile_backend.GraphRunner, "__init__", record)
    return made


MASK = torch.ones(8, 8, dtype=torch.bool).tril()
CASES = {
    "causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "no mask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    "bool mask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=MASK),
    "scale": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                            scale=0.3),
    "grouped heads": lambda q, k, v: F.scaled_dot_product_attention(
        q, k[:, :2], v[:, :2], is_causal=True, enable_gqa=True),
}


@pytest.mark.parametrize("name", CASES)
def test_attention_gradients_are_torchs_and_run_on_the_device(name, monkeypatch) -> None:
    """torch.export's decomposition of CPU's flash attention returns the probabilities
    where its backward expects the logsumexp: the gradients were off by 6-19x."""
    runners = _runners(monkeypatch)
    torch.manual_seed(0)
    inputs = [torch.randn(1, 4, 8, 8) for _ in range(3)]

    def loss(q, k, v):
        return CASES[name](q, k, v).pow(2).mean()

    ours = [t.clone().requires_grad_() for t in inputs]
    theirs = [t.clone().requires_grad_() for t in inputs]
    torch.compile(loss, backend="archsim")(*ours).backward()
    loss(*theirs).backward()
    for mine, ref in zip(ours, theirs):
        assert_close(mine.grad, ref.grad, rtol=1e-5, atol=1e-6)
    assert [r.label.split()[1] for r in runners] == ["forward", "backward"]
    for runner in runners:
        assert runner.program is not None and runner.program.fallbacks == ()


@pytest.mark.parametrize("layer", ["attention", "encoder layer"])
def test_multihead_attention_gradients_are_torchs(layer, monkeypatch) -> None:
    """dynamo keeps ``F.multi_head_attention_forward`` whole, with SDPA inside it (a
    probe's finding: ``nn.MultiheadAttention``'s in_proj gradients were 6.6x off)."""
    runners = _runners(monkeypatch)
    torch.manual_seed(0)
    module = (torch.nn.MultiheadAttention(16, 2, batch_first=True) if layer == "attention"
              else torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True))
    reference = copy.deepcopy(module)
    x = torch.randn(3, 5, 16)

    def loss(m: torch.nn.Module) -> torch.Tensor:
        out = m(x, x, x, need_weights=False)[0] if layer == "attention" else m(x)
        return out.pow(2).sum()

    loss(torch.compile(module, backend="archsim")).backward()
    loss(reference).backward()
    for (name, mine), ref in zip(module.named_parameters(), reference.parameters()):
        assert_close(mine.grad, ref.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert [r.label.split()[1] for r in runners] == ["forward", "backward"]


def test_a_row_the_mask_hides_whole_is_zeros_as_torchs() -> None:
    """ATen's math path gives a fully masked query row zeros (a left-padded batch's pad
    rows), not the NaN of softmax over -inf: the device's attention too (a probe's
    finding: NaN, unnoticed, as the reference was the same decomposed graph)."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    mask = torch.tensor([[False] * 5, [True] * 5, [True, False, True, False, True]])

    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    got = torch.compile(attend, backend="archsim")(q, k, v, mask)
    expected = attend(q, k, v, mask)
    assert torch.equal(got[:, :, 0], torch.zeros(1, 2, 8))
    assert_close(got, expected, rtol=1e-5, atol=1e-6)
