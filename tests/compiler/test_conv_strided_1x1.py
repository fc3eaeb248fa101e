"""1x1 stride-2 convolutions (ResNet's shortcuts) and other convolutions whose weights
the array reads as stored (compiler.kernels.conv_packed.weights_as_stored): the
mapping, its cycles derived by hand, the short last row tile, and torch's numbers."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import compiler.kernels.conv as conv
from archsim.simulator import Simulator
from compiler import compile_op
from compiler.compile import clear_cache
from compiler.ir.ops import Load, MatMul, Transpose
from compiler_helpers import ARRAY, config

aten = torch.ops.aten

def _compile(x, w, stride, padding=0, groups=1, cfg=ARRAY, packed=None):
    """The convolution compiled; ``packed`` (a function of the chosen packed tiling)
    forces the packed kernel with that tiling (not the implicit GEMM, nor a depthwise
    convolution's vector kernel)."""
    original, depthwise = conv.choose_packed_tiling, conv.is_depthwise
    try:
        if packed is not None:
            conv.choose_conv_tiling, saved = (lambda *a, **k: None), conv.choose_conv_tiling
            conv.choose_packed_tiling = lambda *a, **k: packed(original(*a, **k))
            conv.is_depthwise = lambda node: False
        clear_cache()
        return compile_op(aten.convolution.default,
                          (x, w, None, [stride] * 2, [padding] * 2, [1, 1], False, [0, 0],
                           groups), {}, cfg)
    finally:
        if packed is not None:
            conv.choose_conv_tiling = saved
        conv.choose_packed_tiling, conv.is_depthwise = original, depthwise
        clear_cache()


def test_strided_1x1_is_one_gemm_on_the_weights_as_stored():
    # 16 -> 32 channels, 1x1, stride 2, 16x16 -> 8x8 (64 pixels): one tile
    torch.manual_seed(0)
    x, w = torch.randn(1, 16, 16, 16), torch.randn(32, 16, 1, 1)
    compiled = _compile(x, w, 2)
    (why,) = compiled.choices.values()
    assert why.startswith("taps packed into K")
    ops = [c.op for c in compiled.program.commands]
    (mm,) = [op for op in ops if isinstance(op, MatMul)]
    # pixels stream (every other loaded column), the stationary tile is W^T read from
    # the weights as loaded [32, 16]: no rearrangement, the only transpose is the
    # output's to NCHW
    assert mm.a.shape == (8, 8, 16) and mm.a.strides == (15, 2, 120)
    assert mm.b.shape == (16, 32) and mm.b.strides == (1, 16)
    (tr,) = [op for op in ops if isinstance(op, Transpose)]
    assert tr.src.shape == (64, 32)
    (out,), result = compiled.run(x, w)
    torch.testing.assert_close(out, torch.nn.functional.conv2d(x, w, None, 2),
                               rtol=1e-4, atol=1e-3)
    # By hand. A transfer's fixed cycles: DMA setup 10 + DRAM 20 + NoC 5 = 35. The
    # weights (32 x 16 x 4 B = 2,048) load on the load queue and, the store queue
    # being empty, the input windows on the store queue at the same time: 16 channels
    # x 8 rows of 15 columns (60 B, one 64 B run at the 16 B granule) = 8,192 B. Both
    # share the DRAM link's 4,096 B/cycle: 35 + ceil(10,240 / 4,096) = 38. The matmul
    # is one ws fold with one weight buffer: 2 x 128 + 128 + 64 - 2 = 446. The
    # transpose to NCHW: 64 x 32 / 128 lanes + 2 latency = 18. The store: 35 + 8,192 /
    # 4,096 = 37.
    loads = [c.engine for c in compiled.program.commands if isinstance(c.op, Load)]
    assert sorted(loads) == ["core0.dma0", "core0.dma1"]
    assert result.engine_busy_cycles["core0.mxu0"] == 446
    assert result.total_cycles == 38 + 446 + 18 + 37


def test_resnet_shortcut_takes_a_short_last_row_tile():
    # ResNet-18's conv3 shortcut (64 -> 128, 1x1, stride 2, 56x56 -> 28x28) on one
    # 128x128 array. Two row tiles let the first tile's transpose to NCHW run under
    # the second's matmul; a short second tile leaves less after the last matmul.
    x = torch.empty(1, 64, 56, 56, device="meta")
    w = torch.empty(128, 64, 1, 1, device="meta")
    chosen = _compile(x, w, 2)
    rows = [op.a.shape[0] for op in (c.op for c in chosen.program.commands)
            if isinstance(op, MatMul)]
    assert sum(rows) == 28 and len(rows) == 2 and rows[0] > rows[1]
    even = _compile(x, w, 2, packed=lambda t: dataclasses.replace(t, out_rows=14))
    cycles = [Simulator(ARRAY).run(c.program).total_cycles for c in (chosen, even)]
    # Each matmul is one fold, 382 + 28 x rows: both schedules keep the array busy
    # 2 x 382 + 784 cycles. After the last matmul the even split transposes 392 pixels
    # x 128 channels at 128 lanes (392 + 2 cycles), the chosen 21 + 7 split 196 (198),
    # after the 12 cycles the first tile's transpose (590) outlasts the second matmul
    # (578): 184 fewer. The chosen split's first load is 7 rows (98,560 B) longer and
    # its last store 7 rows (100,352 B) shorter, ~24 cycles each at 4,096 B/cycle:
    # they cancel up to rounding.
    assert abs(cycles[1] - cycles[0] - (394 - 198 - 12)) <= 8
    assert Simulator(ARRAY).run(chosen.program).engine_busy_cycles["core0.mxu0"] == \
        2 * (2 * 128 + 128 - 2) + 28 * 28


@pytest.mark.parametrize("preset", ["tiny", "edge"])
@pytest.mark.parametrize("shape", [
    # channels, filters, kernel, stride, padding, groups, taps per pack
    (8, 12, 1, 2, 1, 2, 1),  # 1x1 grouped, padded: K = channels as stored
    (6, 6, 3, 2, 1, 6, 4),  # depthwise 3x3 in packs of 4 taps: K = taps as stored
])
def test_weights_as_stored_match_torch(shape, preset):
    c, f, k, stride, padding, groups, taps = shape
    torch.manual_seed(0)
    x, w = torch.randn(2, c, 11, 9), torch.randn(f, c // groups, k, k)
    # two output rows and at most 4 channels a tile: many tiles a core, so the weight
    # buffers rotate (twice the operand sets: weights_as_stored)
    compiled = _compile(x, w, stride, padding, groups, cfg=config(preset),
                        packed=lambda t: dataclasses.replace(
                            t, taps=taps, out_rows=2, out_channels=min(4, f // groups)))
    ops = [c.op for c in compiled.program.commands]
    weights = {op.b.strides for op in ops if isinstance(op, MatMul)}
    assert weights == {(1, c // groups * k * k)}  # every matmul reads them as stored
    assert all(len(op.src.shape) == 2 for op in ops if isinstance(op, Transpose))
    (out,), _ = compiled.run(x, w)
    want = torch.nn.functional.conv2d(x, w, None, stride, padding, 1, groups)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-3)
