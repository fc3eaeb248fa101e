"""Training through ``F.scaled_dot_product_attention`` under ``torch.compile(backend=
"archsim")``: the gradients are torch's, and the attention's forward and backward run
on the device (no host fallback)."""

from __future__ import annotations

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
