"""``F.relu6`` kept whole by torch.export (no ``run_decompositions()``) is a clamp, so
it runs as the convolution's epilogue: it was a vector kernel of its own, a round trip
of the activation through memory (``nn.ReLU6`` exports as hardtanh and always fused)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import compiler
from compiler.compile import clear_cache
from compiler_helpers import config


class ConvRelu6(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu6(self.conv(x))


def test_f_relu6_is_the_convolutions_epilogue():
    torch.manual_seed(0)
    model, x = ConvRelu6().eval(), torch.randn(1, 8, 16, 16) * 4
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(model, (x,)), config("atom"))
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    assert compiled.kernels == ("conv:conv2d",)
    assert out.max() == 6.0 and out.min() == 0.0
