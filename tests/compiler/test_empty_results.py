"""An op whose every result is empty (a batch of zero rows) computes nothing: its
results are empty constants, so a model file run on zero rows gives torch's empty
results in no time instead of a tiling that divides by zero."""

from __future__ import annotations

import torch

import compiler
from compiler.compile import clear_cache
from compiler_helpers import config


class Head(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(64, 32))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x @ self.w
        return torch.relu(y), y.sum(0)  # the sum over no rows is zeros, not empty


def test_zero_rows_compute_nothing_but_the_non_empty_results():
    torch.manual_seed(0)
    model = Head()
    x = torch.randn(0, 64)
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(model, (x,)), config("atom"))
    (relu, total), result = compiled.run(x)
    want_relu, want_total = model(x)
    assert relu.shape == want_relu.shape == (0, 32)
    torch.testing.assert_close(total, want_total)
    assert torch.equal(total, torch.zeros(32))
    # the empty matmul and ReLU emit nothing; only the sum of nothing is written
    assert all(c.source.startswith("sum") for c in compiled.program.commands)
    assert result.total_cycles < 5_000
