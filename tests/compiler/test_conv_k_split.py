"""A small tile's K blocks dealt to a core's arrays (:func:`compiler.kernels.conv_arrays.
k_split`): each array loads a distinct quarter of the weight folds and sums a partial of
its own, instead of every array loading every fold for a quarter of the pixels."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from archsim.matrix import back_to_back_saving, matmul_cycles
from archsim.simulator import Simulator
from compiler import compile_op
from compiler.ir.dtypes import DType
from archsim.errors import LoweringError
from compiler.compile import clear_cache
from compiler.ir.operands import SramRef
from compiler.ir.ops import Binary, BinaryKind, MatMul
from compiler.kernels import conv, conv_tiling
from compiler.kernels.conv_arrays import array_split, k_blocks, k_split
from compiler_helpers import ARRAY, check_op, config

aten = torch.ops.aten

FOUR = ARRAY.with_overrides({"core.matrix.arrays": 4, "core.matrix.weight_buffers": 2})
"""One core of four 128x128 weight-stationary arrays, double-buffered weights (fill
and drain paid once per run of back-to-back matmuls), memory that does not bound."""

FILL = 2 * 128 + 128 - 2
"""A run's fill and drain on a 128x128 array: 382 cycles."""


def _conv(cin: int, cout: int, size: int, device: str = "meta", dtype=torch.float32):
    x = torch.empty(1, cin, size, size, device=device, dtype=dtype)
    w = torch.empty(cout, cin, 3, 3, device=device, dtype=dtype)
    return aten.convolution.default, (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)


def test_hand_derived_cycles_of_a_7x7_tile() -> None:
    # 9 taps x K 512 = 36 blocks of 128 rows, 9 an array; each streams 49 pixels, so a
    # fold costs its 128-cycle weight load: 9 x 128 + 382
    matrix = FOUR.core.matrix
    dealt = k_split(matrix, DType.f32, 4, (1, 7, 7), 128, [512] * 9, combine=100.0)
    assert dealt == 9 * 128 + FILL == 1534
    # split by rows instead: 2 rows (14 pixels) an array, every array all 36 folds
    assert array_split(4, 128, 128, 1, 7) == ("rows", 7)
    by_rows = 9 * matmul_cycles(14, 512, 128, matrix) - 8 * back_to_back_saving(matrix)
    assert by_rows == 36 * 128 + FILL == 4990


def test_not_dealt_where_rows_fill_the_arrays_or_blocks_are_few() -> None:
    matrix = FOUR.core.matrix
    # 16 x 32 pixels: 128 an array under the row split, a fold's load hidden already
    assert k_split(matrix, DType.f32, 4, (1, 16, 32), 128, [512] * 9, combine=1.0) is None
    # three K blocks for four arrays
    assert k_split(matrix, DType.f32, 4, (1, 7, 7), 128, [128] * 3, combine=1.0) is None
    # whole output-channel columns for every array: each loads distinct folds already
    assert k_split(matrix, DType.f32, 4, (1, 7, 7), 512, [512] * 9, combine=1.0) is None
    # the gain must outweigh adding the partials up
    assert k_split(matrix, DType.f32, 4, (1, 7, 7), 128, [512] * 9, combine=4990 - 1534) \
        is None


@pytest.mark.parametrize(("arrays", "no", "ni", "ty", "split"), [
    (4, 512, 1, 7, ("cols", 512)),    # a whole array's columns for each
    (4, 256, 4, 7, ("images", 4)),    # else one image or more each
    (4, 256, 1, 7, ("rows", 7)),      # else output rows of the one image
    (4, 256, 2, 7, ("all", 0)),       # two images, too few for four: take turns
    (4, 256, 1, 3, ("all", 0)),       # three rows for four arrays
    (1, 512, 4, 7, ("all", 0)),       # one array
])
def test_how_a_tile_spreads_over_the_arrays(arrays, no, ni, ty, split) -> None:
    assert array_split(arrays, 128, no, ni, ty) == split


def test_dealing_beats_an_image_split_of_small_images() -> None:
    # four 7x7 images over four arrays: 49 pixels an array, all 36 folds on each
    # (36 x 128 + 382 = 4,990); dealt: 9 folds an array streaming all 196 pixels
    matrix = FOUR.core.matrix
    assert k_split(matrix, DType.f32, 4, (4, 7, 7), 128, [512] * 9, combine=100.0) == \
        9 * 196 + FILL


def test_as_many_blocks_as_arrays_is_enough() -> None:
    # four K blocks, one an array (510 cycles each) against the row split's 14 pixels
    # through all four on every array (4 x 128 + 382 = 894)
    matrix = FOUR.core.matrix
    assert k_split(matrix, DType.f32, 4, (1, 7, 7), 128, [128] * 4, combine=1.0) == \
        128 + FILL


def test_the_operands_dtype_sets_the_passes() -> None:
    # f32 on a bf16 array at 'high' precision: three passes a matmul, bf16 one
    matrix = FOUR.with_overrides({"core.matrix.input_dtype": "bf16",
                                  "core.matrix.f32_precision": "high"}).core.matrix
    assert k_split(matrix, DType.bf16, 4, (1, 7, 7), 128, [512] * 9, combine=1.0) == 1534
    assert k_split(matrix, DType.f32, 4, (1, 7, 7), 128, [512] * 9, combine=1.0) == \
        3 * (9 * (128 + FILL)) - 8 * FILL


def test_k_blocks_cover_each_matmul_once() -> None:
    assert k_blocks([300, 64], 128) == [(0, 0, 128), (0, 128, 256), (0, 256, 300),
                                        (1, 0, 64)]


def test_simulated_arrays_each_load_a_quarter_of_the_folds() -> None:
    op, args = _conv(512, 128, 7)
    compiled = compile_op(op, args, {}, FOUR)
    matmuls = [c for c in compiled.program.commands if isinstance(c.op, MatMul)]
    engines = sorted({c.engine for c in matmuls})
    assert engines == [f"core0.mxu{a}" for a in range(4)]
    for engine in engines:
        mine = [c.op for c in matmuls if c.engine == engine]
        assert len(mine) == 9
        assert all(m.a.shape == (1, 7, 7, 128) and m.b.shape == (128, 128) for m in mine)
        # one partial an array, started by its first block
        assert len({(m.out.space, m.out.offset) for m in mine}) == 1
        assert [m.accumulate for m in mine] == [False] + [True] * 8
    # the 36 weight blocks are distinct
    assert len({(m.op.b.space, m.op.b.offset) for m in matmuls}) == 36
    # three vector adds sum the partials into the accumulator
    adds = [c.op for c in compiled.program.commands if isinstance(c.op, Binary)
            and c.op.dst.shape == (49, 128) and isinstance(c.op.b, type(c.op.dst))]
    assert len(adds) == 3
    result = Simulator(FOUR).run(compiled.program)
    busy = {e: b for e, b in result.engine_busy_cycles.items() if "mxu" in e}
    assert busy == {e: 1534 for e in engines}


@pytest.mark.parametrize(("cin", "cout", "size", "preset", "dtype"), [
    (512, 512, 7, "tpu-v4", torch.float32),     # K 512 a tap: four blocks a tap
    (256, 256, 14, "tpu-v4", torch.bfloat16),   # 14-row tiles split over two cores
    (64, 128, 7, "tpu-v4 packed", torch.float32),  # two taps packed into K 128
    (128, 128, 14, "tpu-v3", torch.float32),    # two arrays, 7-row tiles
    (96, 80, 9, "tpu-v4", torch.float32),       # blocks of 96 rows
])
def test_numbers_match_torch(cin: int, cout: int, size: int, preset: str,
                             dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = []

    def choose(*args, **kwargs):
        chosen.append(conv_tiling.choose_conv_tiling(*args, **kwargs))
        return chosen[-1]

    monkeypatch.setattr(conv, "choose_conv_tiling", choose)
    torch.manual_seed(0)
    x = torch.randn(1, cin, size, size, dtype=dtype)
    w = (torch.randn(cout, cin, 3, 3) / (9 * cin) ** 0.5).to(dtype)
    # "packed": archsim's own mapping (the TPU presets run a tap a matmul, as XLA does)
    name, _, taps = preset.partition(" ")
    target = config(name).with_overrides({"runtime.conv_taps": taps}) if taps else name
    compiled, _ = check_op(aten.convolution.default,
                           (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), target)
    assert compiled.choices["convolution_default"].startswith("implicit GEMM")
    assert chosen[-1].k_split
    assert chosen[-1].taps == (2 if taps else 1)


def test_chunks_and_a_short_last_tile(monkeypatch: pytest.MonkeyPatch) -> None:
    # 512 -> 128 at 7x7 on tpu-v4 forced into tiles of 4 rows and chunks of 128 input
    # channels: the 4-row tile deals its 9 x 1 blocks a chunk to the four arrays over
    # four steps and adds three partials; the 3-row last tile (fewer rows than arrays)
    # takes turns on one array and adds none
    real = conv_tiling.choose_conv_tiling

    def forced(*args, **kwargs):
        chosen = real(*args, **kwargs)
        return dataclasses.replace(chosen, out_rows=4, in_channels=128, k_split=True)

    monkeypatch.setattr(conv, "choose_conv_tiling", forced)
    monkeypatch.setattr(conv, "choose_packed_tiling", lambda *a, **k: None)
    clear_cache()
    torch.manual_seed(3)
    x = torch.randn(1, 512, 7, 7)
    w = torch.randn(128, 512, 3, 3) / (9 * 512) ** 0.5
    compiled, _ = check_op(aten.convolution.default,
                           (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), "tpu-v4")
    clear_cache()
    assert compiled.choices["convolution_default"].startswith("implicit GEMM")
    adds = [c for c in compiled.program.commands if isinstance(c.op, Binary)
            and c.op.kind is BinaryKind.add and isinstance(c.op.b, SramRef)
            and c.op.dst.shape == (28, 128)]
    assert len(adds) == 3
    dealt = [c.op for c in compiled.program.commands
             if isinstance(c.op, MatMul) and math.prod(c.op.a.shape[:-1]) == 28]
    # four chunks x nine taps, one 128-row block each, nine an array; each array
    # starts its sum once
    assert len(dealt) == 36 and sum(not m.accumulate for m in dealt) == 4


def test_too_few_blocks_for_the_arrays_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # forced: 32 input channels in four-tap groups are three K blocks for four arrays
    real = conv_tiling.choose_conv_tiling
    monkeypatch.setattr(conv, "choose_conv_tiling", lambda *a, **k: dataclasses.replace(
        real(*a, **k), k_split=True, taps=4, out_rows=7))
    monkeypatch.setattr(conv, "choose_packed_tiling", lambda *a, **k: None)
    clear_cache()
    x = torch.empty(1, 32, 7, 7, device="meta")
    w = torch.empty(128, 32, 3, 3, device="meta")
    with pytest.raises(LoweringError, match="3 K blocks dealt to 4 arrays would leave a "
                                            "partial unwritten"):
        compile_op(aten.convolution.default,
                   (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), {},
                   config("tpu-v4"))
    clear_cache()
