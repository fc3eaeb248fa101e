"""Convolution keeps the systolic arrays busy: a ResNet-stage 3x3 conv (64 -> 64 channels,
56x56, f16), performance-only. The floors are what the implicit-GEMM schedule reaches
(output pixels streamed through weight-stationary arrays), counting only the conv's own
FLOPs (not the dropped columns the schedule also computes); the pad kernel in front of
the conv is part of the measured time."""

from __future__ import annotations

import pytest
import torch

from archsim.simulator import Simulator
from compiler import compile_op
from compiler_helpers import config

aten = torch.ops.aten

FLOORS = {"atom": 0.30, "tpu-v3": 0.14}
"""Useful matrix utilization (atom 0.324 since the pad kernel spreads its border stores
and interior copy over every core, 0.271 before; tpu-v3 (one core) 0.156; 0.03 before
the pixel-streaming schedule)."""


@pytest.mark.parametrize("preset", sorted(FLOORS))
def test_resnet_conv3x3_keeps_arrays_busy(preset: str) -> None:
    x = torch.empty(1, 64, 56, 56, dtype=torch.float16, device="meta")
    w = torch.empty(64, 64, 3, 3, dtype=torch.float16, device="meta")
    cfg = config(preset)
    compiled = compile_op(aten.convolution.default,
                          (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), {}, cfg)
    result = Simulator(cfg).run(compiled.program)
    conv_flops = 2 * 64 * 64 * 3 * 3 * 56 * 56
    assert result.matmul_flops >= conv_flops
    useful = conv_flops / result.seconds / cfg.peak_flops
    assert useful >= FLOORS[preset], f"{preset}: useful matrix utilization {useful:.3f}"
