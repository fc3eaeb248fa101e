"""Depthwise convolutions on the vector unit (compiler.kernels.conv_depthwise): one
multiply and one add per tap over a tile of channels, against torch on CPU, in either
memory format, and chosen over the arrays' per-channel matmuls when the estimate says
so."""

from __future__ import annotations

import pytest
import torch

import compiler
import compiler.kernels.conv as conv_kernel
import compiler.kernels.conv_depthwise as dw
from archsim.errors import CapacityError
from compiler.compile import clear_cache
from compiler.ir.ops import Binary, BinaryKind, Cast, Load, MatMul, MulAdd, Store
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
    # per tile: a multiply for the first tap, then a multiply-add into the accumulator
    # per other tap, chained (the sum held in registers)
    muls = [op for op in commands if isinstance(op, Binary) and op.kind is BinaryKind.mul]
    muladds = [op for op in commands if isinstance(op, MulAdd)]
    assert muls and len(muladds) == len(muls) * (k * k - 1)
    assert all(op.chained and op.acc == op.dst for op in muladds)
    assert {op.dst for op in muls} == {op.dst for op in muladds}


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


# ---------------------------------------------------------------- the estimate and the tiles
#
# The cost model compares the depthwise estimate with the arrays' mappings, so it must
# track the simulated cycles. Small cases are derived by hand on `tiny` (4 lanes, vector
# latency 2, DMA 16 B/cycle on two engines, DRAM 16 B/cycle sustained x 0.85, a
# transfer's latency 10 + 20 + 5 = 35 cycles).

TINY_LATENCY = 10 + 20 + 5
TINY_DRAM = 16 * 0.85


def _forced(monkeypatch, ct: int | None = None, ty: int | None = None) -> dict:
    """Make the lowering take tiles of ``ct`` channels and ``ty`` output rows (None: the
    chooser's) and record the tiling and its context."""
    seen: dict = {}
    choose = dw.choose_depthwise_tiling

    def forced(ctx, kernel):
        tiling = choose(ctx, kernel) if ct is None else \
            dw.DepthwiseTiling(ct, ty, dw._estimate(ctx, kernel, ct, ty))
        seen.update(tiling=tiling, config=ctx.config, ctx=ctx, kernel=kernel)
        return tiling
    monkeypatch.setattr(conv_kernel, "choose_depthwise_tiling", forced)
    return seen


def _run(model, x, cfg):
    """Compile for ``cfg``, run functionally, check torch's numbers; (program, result)."""
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(model, (x,)), cfg)
    clear_cache()
    (out,), result = compiled.run(x)
    tol = {"rtol": 2e-3, "atol": 2e-3} if x.dtype == torch.float16 else \
        {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(out, model(x), **tol)
    return compiled, result


def test_one_tile_a_core_by_hand(monkeypatch):
    # 8 channels, 6x6, 3x3 padding 1, two images: one tile of all 8 channels and 6 rows
    # per image, one per core. The window is 8x8; its border fills: the top and bottom
    # rows (64 elements: 2 + 16 cycles each), the left and right columns of the 6 rows
    # between (48: 2 + 12 each) = 64 cycles. A multiply and 8 multiply-adds over 288
    # outputs: 9 x (2 + 72) = 666. The tile's bytes: weights 288 + interior 1152 in,
    # 1152 out.
    seen = _forced(monkeypatch, 8, 6)
    torch.manual_seed(0)
    model = torch.nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False)
    compiled, result = _run(model, torch.randn(2, 8, 6, 6), config("tiny"))
    cost = seen["tiling"].cost
    assert cost.vpu_cycles == 64 + 666
    assert result.engine_busy_cycles["core0.vpu"] == result.engine_busy_cycles["core1.vpu"] \
        == 64 + 666
    assert cost.dram_bytes == 2 * (288 + 1152 + 1152)
    assert cost.dma_cycles == (288 + 1152) / 16  # loads at 16 B/cycle, stores beside
    # every core's one tile: loads, compute and store all in DRAM's time, then the
    # compute the DRAM waits for, then the first load's and the last store's latency
    estimate = cost.estimate(seen["config"])
    assert estimate == pytest.approx(2 * TINY_LATENCY + 5184 / TINY_DRAM + 730)
    assert abs(estimate / result.total_cycles - 1) < 0.10
    # one DMA queue loads, the other stores; every command is the convolution's
    commands = compiled.program.commands
    assert {c.engine for c in commands if isinstance(c.op, Load)} == {"core0.dma0",
                                                                       "core1.dma0"}
    assert {c.engine for c in commands if isinstance(c.op, Store)} == {"core0.dma1",
                                                                        "core1.dma1"}
    assert {c.source for c in commands} == {c.source for c in commands if
                                            isinstance(c.op, Load)} == {"conv2d"}


def test_three_row_tiles_an_image_on_one_core_by_hand(monkeypatch):
    # The same layer on one core in tiles of 2 output rows: 3 row tiles an image, 6
    # tiles, two buffer sets (the top tile of the second image reuses the set the
    # middle tile of the first filled: its border must be zeroed again, every channel).
    # Windows 4x8. Fills: top tile a top row (64 elements, 18 cycles) and the side
    # columns of 3 rows (24: 8 each) = 34; middle tile the side columns of 4 rows (32:
    # 10 each) = 20; bottom tile 34. Taps over 96 outputs: 9 x (2 + 24) = 234.
    seen = _forced(monkeypatch, 8, 2)
    torch.manual_seed(0)
    model = torch.nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False)
    compiled, result = _run(model, torch.randn(2, 8, 6, 6) + 1,
                            config("tiny").with_overrides({"cores": 1}))
    cost = seen["tiling"].cost
    vpu = 2 * (34 + 20 + 34 + 3 * 234)
    assert cost.vpu_cycles == result.engine_busy_cycles["core0.vpu"] == vpu == 1580
    # in: 288 weights a tile, interiors of 3, 4 and 3 rows (576, 768, 576); out 384
    assert cost.dram_bytes == 2 * (3 * 288 + 576 + 768 + 576 + 3 * 384)
    assert cost.dma_cycles == 2 * (3 * 288 + 576 + 768 + 576) / 16  # the load queue's
    # the vector unit is busiest: all its tiles, then the mean tile's load and store
    # around them (58 and 24 cycles at 16 B/cycle)
    estimate = cost.estimate(seen["config"])
    assert estimate == pytest.approx(2 * TINY_LATENCY + vpu + 348 / 6 + 144 / 6)
    assert abs(estimate / result.total_cycles - 1) < 0.10
    # the next tile's window loads while this one computes
    commands = compiled.program.commands
    windows = [c.id for c in commands if isinstance(c.op, Load) and c.op.dst.strides]
    taps = [c.id for c in commands if isinstance(c.op, MulAdd)]
    assert result.starts[windows[1]] < result.ends[taps[7]]
    assert {c.engine for c in commands if isinstance(c.op, Load)} == {"core0.dma0"}
    # the scratchpad, 64-byte aligned, per set: the window [8, 4, 8] f32 (1,024 B), the
    # weights [8, 9] (288: 320 aligned), the accumulator [8, 12] (384)
    assert compiled.program.sram_high_water["sram0"] == 2 * 1024 + 320 + 288 + 32 + 2 * 384


class _ScaleShift(torch.nn.Module):
    """A folded batch norm: two per-channel operands, the shift's add chained."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.register_buffer("scale", torch.rand(channels, 1, 1) + 0.5)
        self.register_buffer("shift", torch.rand(channels, 1, 1) - 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.shift


class _ScaleShiftReLU6(_ScaleShift):
    """MobileNet's folded batch norm and ReLU6: per-channel operands the epilogue loads."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.hardtanh(super().forward(x), 0.0, 6.0)


@pytest.mark.parametrize("preset,channels,size,k,stride,dtype,layout,epilogue", [
    ("atom", 32, 14, 3, 1, torch.float32, torch.contiguous_format, False),
    ("atom", 16, 14, 3, 2, torch.float16, CL, False),
    ("tpu-v4", 16, 14, 5, 1, torch.float32, torch.contiguous_format, False),
    ("tpu-v3", 16, 14, 3, 1, torch.float32, torch.contiguous_format, False),
    ("ascend-910b", 64, 14, 3, 1, torch.float32, torch.contiguous_format, True),
    ("atom", 24, 14, 3, 1, torch.float32, torch.contiguous_format, True),
])
def test_the_estimate_is_within_a_quarter_of_the_simulated_cycles(
        monkeypatch, preset, channels, size, k, stride, dtype, layout, epilogue):
    # benchmarks/depthwise_estimate.py: 0.86-1.22 over MobileNetV2's layers and others
    seen = _forced(monkeypatch)
    torch.manual_seed(0)
    layers = [torch.nn.Conv2d(channels, channels, k, stride, k // 2, groups=channels,
                              bias=False)]
    model = torch.nn.Sequential(*layers, *([_ScaleShiftReLU6(channels)] if epilogue else []))
    model = model.to(dtype).to(memory_format=layout)
    x = torch.randn(1, channels, size, size, dtype=dtype).to(memory_format=layout)
    compiled, result = _run(model, x, config(preset))
    cost = seen["tiling"].cost
    assert 0.8 < cost.estimate(seen["config"]) / result.total_cycles < 1.25
    if not epilogue:  # the vector unit's commands as the simulator times them
        assert cost.vpu_cycles == result.engine_busy_cycles["core0.vpu"]


def test_the_window_of_a_kernel_stride_and_dilation_of_two_shapes(monkeypatch):
    # 3x5 kernel, stride (2, 1), dilation (1, 2), padding (1, 4) on 7x9: 4x9 outputs.
    # Tiles of 2 output rows read windows of (2 - 1) x 2 + (3 - 1) x 1 + 1 = 5 rows and
    # (9 - 1) x 1 + (5 - 1) x 2 + 1 = 17 columns, widened from f16 whole.
    _forced(monkeypatch, 4, 2)
    torch.manual_seed(0)
    model = torch.nn.Conv2d(4, 4, (3, 5), (2, 1), (1, 4), (1, 2), groups=4).half()
    compiled, _ = _run(model, torch.randn(1, 4, 7, 9, dtype=torch.float16), config("atom"))
    windows = {c.op.src.shape for c in compiled.program.commands
               if isinstance(c.op, Cast) and len(c.op.src.shape) == 3}
    assert windows == {(4, 5, 17)}
    assert {c.source for c in compiled.program.commands} == {"conv2d"}


@pytest.mark.parametrize("channels,filters,groups,depthwise", [
    (2, 2, 2, True),     # two channels, each its own group
    (1, 1, 1, True),     # one channel, one filter
    (4, 1, 1, False),    # one filter over all the channels
    (4, 8, 4, False),    # two filters a channel
])
def test_which_convolutions_are_depthwise(channels, filters, groups, depthwise):
    torch.manual_seed(0)
    model = torch.nn.Conv2d(channels, filters, 3, 1, 1, groups=groups, bias=False)
    compiled, _ = _compiled(model, torch.randn(1, channels, 6, 6))
    choice = [c for s, c in compiled.choices.items() if "conv" in s][0]
    assert choice.startswith("depthwise") == depthwise


def test_windows_entirely_in_the_padding(monkeypatch):
    # padding 3 around a 2x2 image, one output row a tile: the first and last rows'
    # 3-row windows see no pixel (only fills, no load)
    _forced(monkeypatch, 4, 1)
    torch.manual_seed(0)
    model = torch.nn.Conv2d(4, 4, 3, 1, 3, groups=4)
    compiled, _ = _run(model, torch.randn(1, 4, 2, 2), config("tiny"))
    windows = [c for c in compiled.program.commands if isinstance(c.op, Load)
               and c.op.dst.strides]
    assert len(windows) == 4  # of the 6 output rows, 2 read pixels at each end


@pytest.mark.parametrize("noc", [12, 8])
def test_cores_on_one_dma_engine_by_hand(monkeypatch, noc):
    # 40 channels in tiles of 16 (16, 16, 8), one tile of all 6 rows each, on tiny's two
    # cores with one DMA engine each, a 64-lane vector unit and NoC links of 12 or 8
    # B/cycle.
    # Core 0 runs the first chunk and the last. Fills of 8x8 windows: top and bottom rows
    # (nc x 8), side columns (nc x 6): 4 x 4 cycles at 16 channels, 4 x 3 at 8. Taps
    # over 576 / 288 outputs: 9 x 11 / 9 x 7. Bytes: weights and interior nc x 180 in,
    # nc x 144 out.
    seen = _forced(monkeypatch, 16, 6)
    cfg = config("tiny").with_overrides({"core.dma.engines": 1, "core.vector.lanes": 64,
                                         "noc.link_bandwidth_bytes_per_cycle": noc})
    torch.manual_seed(0)
    model = torch.nn.Conv2d(40, 40, 3, 1, 1, groups=40, bias=False)
    compiled, result = _run(model, torch.randn(1, 40, 6, 6), cfg)
    cost = seen["tiling"].cost
    first, last = 16 + 9 * 11, 12 + 9 * 7
    assert cost.vpu_cycles == result.engine_busy_cycles["core0.vpu"] == first + last
    assert result.engine_busy_cycles["core1.vpu"] == first
    assert cost.dram_bytes == 40 * (180 + 144)
    # one engine loads and stores core 0's tiles at the NoC's rate
    queue = 24 * (180 + 144) / noc
    assert cost.dma_cycles == queue
    estimate = cost.estimate(seen["config"])
    if noc == 12:  # DRAM is busiest: every byte at 16 x 0.85 B/cycle, then a compute
        assert estimate == pytest.approx(2 * TINY_LATENCY + 40 * 324 / TINY_DRAM
                                         + (first + last) / 2)
    else:  # the queue is (972 cycles): then a mean tile's compute, before it its load
        assert estimate == pytest.approx(2 * TINY_LATENCY + queue + (first + last) / 2)
    # measured 1,190 / 1,073 and 1,209 / 1,168
    assert abs(estimate / result.total_cycles - 1) < 0.25
    assert {c.engine for c in compiled.program.commands if isinstance(c.op, (Load, Store))} \
        == {"core0.dma0", "core1.dma0"}


# tpu-v3: the vector unit's scratchpad bandwidth (832 B/cycle) bounds most of its
# commands, so each command's bytes count; op classes made to cost differently. Rows
# of 32 B (DRAM's access granularity) keep the DRAM bytes those the transfers ask for.
V3 = {"core.vector.costs.elementwise": 2, "core.vector.costs.cast": 3,
      "core.vector.costs.copy": 5}


@pytest.mark.parametrize("channels,size,k,stride,pad,dilation,tile,dtype,layout,epilogue", [
    # f16 in and out (widened, cast back), 16 rows in tiles of 3: a last tile of 1
    (128, 16, 3, 1, 1, 1, (128, 3), torch.float16, torch.contiguous_format, False),
    # stride 2, dilation 2, tiles of 3 rows out of 8
    (24, 16, 3, 2, 2, 2, (16, 3), torch.float32, torch.contiguous_format, False),
    # no padding on the rows, 2 on the columns
    (16, 8, (3, 5), 1, (0, 2), 1, (16, 4), torch.float32, torch.contiguous_format, False),
    # the per-channel epilogue, NCHW
    (48, 8, 3, 1, 1, 1, (32, 3), torch.float32, torch.contiguous_format, True),
    # NHWC with an epilogue: a channels-last copy first; f16 out
    (32, 16, 3, 2, 1, 1, (32, 3), torch.float16, CL, True),
])
def test_the_estimate_counts_the_simulators_vector_cycles_and_dram_bytes(
        monkeypatch, channels, size, k, stride, pad, dilation, tile, dtype, layout, epilogue):
    seen = _forced(monkeypatch, *tile)
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(channels, channels, k, stride, pad, dilation, groups=channels,
                           bias=False)
    model = torch.nn.Sequential(conv, *([_ScaleShiftReLU6(channels)] if epilogue else []))
    model = model.to(dtype).to(memory_format=layout)
    x = torch.randn(2, channels, size, size, dtype=dtype).to(memory_format=layout)
    _, result = _run(model, x, config("tpu-v3").with_overrides(V3))
    cost = seen["tiling"].cost
    assert cost.vpu_cycles == result.engine_busy_cycles["core0.vpu"]
    assert cost.dram_bytes == result.dram_bytes_read + result.dram_bytes_written


def test_the_tile_sizes_tried():
    # channels: 16, 32, 64 ... 512 or all of them; rows: the output rows split evenly
    assert dw._candidates(40, 6) == ([16, 32, 40], [1, 2, 3, 6])
    assert dw._candidates(600, 7) == ([16, 32, 64, 128, 256, 512, 600], [1, 2, 3, 4, 7])


def test_one_transfers_rate():
    # tiny: DMA 16 B/cycle, NoC link 32, scratchpad port 64: the slowest of the three
    tiny = config("tiny")
    assert dw._stream(tiny) == 16
    assert dw._stream(tiny.with_overrides({"noc.link_bandwidth_bytes_per_cycle": 12})) == 12
    assert dw._stream(tiny.with_overrides(
        {"core.scratchpad.port_bandwidth_bytes_per_cycle": 8})) == 8


@pytest.mark.parametrize("padding", [(1, 0), (0, 1), (1, 1)])
def test_a_reused_window_is_zeroed_again_where_the_padding_is(monkeypatch, padding):
    # one core, two buffer sets, 3 row tiles an image: the second image's top tile
    # takes the set the first image's middle tile filled with pixels (its corner
    # too, without column padding)
    _forced(monkeypatch, 8, 2)
    torch.manual_seed(0)
    model = torch.nn.Conv2d(8, 8, 3, 1, padding, groups=8)
    _run(model, torch.randn(2, 8, 6, 6) + 2, config("tiny").with_overrides({"cores": 1}))


@pytest.mark.parametrize("operands", [True, False])
def test_the_epilogues_operands_load_beside_the_window_by_hand(monkeypatch, operands):
    # test_one_tile_a_core_by_hand's tile (730 vector cycles) with a fused scale and
    # shift, one image on one core, DRAM 2,000 cycles away, 4 transfers in flight an
    # engine (as the presets): the finisher's loads of the two [8] operands (64 B, 4
    # cycles at 16 B/cycle) are issued after the multiply-adds, but the DMA engine runs
    # ahead of the vector unit: they start beside the window's, so their latency passes
    # with the window's and the epilogue waits for nothing; then the scale's pass (the
    # accumulator from the scratchpad, 2 + 72 cycles) and the shift's (chained, 74).
    # ReLU6 instead: its max and min passes cost the same.
    seen = _forced(monkeypatch, 8, 6)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False),
                                _ScaleShift(8) if operands else torch.nn.ReLU6())
    cfg = config("tiny").with_overrides({"cores": 1, "dram.latency_cycles": 2000,
                                         "core.dma.outstanding": 4})
    _, result = _run(model, torch.randn(1, 8, 6, 6), cfg)
    cost, latency = seen["tiling"].cost, 10 + 2000 + 5
    assert cost.vpu_cycles == result.engine_busy_cycles["core0.vpu"] == 730 + 2 * 74
    # in: weights 288, interior 1,152, operands 64; out: the epilogue's result 1,152
    dram = 288 + 1152 + 64 * operands + 1152
    assert cost.dram_bytes == dram
    estimate = cost.estimate(seen["config"])
    assert estimate == pytest.approx(2 * latency + dram / TINY_DRAM + 730 + 2 * 74)
    assert abs(estimate / result.total_cycles - 1) < 0.05


@pytest.mark.parametrize("preset,channels", [
    ("tiny", 48),  # some tilings do not fit 64 KiB; the one tile of all is far slower
    ("atom", 24),  # [24 channels, 2 rows] and [16, 4]: four tiles each, near
])
def test_the_chooser_takes_the_fewest_tiles_within_5_percent_of_the_fastest(
        monkeypatch, preset, channels):
    seen = _forced(monkeypatch)
    torch.manual_seed(0)
    model = torch.nn.Conv2d(channels, channels, 3, 1, 1, groups=channels, bias=False)
    _run(model, torch.randn(1, channels, 8, 8), config(preset))
    ctx, kernel, chosen = seen["ctx"], seen["kernel"], seen["tiling"]
    options = {}
    for ct in dw._candidates(channels, 8)[0]:
        for ty in (1, 2, 3, 4, 8):
            try:
                dw._buffers(ctx, kernel, ct, ty, 0)
            except CapacityError:
                continue
            options[ct, ty] = (-(-channels // ct) * -(-8 // ty),
                               dw._estimate(ctx, kernel, ct, ty).estimate(ctx.config))
    fastest = min(est for _, est in options.values())
    near = {key: v for key, v in options.items() if v[1] <= 1.05 * fastest}
    # fewest tiles, then the lowest estimate
    assert (chosen.channels, chosen.out_rows) == min(near, key=near.get)
    assert len(options) > len(near) > 1


class _ConvAndScaled(torch.nn.Module):
    """The convolution's result is an output itself and the scale-and-shift's input."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False)
        self.tail = _ScaleShift(8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.conv(x)
        return y, self.tail(y)


def test_a_result_stored_before_its_epilogue(monkeypatch):
    # test_one_tile_a_core_by_hand's tiles, the accumulator stored as it is (1,152 B)
    # and the scale-and-shift's result too, with the operands it loads (64 B)
    seen = _forced(monkeypatch, 8, 6)
    torch.manual_seed(0)
    model, x = _ConvAndScaled(), torch.randn(2, 8, 6, 6)
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(model, (x,)), config("tiny"))
    clear_cache()
    (y, z), result = compiled.run(x)
    want = model(x)
    torch.testing.assert_close(y, want[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(z, want[1], rtol=1e-5, atol=1e-5)
    assert len(compiled.kernels) == 1
    cost = seen["tiling"].cost
    assert cost.dram_bytes == result.dram_bytes_read + result.dram_bytes_written \
        == 2 * (288 + 1152 + 64 + 2 * 1152)
