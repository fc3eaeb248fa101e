"""Depthwise convolutions on the vector unit (compiler.kernels.conv_depthwise): one
multiply and one add per tap over a tile of channels, against torch on CPU, in either
memory format, and chosen over the arrays' per-channel matmuls when the estimate says
so."""

from __future__ import annotations

import pytest
import torch

import compiler
import compiler.kernels.conv as conv_kernel
from compiler.compile import clear_cache
from compiler.ir.ops import Binary, BinaryKind, MatMul
from compiler_helpers import config

CL = torch.channels_last


def _compiled(model, x, preset="atom"):
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(model, (x,)), config(preset))
    (out,), result = compiled.run(x)
    want = model(x)
    tol = {"rtol": 2e-3, "atol": 2e-3} if x.dtype == torch.float16 else \
        {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(out, want, **tol)
    return compiled, result


@pytest.mark.parametrize("channels,k,stride,pad,dilation,hw,bias,layout,dtype", [
    (32, 3, 1, 1, 1, 14, False, torch.contiguous_format, torch.float32),
    (24, 3, 2, 1, 1, 15, True, torch.contiguous_format, torch.float32),   # stride 2
    (16, 5, 1, 2, 1, 9, False, CL, torch.float32),                        # NHWC image
    (8, 3, 1, 2, 2, 10, True, CL, torch.float32),                         # dilated
    (40, 7, 1, 3, 1, 12, True, torch.contiguous_format, torch.float32),   # ConvNeXt's 7x7
    (32, 3, 1, 1, 1, 14, False, torch.contiguous_format, torch.float16),  # widened to f32
])
def test_depthwise_on_the_vector_unit_matches_torch(channels, k, stride, pad, dilation,
                                                    hw, bias, layout, dtype):
    torch.manual_seed(0)
    model = torch.nn.Conv2d(channels, channels, k, stride, pad, dilation, groups=channels,
                            bias=bias).to(dtype).to(memory_format=layout)
    x = torch.randn(2, channels, hw, hw, dtype=dtype).to(memory_format=layout)
    compiled, _ = _compiled(model, x)
    choice = [c for s, c in compiled.choices.items() if "conv" in s][0]
    assert choice.startswith("depthwise on the vector unit (estimated: vector unit ")
    commands = [c.op for c in compiled.program.commands]
    assert not any(isinstance(op, MatMul) for op in commands)
    # per tile: a multiply per tap, an add into the accumulator per tap but the first
    # (the border's zero fills are adds of scalars)
    muls = sum(isinstance(op, Binary) and op.kind is BinaryKind.mul for op in commands)
    adds = sum(isinstance(op, Binary) and op.kind is BinaryKind.add and op.a == op.dst
               for op in commands)
    assert muls > 0 and muls % (k * k) == 0 and adds == muls // (k * k) * (k * k - 1)


def test_a_mobilenet_layer_is_several_times_faster_than_per_channel_matmuls(monkeypatch):
    # MobileNetV2's 3x3 depthwise layer at 56x56, 144 channels: as matmuls every channel
    # is its own group (K = N = 1, an array fold per channel and tap)
    torch.manual_seed(0)
    model = torch.nn.Conv2d(144, 144, 3, 1, 1, groups=144, bias=False)
    x = torch.randn(1, 144, 56, 56)
    _, vector = _compiled(model, x, "tpu-v4")
    monkeypatch.setattr(conv_kernel, "is_depthwise", lambda node: False)
    compiled, arrays = _compiled(model, x, "tpu-v4")
    assert not [c for s, c in compiled.choices.items() if "conv" in s][0].startswith(
        "depthwise")
    assert vector.total_cycles * 4 < arrays.total_cycles


def test_a_grouped_convolution_with_several_channels_a_group_keeps_the_arrays():
    torch.manual_seed(0)
    model = torch.nn.Conv2d(32, 32, 3, 1, 1, groups=8, bias=False)
    compiled, _ = _compiled(model, torch.randn(1, 32, 10, 10))
    assert not [c for s, c in compiled.choices.items() if "conv" in s][0].startswith(
        "depthwise")
