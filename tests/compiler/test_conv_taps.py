"""``runtime.conv_taps``: with ``one`` (the TPU presets, as XLA runs convolutions) every
matmul of a windowed convolution takes one tap's input channels as its K; with
``packed`` (archsim's own compiler) taps share a K where the cost model finds it pays."""

from __future__ import annotations

import math

import pytest
import torch

from archsim.config.load import load_config
from archsim.simulator import Simulator
from compiler import compile_op
from compiler.compile import clear_cache
from compiler.ir.ops import MatMul
from compiler_helpers import ARRAY, tolerance

aten = torch.ops.aten


def _stem(config, x: torch.Tensor, w: torch.Tensor):
    """A 7x7/2 convolution (padding 3) of ``x`` by ``w`` compiled for ``config``."""
    clear_cache()
    compiled = compile_op(aten.convolution.default,
                          (x, w, None, [2, 2], [3, 3], [1, 1], False, [0, 0], 1), {}, config)
    clear_cache()
    return compiled


def _matmuls(compiled) -> list[MatMul]:
    return [c.op for c in compiled.program.commands if isinstance(c.op, MatMul)]


def test_the_tpu_presets_run_a_tap_a_matmul() -> None:
    for name in ("tpu-v3", "tpu-v4"):
        assert load_config(name).runtime.conv_taps == "one"
    assert load_config("atom").runtime.conv_taps == "packed"


def test_one_tap_a_matmul_costs_a_fold_a_tap() -> None:
    # The stem of a 32x32 RGB image on one 128x128 weight-stationary array: 49 taps
    # of K = 3 over 16 x 16 = 256 output pixels and 64 filters. A tap a matmul: every
    # matmul is one fold (K = 3 <= 128 rows, N = 64 <= 128 columns) costing
    # R to shift the weights in + R + C - 2 to fill and drain + T rows streamed
    # (2 x 128 + 128 - 2 = 382 + T), and the taps stream every pixel once: T sums to
    # 49 x 256.
    x = torch.empty(1, 3, 32, 32, device="meta")
    w = torch.empty(64, 3, 7, 7, device="meta")
    one = _stem(ARRAY.with_overrides({"runtime.conv_taps": "one"}), x, w)
    matmuls = _matmuls(one)
    assert {(op.a.shape[-1], op.b.shape) for op in matmuls} == {(3, (3, 64))}
    streamed = sum(math.prod(op.a.shape[:-1]) for op in matmuls)
    assert streamed == 49 * 256
    busy = Simulator(ARRAY).run(one.program).engine_busy_cycles["core0.mxu0"]
    assert busy == 382 * len(matmuls) + streamed
    assert "a tap a matmul (runtime.conv_taps: one)" in one.choices["convolution_default"]
    assert "packed taps" not in one.choices["convolution_default"]
    # archsim's own mapping packs taps into K (fewer, deeper matmuls) and is faster
    packed = _stem(ARRAY, x, w)
    assert max(op.a.shape[-1] for op in _matmuls(packed)) > 3
    assert Simulator(ARRAY).run(packed.program).total_cycles < \
        Simulator(ARRAY).run(one.program).total_cycles


@pytest.mark.parametrize(("preset", "dtype"), [("tpu-v4", torch.bfloat16),
                                               ("tpu-v3", torch.float32)])
@pytest.mark.parametrize(("cin", "k", "stride", "pad"), [(3, 7, 2, 3), (8, 3, 1, 1)])
def test_one_tap_numbers_match_torch(preset: str, dtype: torch.dtype, cin: int, k: int,
                                     stride: int, pad: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, cin, 19, 19).to(dtype)
    w = (torch.randn(24, cin, k, k) / (cin * k * k) ** 0.5).to(dtype)
    args = (x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1)
    clear_cache()
    compiled = compile_op(aten.convolution.default, args, {}, load_config(preset))
    clear_cache()
    assert {op.a.shape[-1] for op in _matmuls(compiled)} <= {cin}
    (out,), _ = compiled.run(x, w)
    torch.testing.assert_close(out, aten.convolution.default(*args), **tolerance(dtype))


def test_the_choice_says_a_tap_a_matmul_only_where_there_are_taps() -> None:
    tpu = load_config("tpu-v4")
    x = torch.empty(1, 64, 14, 14, dtype=torch.bfloat16, device="meta")
    for k, noted in ((3, True), (1, False)):  # a 1x1 convolution has one tap anyway
        w = torch.empty(64, 64, k, k, dtype=torch.bfloat16, device="meta")
        clear_cache()
        compiled = compile_op(aten.convolution.default,
                              (x, w, None, [1, 1], [k // 2] * 2, [1, 1], False, [0, 0], 1),
                              {}, tpu)
        choice = compiled.choices["convolution_default"]
        assert ("a tap a matmul (runtime.conv_taps: one)" in choice) is noted, choice
    clear_cache()
