"""Convolutions on small scratchpads (compiler.kernels.conv_tiling's later tiers):
column tiles of a long output row, narrow output-channel tiles, each core keeping only
the weight blocks it meets. Before them a 1-D convolution of 1,599 columns or CLIP's
32x32 patch embedding fitted no implicit-GEMM tile on ascend-910b's 1 MiB and ran one
tap at a time (45M and 4.5M cycles). Here the same shapes, scaled down, on ascend-910b
with its scratchpad shrunk to match and one core (so the DRAM traffic is one core's
and hand-derivable); every case runs functionally against torch."""

from __future__ import annotations

import math

import pytest
import torch

import compiler
import compiler.kernels.conv as conv
from archsim.config import load_config
from compiler import CompileOptions, compile_op
from compiler.compile import clear_cache
from compiler.ir.ops import MatMul

aten = torch.ops.aten

ASCEND = load_config("ascend-910b")


def _small(kib: int):
    return ASCEND.with_overrides({"core.scratchpad.size_bytes": kib * 1024, "cores": 1})


def _with_tiling(compile_fn):
    """``compile_fn()`` with the implicit-GEMM tiling chooser watched: (its program, the
    last tiling chosen; None: another mapping)."""
    chosen = []
    choose = conv.choose_conv_tiling

    def spy(*a, **k):
        chosen.append(choose(*a, **k))
        return chosen[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(conv, "choose_conv_tiling", spy)
        clear_cache()
        compiled = compile_fn()
        clear_cache()
    return compiled, chosen[-1] if chosen else None


def _compile(monkeypatch, cfg, args):
    """Compile aten.convolution on ``args``; returns the program and the implicit-GEMM
    tiling chosen (None: another mapping)."""
    return _with_tiling(lambda: compile_op(aten.convolution.default, args, {}, cfg))


def _implicit(monkeypatch, cfg, args):
    """``_compile``, checked to take the implicit GEMM with a tiling, then run on the
    arguments' tensors: (program, tiling, output, result)."""
    compiled, tiling = _compile(monkeypatch, cfg, args)
    assert list(compiled.choices.values())[0].startswith("implicit GEMM")
    assert tiling is not None
    (out,), result = compiled.run(*[a for a in args if isinstance(a, torch.Tensor)])
    return compiled, tiling, out, result


def _matmuls(compiled) -> list[MatMul]:
    return [c.op for c in compiled.program.commands if isinstance(c.op, MatMul)]


def _tolerance(dtype: torch.dtype) -> dict[str, float]:
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else \
        {"rtol": 2e-2, "atol": 2e-2}


def test_long_row_tiles_its_columns_and_loads_each_weight_once(monkeypatch):
    # Wav2Vec2's feature-extractor conv (512 -> 512, k 3, stride 2, 3,199 columns),
    # scaled to 128 channels and 1,023 columns on a 256 KiB scratchpad: a whole row's
    # window (128 x 1,024 f16 = 256 KiB) does not fit, so tiles take columns.
    torch.manual_seed(0)
    x = torch.randn(1, 128, 1, 1023, dtype=torch.float16)
    w = torch.randn(128, 128, 1, 3, dtype=torch.float16) / 16
    compiled, tiling, out, result = _implicit(
        monkeypatch, _small(256), (x, w, None, [1, 2], [0, 0], [1, 1], False, [0, 0], 1))
    assert 0 < tiling.out_cols < 511
    want = torch.nn.functional.conv2d(x.float(), w.float(), None, (1, 2)).half()
    torch.testing.assert_close(out, want, **_tolerance(torch.float16))
    # every output pixel is computed once per tap and channel chunk (the tile's
    # matmuls stream exactly its columns): 511 pixels x 3 taps x chunks x channel tiles
    chunks = math.ceil(128 / tiling.in_channels)
    o_tiles = math.ceil(128 / tiling.out_channels)
    mms = _matmuls(compiled)
    assert sum(math.prod(m.a.shape[:-1]) for m in mms) == 511 * 3 * chunks * o_tiles
    assert len(mms) == math.ceil(511 / tiling.out_cols) * 3 * chunks * o_tiles
    # DRAM: the weights once (the one core keeps them), the output once, the input
    # once per output-channel tile plus each column tile's window overlap (one column:
    # (kw - 1) * dw + 1 - sw) and the rounding of each window row (92 bytes) out to
    # 32-byte granules: at most 1.5x what must move. The per-tap kernel moved 1,637x
    # (the whole input row per tap and output-channel tile).
    compulsory = (x.numel() + w.numel() + want.numel()) * 2
    assert result.dram_bytes <= 1.5 * compulsory


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("stride,padding,dilation,groups", [
    (2, 0, 1, 1),   # Wav2Vec2's feature extractor
    (1, 1, 1, 1),   # Whisper's conv1 (padding at both ends of the row)
    (3, 2, 2, 1),   # padding and dilation at the tiles' edges
    (1, 4, 1, 2),   # grouped (Wav2Vec2's positional conv has 16 groups)
])
def test_conv1d_on_a_small_scratchpad_matches_torch(monkeypatch, dtype, stride, padding,
                                                    dilation, groups):
    torch.manual_seed(1)
    x = torch.randn(1, 128, 700).to(dtype)
    w = (torch.randn(128, 128 // groups, 5) / 16).to(dtype)
    compiled, tiling, out, _ = _implicit(
        monkeypatch, _small(128),
        (x, w, None, [stride], [padding], [dilation], False, [0], groups))
    assert 0 < tiling.out_cols < out.shape[-1]  # the output's columns in tiles
    want = torch.nn.functional.conv1d(x.float(), w.float(), None, stride, padding,
                                      dilation, groups).to(dtype)
    torch.testing.assert_close(out, want, **_tolerance(dtype))


def test_patch_embedding_streams_kernel_rows(monkeypatch):
    # CLIP ViT-B/32's patch embedding (3 -> 768, 32x32, stride 32) scaled to 64
    # filters on a 64x64 image on 512 KiB: 6 KiB of weights per filter, so a tile of
    # the array's 64 columns (384 KiB, loaded and rearranged, double-buffered) does not
    # fit; one kernel row a step (192 bytes a filter) does. The per-tap kernel ran
    # 16,384 matmuls of K = 3. (The cost model takes the patches as one GEMM,
    # compiler.kernels.conv_patch, tests/compiler/test_conv_patchify.py; this tests the
    # implicit GEMM's tier, with that mapping taken away.)
    monkeypatch.setattr(conv, "choose_patch_tiling", lambda *a, **k: None)
    torch.manual_seed(2)
    x = torch.randn(1, 3, 64, 64, dtype=torch.float16)
    w = torch.randn(64, 3, 32, 32, dtype=torch.float16) / 64
    compiled, tiling, out, result = _implicit(
        monkeypatch, _small(512), (x, w, None, [32, 32], [0, 0], [1, 1], False, [0, 0], 1))
    assert tiling.row_blocks and tiling.out_channels == 64
    want = torch.nn.functional.conv2d(x.float(), w.float(), None, 32).half()
    torch.testing.assert_close(out, want, **_tolerance(torch.float16))
    # per tile and kernel row, the row's 32 taps packed into ceil(32 / taps) matmuls
    tiles = math.ceil(2 / tiling.out_rows) * math.ceil(2 / (tiling.out_cols or 2))
    assert len(_matmuls(compiled)) == tiles * 32 * math.ceil(32 / tiling.taps)
    # DRAM, exactly what must move: the stride is the kernel, so the kernel rows'
    # windows (rows 32 apart) cover each image row once; the weights once (one tile
    # of all 64 filters), the output once
    assert result.dram_bytes == (w.numel() + x.numel() + want.numel()) * 2


def test_channels_last_wide_image_tiles_columns_and_matches_torch():
    # a 2-D image too wide for one row's window: NHWC in and out, column tiles
    torch.manual_seed(3)
    model = torch.nn.Conv2d(32, 64, 3, 2, 1, bias=False).to(memory_format=torch.channels_last)
    x = torch.randn(1, 32, 3, 700).to(memory_format=torch.channels_last)
    exported = torch.export.export(model, (x,))
    compiled, tiling = _with_tiling(
        lambda: compiler.compile_graph(exported, _small(128), CompileOptions()))
    assert list(compiled.choices.values())[0].startswith("implicit GEMM")
    assert list(compiled.choices.values())[0].endswith("; NHWC in and out")
    assert tiling is not None and 0 < tiling.out_cols < 350  # of 350 output columns
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert out.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("stride,padding,dilation,groups", [
    (1, 1, 1, 1), (2, 3, 1, 1), (2, 2, 2, 2), (3, 0, 1, 4)])
def test_per_tap_loads_each_window_once_and_matches_torch(monkeypatch, dtype, stride,
                                                          padding, dilation, groups):
    # the last resort, forced: per tile and channel chunk one weight load and one
    # window load (the interior by one DMA), then one matmul per tap on a view of the
    # window. Before, every tap loaded its own window: 9 + 1 loads per tile here.
    monkeypatch.setattr(conv, "choose_packed_tiling", lambda *a, **k: None)
    monkeypatch.setattr(conv, "choose_conv_tiling", lambda *a, **k: None)
    torch.manual_seed(4)
    x = torch.randn(2, 8, 13, 11).to(dtype)
    w = (torch.randn(12, 8 // groups, 3, 3) / 4).to(dtype)
    compiled, tiling = _compile(monkeypatch, ASCEND.with_overrides({"cores": 1}),
                                (x, w, None, [stride] * 2, [padding] * 2, [dilation] * 2,
                                 False, [0, 0], groups))
    assert tiling is None
    assert list(compiled.choices.values())[0].startswith("one tap at a time")
    (out,), _ = compiled.run(x, w)
    want = torch.nn.functional.conv2d(x.float(), w.float(), None, stride, padding,
                                      dilation, groups).to(dtype)
    torch.testing.assert_close(out, want, **_tolerance(dtype))
    # the scratchpad holds a whole image's tile: one tile per image and group
    tiles = 2 * groups
    loads = [c for c in compiled.program.commands if type(c.op).__name__ == "Load"]
    assert len(loads) == 2 * tiles
    assert len(_matmuls(compiled)) == 9 * tiles


def test_per_tap_is_the_last_resort_and_reads_channels_last():
    # 32 KiB: not even a column tile of narrow channels of the implicit GEMM fits this
    # NHWC image
    torch.manual_seed(5)
    model = torch.nn.Conv2d(32, 64, 3, 2, 1, bias=False).to(memory_format=torch.channels_last)
    x = torch.randn(1, 32, 3, 700).to(memory_format=torch.channels_last)
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(model, (x,)), _small(32),
                                      CompileOptions())
    clear_cache()
    choice = list(compiled.choices.values())[0]
    assert choice.startswith("one tap at a time") and choice.endswith("; NHWC in and out")
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert out.is_contiguous(memory_format=torch.channels_last)
    # per tile (one store of its NHWC box) and channel chunk one weight load
    # [o, c, 3, 3] and one window load (runs of a pixel's channels); before, every tap
    # loaded its own window
    ops = [c.op for c in compiled.program.commands]
    stores = sum(type(op).__name__ == "Store" for op in ops)
    loads = [op for op in ops if type(op).__name__ == "Load"]
    weights = [op for op in loads if op.dst.shape[2:] == (3, 3)]
    chunks = math.ceil(32 / weights[0].dst.shape[1])
    assert len(weights) == len(loads) - len(weights) == chunks * stores > 0


class _FusedConv1d(torch.nn.Module):
    """A 1-D convolution with a batch norm, a relu and an add fused after it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(128, 96, 3, stride=2, padding=1)
        self.bn = torch.nn.BatchNorm1d(96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x))) + 1.0


def test_narrow_chunks_with_a_fused_epilogue_on_several_arrays_match_torch():
    # tpu-v4 (four 128x128 arrays a core) cut to 160 KiB: a chunk of the array's 128
    # rows of f32 weights for 96 filters (147 KiB, loaded and rearranged) leaves no
    # room, so chunks are narrower; the epilogue runs on column tiles of both images
    torch.manual_seed(6)
    model = _FusedConv1d().eval()
    with torch.no_grad():
        model.bn.running_mean.normal_()
        model.bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 128, 1023)
    cfg = load_config("tpu-v4").with_overrides({"core.scratchpad.size_bytes": 160 * 1024,
                                                "cores": 2})
    compiled, tiling = _with_tiling(
        lambda: compiler.compile_graph(torch.export.export(model, (x,)), cfg, CompileOptions()))
    assert tiling is not None and 0 < tiling.out_cols < 1023 and tiling.in_channels < 128
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kib,cin,cout,k,stride,padding,dilation,groups,hw,dtype", [
    (48, 32, 64, 3, 2, 2, 2, 1, 33, torch.float32),
    (64, 16, 32, 7, 2, 3, 1, 2, 60, torch.bfloat16),
    (32, 16, 64, 5, 1, 2, 1, 1, 24, torch.float32),
])
def test_kernel_rows_as_steps_match_torch(monkeypatch, kib, cin, cout, k, stride, padding,
                                          dilation, groups, hw, dtype):
    # each kernel row a step of its own: its window is its input rows, `stride` apart,
    # zero where they fall in the padding; the rows accumulate into one tile
    torch.manual_seed(7)
    x = torch.randn(1, cin, hw, hw).to(dtype)
    w = (torch.randn(cout, cin // groups, k, k) / 8).to(dtype)
    cfg = ASCEND.with_overrides({"core.scratchpad.size_bytes": kib * 1024, "cores": 2})
    compiled, tiling = _compile(monkeypatch, cfg, (x, w, None, [stride] * 2, [padding] * 2,
                                                   [dilation] * 2, False, [0, 0], groups))
    assert tiling is not None and tiling.row_blocks
    (out,), _ = compiled.run(x, w)
    want = torch.nn.functional.conv2d(x.float(), w.float(), None, stride, padding,
                                      dilation, groups).to(dtype)
    torch.testing.assert_close(out, want, **_tolerance(dtype))
