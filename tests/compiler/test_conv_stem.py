"""A CNN's first convolution (3 input channels, stride 2) with the window's phase planes
interleaved (:attr:`compiler.kernels.conv_tiling.ConvTiling.interleaved`): a matmul
reads R kernel rows of phases in place, no tap copied side by side."""

from __future__ import annotations

import pytest
import torch

from archsim.simulator import Simulator
from compiler import compile_op
from compiler.compile import clear_cache
from compiler.cost import Cost
from compiler.ir.ops import MatMul, Transpose, VCopy
from compiler.kernels import conv
from compiler.kernels.conv_geometry import Geometry
from compiler.kernels.conv_interleave import interleaved, stacked_rows
from compiler.kernels.conv_tiling import ConvTiling
from compiler_helpers import ARRAY, check_op, config

aten = torch.ops.aten


def _args(n: int, size: int, cout: int, k: int, pad: int, dtype: torch.dtype) -> tuple:
    torch.manual_seed(0)
    x = torch.randn(n, 3, size, size).to(dtype)
    w = (torch.randn(cout, 3, k, k) / (3 * k * k) ** 0.5).to(dtype)
    return x, w, None, [2, 2], [pad, pad], [1, 1], False, [0, 0], 1


def _forced(monkeypatch: pytest.MonkeyPatch, stacked: int, **fields) -> None:
    """Every convolution takes the implicit GEMM with ``fields`` (taps packed into K by
    DMA taken away), on a fresh schedule."""
    clear_cache()
    tiling = ConvTiling(**{"images": 1, "out_channels": 64, "in_channels": 3, "taps": 1,
                           "resident_weights": False, "cost": Cost(),
                           "interleaved": stacked, **fields})
    monkeypatch.setattr(conv, "choose_conv_tiling", lambda *a, **k: tiling)
    monkeypatch.setattr(conv, "choose_packed_tiling", lambda *a, **k: None)


@pytest.mark.parametrize(("preset", "dtype"), [("tpu-v4", torch.bfloat16),
                                               ("atom", torch.float16),
                                               ("tpu-v3", torch.float32)])
@pytest.mark.parametrize(("n", "size", "cout", "k", "pad", "rows", "stacked"), [
    (1, 30, 64, 7, 3, 4, 2),   # ResNet's stem: 15 rows, a short last tile
    (2, 23, 16, 7, 3, 12, 1),  # odd image, batch 2, one plane row an entry
    (2, 21, 32, 3, 1, 5, 2),   # MobileNet's stem: the 3x3 kernel padded to 4x4
])
def test_interleaved_numbers_match_torch(monkeypatch: pytest.MonkeyPatch, preset: str,
                                         dtype: torch.dtype, n: int, size: int, cout: int,
                                         k: int, pad: int, rows: int, stacked: int) -> None:
    _forced(monkeypatch, stacked, out_rows=rows)
    compiled, _ = check_op(aten.convolution.default, _args(n, size, cout, k, pad, dtype),
                           preset)
    assert compiled.choices["convolution_default"].endswith("; phases interleaved")


def test_stacked_rows_fill_the_array_rows() -> None:
    def stem(k: int) -> Geometry:
        return interleaved(Geometry((k, k), (2, 2), (1, 1), 112, 112, 230, 230))
    # a kernel row of phases of a 7x7/2 over 3 channels: 4 plane columns x 2 x 2 x 3 =
    # 48 elements; 96 fit 128 rows (and divide the 4 rows of phases), 48 only fit 64
    assert stem(7).kernel == (8, 8)
    assert stacked_rows(stem(7), 3, 128) == 2
    assert stacked_rows(stem(7), 3, 64) == 1
    assert stacked_rows(stem(3), 3, 64) == 2     # 3x3 as 4x4: K = 2 x 24 = 48
    assert stacked_rows(stem(5), 3, 128) == 3    # 5x5 as 6x6: three rows of 36
    assert stacked_rows(stem(5), 3, 100) == 1    # 72 fits but 2 does not divide 3


def _program(monkeypatch: pytest.MonkeyPatch, stacked: int):
    """The 7x7/2 stem over a 32x32 image, one tile of all 16 output rows, on one
    128x128 array: interleaved (``stacked`` > 0) or with the taps packed by copies."""
    _forced(monkeypatch, stacked, out_rows=16, taps=1 if stacked else 42)
    x = torch.empty(1, 3, 32, 32, device="meta")
    w = torch.empty(64, 3, 7, 7, device="meta")
    compiled = compile_op(aten.convolution.default,
                          (x, w, None, [2, 2], [3, 3], [1, 1], False, [0, 0], 1), {}, ARRAY)
    clear_cache()
    return compiled.program


def test_interleaved_copies_no_tap(monkeypatch: pytest.MonkeyPatch) -> None:
    packed, flat = _program(monkeypatch, 0), _program(monkeypatch, 2)

    def ops(program, kind) -> list:
        return [c.op for c in program.commands if isinstance(c.op, kind)]
    # taps packed by copies: each of the 49 taps copied into a staging buffer (3
    # channels a pixel), then two transposes into the packed operands (42 and 7 taps)
    assert len(ops(packed, VCopy)) == 49
    assert [op.a.shape[-1] for op in ops(packed, MatMul)] == [126, 21]
    # interleaved: nothing copied; the window (38 x 38 padded, 8x8 kernel) is written
    # twice as entries of 2 plane rows: rows 0-17 and 1-18 of the 19 x 19 planes, each
    # a transpose of [1, 3, 18, 2, 19, 2] into [1, 18, 19, 2, 2, 3]
    assert not ops(flat, VCopy)
    planes = [op for op in ops(flat, Transpose) if op.src.shape == (1, 3, 18, 2, 19, 2)]
    assert [op.dst.shape for op in planes] == [(1, 18, 19, 2, 2, 3)] * 2
    # two matmuls of K = 2 rows x 4 columns x 2 x 2 phases x 3 channels = 96 over the
    # 16 x 16 pixels, each one fold of the array: 2 x 128 + 128 + 256 - 2 cycles
    matmuls = ops(flat, MatMul)
    assert [(op.a.shape, op.b.shape) for op in matmuls] == [((1, 16, 16, 96), (96, 64))] * 2
    busy = Simulator(ARRAY).run(flat).engine_busy_cycles
    assert busy["core0.mxu0"] == 2 * (2 * 128 + 128 + 256 - 2)
    # the vector unit's work: no 49 copies and no staging transpose
    before = Simulator(ARRAY).run(packed).engine_busy_cycles["core0.vpu"]
    assert busy["core0.vpu"] < before


def _choice(preset: str, cin: int, cout: int, k: int, pad: int, size: int,
            conv_taps: str = "packed") -> str:
    """The mapping taken (by default as archsim's compiler would: taps packed where
    they pay; the TPU presets run a tap a matmul, as XLA does)."""
    clear_cache()
    x = torch.empty(1, cin, size, size, dtype=torch.bfloat16, device="meta")
    w = torch.empty(cout, cin, k, k, dtype=torch.bfloat16, device="meta")
    compiled = compile_op(aten.convolution.default,
                          (x, w, None, [2, 2], [pad, pad], [1, 1], False, [0, 0], 1), {},
                          config(preset).with_overrides({"runtime.conv_taps": conv_taps}))
    clear_cache()
    return compiled.choices["convolution_default"]


def test_taken_on_a_stem_not_where_it_does_not_pay() -> None:
    # tpu-v4 (128-row arrays): the 7x7/2 stem's two matmuls of K = 96 against the
    # copies' 126 + 21 (measured 9,882 -> 7,258 cycles standalone)
    assert _choice("tpu-v4", 3, 64, 7, 3, 224).endswith("; phases interleaved")
    # atom (64-row arrays): four matmuls of K = 48 against three of K <= 63: not offered
    assert "interleaved" not in _choice("atom", 3, 64, 7, 3, 224)
    # 64 channels: a row of phases (4 x 2 x 2 x 64) is deeper than the array
    assert "interleaved" not in _choice("tpu-v4", 64, 64, 3, 1, 56)
    # XLA's way (the preset's own runtime.conv_taps): no phases interleaved either
    xla = _choice("tpu-v4", 3, 64, 7, 3, 224, "one")
    assert xla.startswith("implicit GEMM (estimated: implicit GEMM ")
    assert xla.endswith(" cycles); a tap a matmul (runtime.conv_taps: one)")
