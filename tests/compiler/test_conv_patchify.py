"""Patch embeddings as one GEMM (compiler.kernels.conv_patch) and 1-D convolutions
reading their input and weights in place (compiler.lowerings.conv._conv1d).

A convolution whose stride is its kernel (ViT's 16x16, CLIP's 32x32) reads each input
pixel once: its im2col is the image rearranged, which one DMA per block of patch rows
writes into the pixels-major operand. Before, the implicit GEMM copied each of the
1,024 taps of CLIP's kernel on the vector unit (2,048 copies on tpu-v4, 33,711
cycles). A 1-D convolution's ``[n, c, L]`` input viewed ``[n, c, 1, L]`` is the
stored tensor; before, it and the weights were copied into 4-D tensors first."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import compiler
import compiler.kernels.conv as conv
from archsim.errors import LoweringError
from archsim.app.pipeline import run
from archsim.app.workload import Workload
from compiler import CompileOptions, compile_op
from compiler.compile import clear_cache
from compiler.kernels.conv_patch_tiling import PatchSizes
from compiler.ir.operands import Scalar, SramRef
from compiler.ir.ops import Binary, Load, MatMul, Store, Transpose, VCopy
from compiler_helpers import config, tolerance

aten = torch.ops.aten
CL = torch.channels_last


def _ops(compiled, kind) -> list:
    return [c.op for c in compiled.program.commands if isinstance(c.op, kind)]


def _conv(x, w, stride: list[int], padding: list[int], preset: str, **overrides):
    """aten.convolution of ``x`` by ``w`` compiled for ``preset`` (a fresh schedule)."""
    clear_cache()
    return compile_op(aten.convolution.default,
                      (x, w, None, stride, padding, [1] * len(stride), False,
                       [0] * len(stride), 1), {}, config(preset).with_overrides(overrides))


def _choice(compiled) -> str:
    (choice,) = compiled.choices.values()
    return choice


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("preset,patch,size,filters", [
    ("atom", 16, 48, 40),         # ViT's 16x16 (3 x 3 patches), 40 filters: 2 tiles of 32
    ("ascend-910b", 8, 40, 24),   # 5 x 5 patches on 20 cores
    ("tpu-v4", 8, 16, 16),        # 8x8: 16-byte rows at 16 bits
])
def test_patch_embedding_matches_torch_as_one_gemm(preset, patch, size, filters, dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 3, size, size + patch).to(dtype)
    w = (torch.randn(filters, 3, patch, patch) / patch).to(dtype)
    compiled = _conv(x, w, [patch] * 2, [0, 0], preset)
    assert _choice(compiled).startswith("patches as one GEMM")
    (out,), _ = compiled.run(x, w)
    want = torch.nn.functional.conv2d(x.float(), w.float(), None, patch).to(dtype)
    torch.testing.assert_close(out, want, **tolerance(dtype))
    # no tap is copied: the vector unit only transposes finished tiles into NCHW
    assert not _ops(compiled, VCopy)
    k = 3 * patch * patch
    oh, ow = size // patch, size // patch + 1
    # every output pixel of every filter is one dot product of K = 3 x patch^2, in
    # chunks: the first chunks' outputs cover the output once, and all the matmuls'
    # rows x K x columns are the convolution's MACs
    mms = _ops(compiled, MatMul)
    starts = [m for m in mms if not m.accumulate]
    assert sum(m.out.shape[0] * m.out.shape[1] for m in starts) == 2 * filters * oh * ow
    assert sum(m.a.shape[-1] * m.out.shape[0] * m.out.shape[1] for m in mms) == \
        2 * filters * oh * ow * k


def _forcing(monkeypatch, **fields) -> None:
    """Every mapping but the patches taken away, the patch tiling's ``fields`` forced
    (both orientations, kept or streamed weights: each must compute torch's numbers).
    Channels-major tiles hold one image (the tiling offers several images a tile only
    pixels-major), so forcing that orientation forces one image too."""
    choose = conv.choose_patch_tiling
    if fields.get("pixels_major") is False:
        fields = {**fields, "images": 1}
    monkeypatch.setattr(conv, "choose_conv_tiling", lambda *a, **k: None)
    monkeypatch.setattr(conv, "choose_packed_tiling", lambda *a, **k: None)
    monkeypatch.setattr(conv, "choose_patch_tiling",
                        lambda *a, **k: dataclasses.replace(choose(*a, **k), **fields))


@pytest.mark.parametrize("pixels_major", [True, False])
@pytest.mark.parametrize("kept", [True, False])
@pytest.mark.parametrize("epilogue", [False, True])
def test_channels_last_patch_embedding_matches_torch(monkeypatch, pixels_major, kept,
                                                     epilogue):
    # an NHWC image in and out: K is (i, j, c), each weight chunk transposed once to
    # match; with a bias and GELU as the epilogue on the NHWC tile
    torch.manual_seed(1)
    model = torch.nn.Conv2d(3, 24, 4, 4, bias=epilogue)
    if epilogue:
        model = torch.nn.Sequential(model, torch.nn.GELU())
    model = model.to(memory_format=CL)
    x = torch.randn(2, 3, 16, 20).to(memory_format=CL)
    exported = torch.export.export(model, (x,))
    _forcing(monkeypatch, pixels_major=pixels_major, kept=kept, chunk_rows=3)
    clear_cache()
    compiled = compiler.compile_graph(exported, config("atom"), CompileOptions())
    clear_cache()
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert _choice(compiled).startswith("patches as one GEMM")
    assert _choice(compiled).endswith("; NHWC in and out")


@pytest.mark.parametrize("pixels_major", [True, False])
@pytest.mark.parametrize("kept", [True, False])
def test_nchw_patch_embedding_tilings_match_torch(monkeypatch, pixels_major, kept):
    # chunks of 5 kernel rows: within a channel, across channels (cut at them)
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 40, 8, 8), torch.nn.ReLU())
    x = torch.randn(3, 3, 16, 24)
    _forcing(monkeypatch, pixels_major=pixels_major, kept=kept, chunk_rows=5)
    clear_cache()
    result = run(Workload.of_module(model, (x,)), "atom", mode="functional")
    clear_cache()
    assert result.functional  # checked against torch
    (choice,) = result.choices.values()
    assert choice.startswith("patches as one GEMM")


def test_clip_patch_embedding_on_tpu_v4_moves_what_it_must():
    # CLIP ViT-B/32: 3 -> 768, 32x32 stride 32, 224x224 -> 7x7, bf16. Before: 2,048
    # vector copies of [1, 7, 7, 3] taps, 200 matmuls of K <= 126, 33,711 cycles.
    x = torch.empty(1, 3, 224, 224, dtype=torch.bfloat16, device="meta")
    w = torch.empty(768, 3, 32, 32, dtype=torch.bfloat16, device="meta")
    compiled = _conv(x, w, [32, 32], [0, 0], "tpu-v4")
    assert _choice(compiled).startswith("patches as one GEMM")
    mms = _ops(compiled, MatMul)
    # each output element is one dot product over K = 3,072, in chunks
    assert sum(m.a.shape[-1] * m.out.shape[0] * m.out.shape[1] for m in mms) == \
        768 * 49 * 3072
    assert not _ops(compiled, VCopy) and not _ops(compiled, Transpose)
    # DRAM: the weights once, the image once per core (both cores load all 49
    # patches; each multiplies half the filters), the output once; nothing else
    result = compiled.simulate()
    image, weights, output = 3 * 224 * 224 * 2, 768 * 3072 * 2, 768 * 49 * 2
    assert result.dram_bytes == weights + 2 * image + output
    # the weights bound it: 4.72 MB at tpu-v4's 1,143 bytes a cycle is 4,130 cycles;
    # allow the first load's latency, the matmul after the last chunk and the store
    assert result.total_cycles < 4130 * 2.0


def test_a_patch_of_short_rows_stays_with_the_implicit_gemm():
    # 2x2 stride 2 on an NCHW bf16 image: 4-byte runs, a transpose the DMA would do
    # for free in the simulator; left to the implicit GEMM
    x = torch.empty(1, 96, 56, 56, dtype=torch.bfloat16, device="meta")
    w = torch.empty(192, 96, 2, 2, dtype=torch.bfloat16, device="meta")
    compiled = _conv(x, w, [2, 2], [0, 0], "tpu-v4")
    assert "patches" not in _choice(compiled)


class _Features(torch.nn.Module):
    """Wav2Vec2's feature extractor in small: a conv, a group norm over every channel
    (computed through reshapes), GELU, a second conv; then its positional conv with
    weight norm (its weights computed)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv0 = torch.nn.Conv1d(1, 16, 10, stride=5, bias=False)
        self.norm = torch.nn.GroupNorm(16, 16)
        self.conv1 = torch.nn.Conv1d(16, 16, 3, stride=2, bias=False)
        self.pos = torch.nn.utils.parametrizations.weight_norm(
            torch.nn.Conv1d(16, 16, 4, padding=2, groups=2), name="weight", dim=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(torch.nn.functional.gelu(self.norm(self.conv0(x))))
        return self.pos(h)[..., :-1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv1d_reads_its_input_and_weights_in_place(dtype):
    torch.manual_seed(3)
    model = _Features().eval().to(dtype)
    x = torch.randn(1, 1, 400, dtype=dtype)
    clear_cache()
    # functional: the outputs are checked against torch (a NumericsError otherwise)
    result = run(Workload.of_module(model, (x,)), "atom", mode="functional")
    assert result.functional
    # no copy of a 1-D convolution's operands: before, each convolution wrote its
    # input (and weights) viewed [n, c, 1, L] out as ``view + 0``, a vector add of
    # zero; now it reads the stored 3-D tensor (or the other convolution's 4-D
    # output) in place. Its only vector adds are zero fills of the padding and the
    # bias epilogue.
    convs = set(result.choices)
    assert len(convs) == 3
    copies = [c.op for c in result.program.commands if c.source in convs and
              isinstance(c.op, Binary) and isinstance(c.op.a, SramRef) and
              c.op.b == Scalar(0.0)]
    assert not copies
    loads = [c.op.src for c in result.program.commands
             if c.source in convs and isinstance(c.op, Load)]
    assert {ref.tensor for ref in loads} >= {"args_0", "p_model_conv0_weight",
                                             "p_model_conv1_weight"}


def test_conv1d_moves_what_it_must(monkeypatch):
    # Whisper's conv2 scaled down: 64 -> 64, k 3, stride 2, padding 1, 600 columns,
    # from a graph input. Before: the input and weights were copied ([n, c, 1, L] + 0)
    # and the convolution read the copies. Taps packed into K by DMA here (the cost
    # model takes the implicit GEMM: 2,958 simulated cycles against 3,471)
    torch.manual_seed(4)
    x = torch.randn(1, 64, 600, dtype=torch.float16)
    w = (torch.randn(64, 64, 3) / 8).to(torch.float16)
    monkeypatch.setattr(conv, "_taken", lambda *_: "packed")
    # (tpu-v4 runs a tap a matmul, as XLA does: the packed mapping is archsim's own)
    compiled = _conv(x, w, [2], [1], "tpu-v4", **{"runtime.conv_taps": "packed"})
    (out,), result = compiled.run(x, w)
    want = torch.nn.functional.conv1d(x.float(), w.float(), None, 2, 1).half()
    torch.testing.assert_close(out, want, **tolerance(torch.float16))
    tensors = {c.op.src.tensor for c in compiled.program.commands if isinstance(c.op, Load)}
    written = {c.op.dst.tensor for c in compiled.program.commands if isinstance(c.op, Store)}
    assert len(tensors) == 2 and len(written) == 1  # the input and weights; the output
    # DRAM: the weights and output once, the input once per tap (the 3 taps packed
    # into K by DMA, each tap's rows loaded: 598, 599 and 599 columns),
    # each row rounded out to 32-byte granules: nothing else
    assert "taps packed into K" in _choice(compiled)
    rows = sum(-(-cols * 2 // 32) * 32 for cols in (598, 599, 599))
    assert result.dram_bytes == w.numel() * 2 + 64 * rows + want.numel() * 2


def test_a_channels_major_tile_of_several_images_is_refused() -> None:
    # [o, pixels] holds one image's pixels; several images a block run pixels-major
    PatchSizes(2, 4, 32, True, (1, 1), 2, False)
    with pytest.raises(LoweringError, match="patch tiling of 2 images a block must run "
                                            "pixels-major"):
        PatchSizes(2, 4, 32, False, (1, 1), 2, False)
