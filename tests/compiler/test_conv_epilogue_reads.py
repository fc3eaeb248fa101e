"""A fused epilogue's DRAM reads in the implicit GEMM's estimate
(:func:`compiler.kernels.conv_geometry.epilogue_reads`): the operands the size of the
output it reads (a residual), not the per-channel ones (a batch norm's scale and shift)
nor the values it computes in the scratchpad, which ``epilogue_bytes`` counts for
capacity. Counting those as DRAM traffic made a ResNet's convolutions look DMA-bound
and took the wrong tiles (ResNet-50 on atom 1,013,901 -> 868,759 cycles once fixed)."""

from __future__ import annotations

import inspect

import pytest
import torch

import compiler
import compiler.kernels.conv as conv
from compiler import CompileOptions
from compiler.compile import clear_cache
from compiler_helpers import config


class _Block(torch.nn.Module):
    def __init__(self, residual: bool) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 16, 3, 1, 1, bias=False)
        self.bn = torch.nn.BatchNorm2d(16)
        self.residual = residual

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.conv(x))
        return torch.relu(y + skip if self.residual else y)


@pytest.mark.parametrize(("residual", "dtype", "reads"), [
    (False, torch.float32, 0),   # batch norm and ReLU: per-channel operands only
    (True, torch.float32, 4),    # plus the residual, one f32 element an output element
    (True, torch.float16, 2),
])
def test_only_output_sized_operands_count(residual: bool, dtype: torch.dtype, reads: int,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    real = conv.choose_conv_tiling

    def spy(*args, **kwargs):
        bound = inspect.signature(real).bind(*args, **kwargs).arguments
        seen.append((bound["epi"], bound["epi_dram"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(conv, "choose_conv_tiling", spy)
    model = _Block(residual).eval().to(dtype)
    x, skip = torch.randn(1, 16, 12, 12, dtype=dtype), torch.randn(1, 16, 12, 12, dtype=dtype)
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(model, (x, skip)), config("atom"),
                                      CompileOptions())
    clear_cache()
    (out,), _ = compiled.run(x, skip)
    torch.testing.assert_close(out, model(x, skip), rtol=2e-2, atol=2e-2)
    epi, epi_dram = seen[0]
    assert epi_dram == reads
    assert epi > epi_dram  # the scratchpad holds more than DRAM supplies
