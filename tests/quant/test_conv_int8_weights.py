"""Weight-only int8 convolutions (issue 30): ``conv2d(x, w_int8.to(x.dtype))`` (its scale
applied to the result) or ``conv2d(x, w_int8.to(x.dtype) * scale)`` with a scale per
output channel. The convolution reads the int8 weights at one byte each and the arrays
widen them on the way in, as the weight-only matmuls do; before, a kernel of its own
dequantized the weights and wrote them back in 16 bits for the convolution to read."""

from __future__ import annotations

import math

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


def _weight_bytes(result) -> int:
    """The bytes a run's loads read of the weights (``b_model_w``)."""
    item = result.program.tensor("b_model_w").dtype.itemsize
    return sum(math.prod(c.op.src.shape) * item for c in result.program.commands
               if isinstance(c.op, Load) and c.op.src.tensor == "b_model_w")


def _output(result) -> torch.Tensor:
    """The run's result: the one image-shaped DRAM tensor that is not the input."""
    (out,) = [v for k, v in result.outputs.items()
              if v.shape == (1, O, HW, HW) and not k.startswith("args_")]
    return torch.from_numpy(out.astype("float32"))


@pytest.mark.parametrize("scale_first", [False, True])
def test_int8_weights_are_read_at_a_byte_and_widened_on_the_way_in(scale_first: bool) -> None:
    result, want = _run(Int8Conv(scale_first))
    bf16, _ = _run(Bf16Conv())
    # tpu-v3 has one core: each run reads its weights once, the int8 one at a byte each
    assert _weight_bytes(result) == O * C * K * K
    assert _weight_bytes(bf16) == 2 * O * C * K * K
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


class Overflowing(torch.nn.Module):
    """Weights of 100 at a scale of 1e-3: the unscaled sums (~10^5) overflow f16, the
    scaled results (~10^2) do not."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("w", torch.full((32, 64, 3, 3), 100, dtype=torch.int8))
        self.register_buffer("s", torch.full((32, 1, 1, 1), 1e-3, dtype=torch.float16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(x, self.w.to(x.dtype) * self.s, None, 1, 1)


@pytest.mark.parametrize("preset", ["tpu-v4", "atom"])
def test_the_scaled_sums_stay_in_f32_until_scaled(preset: str) -> None:
    # a reviewer's case: the convolution wrote its unscaled sums in f16 (inf)
    torch.manual_seed(0)
    x = torch.rand(1, 64, 9, 9, dtype=torch.float16) * 4
    model = Overflowing()
    result = run(Workload.of_module(model, (x,)), preset, mode="functional")  # checks
    (out,) = [v for k, v in result.outputs.items()
              if v.shape == (1, 32, 9, 9) and not k.startswith("args_")]
    want = model(x)
    assert torch.isfinite(want).all() and want.abs().max() > 100
    torch.testing.assert_close(torch.from_numpy(out.astype("float32")), want.float(),
                               rtol=2e-3, atol=0.25)


@pytest.mark.parametrize(("preset", "overrides"), [
    ("atom", {}),                                   # the packed mappings are candidates
    ("atom", {"core.scratchpad.size_bytes": 16384}),  # the per-tap kernel
    ("ascend-910b", {}),
])
def test_every_mapping_that_takes_them_reads_int8(preset: str, overrides: dict) -> None:
    from archsim.config.load import load_config

    config = load_config(preset).with_overrides(overrides)
    torch.manual_seed(1)
    x = torch.randn(2, 32, 11, 11, dtype=torch.bfloat16)
    model = Int8Conv(True)
    model.w = model.w[:48, :32].contiguous()
    model.s = model.s[:48].contiguous()
    result = run(Workload.of_module(model, (x,)), config, mode="functional")  # checks
    matmuls = [c.op for c in result.program.commands if isinstance(c.op, MatMul)]
    assert matmuls and {op.b.dtype for op in matmuls} == {DType.i8}
