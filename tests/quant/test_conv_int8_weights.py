"""Weight-only int8 convolutions (issue 30): ``conv2d(x, w_int8.to(x.dtype))`` (its scale
applied to the result) or ``conv2d(x, w_int8.to(x.dtype) * scale)`` with a scale per
output channel. The convolution reads the int8 weights at one byte each and the arrays
widen them on the way in, as the weight-only matmuls do; before, a kernel of its own
dequantized the weights and wrote them back in 16 bits for the convolution to read."""

from __future__ import annotations

import pytest
import torch

from archsim.app.pipeline import run
from archsim.app.workload import Workload
from compiler.ir.dtypes import DType
from compiler.ir.ops import Load, MatMul
from reports.summary import summary

O, C, K, HW = 256, 256, 3, 7


class Int8Conv(torch.nn.Module):
    """A 3x3 convolution of int8 weights and a bf16 scale per output channel."""

    def __init__(self, scale_first: bool, groups: int = 1) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.register_buffer("w", torch.randint(-128, 128, (O, C // groups, K, K),
                                                dtype=torch.int8))
        self.register_buffer("s", (torch.rand(O, 1, 1, 1) / 256 + 1e-3).to(torch.bfloat16))
        self.scale_first, self.groups = scale_first, groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = torch.nn.functional.conv2d
        if self.scale_first:
            return conv(x, self.w.to(x.dtype) * self.s, None, 1, 1, 1, self.groups)
        return conv(x, self.w.to(x.dtype), None, 1, 1, 1, self.groups) * self.s.view(1, -1, 1, 1)


class Bf16Conv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(O, C, K, K, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(x, self.w, None, 1, 1)


def _run(model: torch.nn.Module, preset: str = "tpu-v3"):
    """The functional run (which checks its outputs against torch's itself) and torch's
    result."""
    torch.manual_seed(1)
    x = torch.randn(1, C, HW, HW, dtype=torch.bfloat16)
    return run(Workload.of_module(model, (x,)), preset, mode="functional"), model(x)


def _output(result) -> torch.Tensor:
    """The run's result: the one image-shaped DRAM tensor that is not the input."""
    (out,) = [v for k, v in result.outputs.items()
              if v.shape == (1, O, HW, HW) and not k.startswith("args_")]
    return torch.from_numpy(out.astype("float32"))


@pytest.mark.parametrize("scale_first", [False, True])
def test_int8_weights_are_read_at_a_byte_and_widened_on_the_way_in(scale_first: bool) -> None:
    result, want = _run(Int8Conv(scale_first))
    bf16, _ = _run(Bf16Conv())
    # tpu-v3 has one core: the same tiling reads the input alike, the weights once;
    # the int8 run reads them at one byte instead of two, plus the scales (2 bytes each)
    assert result.dram_bytes_read == bf16.dram_bytes_read - O * C * K * K + 2 * O
    matmuls = [c.op for c in result.program.commands if isinstance(c.op, MatMul)]
    assert {(op.a.dtype, op.b.dtype) for op in matmuls} == {(DType.bf16, DType.i8)}
    assert "i8 weights widened to bf16 on the way in" in summary(result)
    assert result.total_cycles < bf16.total_cycles  # a weight-bound 7x7 layer
    out = _output(result)
    # torch rounds the scaled weights to bf16 before multiplying (scale_first); the
    # arrays multiply the exact int8 weights and scale the result: the same to bf16's
    # rounding of each
    torch.testing.assert_close(out, want.float(), rtol=2e-2,
                               atol=2e-2 * want.abs().max().item())


def test_a_grouped_convolution_keeps_the_dequantizing_kernel() -> None:
    result, want = _run(Int8Conv(True, groups=4))
    loads = {c.op.dst.dtype for c in result.program.commands if isinstance(c.op, Load)}
    assert DType.i8 in loads  # the weights are still read as stored ...
    matmuls = [c.op for c in result.program.commands if isinstance(c.op, MatMul)]
    assert {op.b.dtype for op in matmuls} == {DType.bf16}  # ... widened by a kernel first
    out = _output(result)
    torch.testing.assert_close(out, want.float(), rtol=2e-2,
                               atol=2e-2 * want.abs().max().item())
