"""Convolution weights staged in shared SRAM (:mod:`compiler.kernels.conv_staging`) and
a kernel row's taps packed into K on an output-stationary array
(:func:`compiler.kernels.conv_tiling.tap_packs`)."""

from __future__ import annotations

import dataclasses
import pytest
import torch

from compiler import compile_op
from compiler.compile import clear_cache
from compiler.cost import Cost
from compiler.ir.ops import Copy, Load, MatMul
from compiler.kernels import conv, conv_tiling
from compiler.kernels.conv_staging import rotated, sharers
from compiler.kernels.conv_tiling import ConvTiling, tap_packs
from compiler_helpers import check_op, config

aten = torch.ops.aten


def _conv(cin: int, cout: int, size: int, dtype: torch.dtype = torch.float16,
          kernel: int = 3) -> tuple:
    torch.manual_seed(0)
    x = torch.randn(1, cin, size, size).to(dtype)
    w = (torch.randn(cout, cin, kernel, kernel) / (kernel * kernel * cin) ** 0.5).to(dtype)
    pad = kernel // 2
    return x, w, None, [1, 1], [pad, pad], [1, 1], False, [0, 0], 1


def _forced(monkeypatch: pytest.MonkeyPatch, **fields) -> None:
    """Every convolution takes the implicit-GEMM tiling ``fields`` (not resident), on
    a fresh schedule."""
    clear_cache()
    tiling = ConvTiling(resident_weights=False, cost=Cost(), **fields)
    monkeypatch.setattr(conv, "choose_conv_tiling", lambda *a, **k: tiling)


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[ConvTiling]:
    """The tilings the cost model chooses (on a fresh schedule)."""
    clear_cache()
    chosen: list[ConvTiling] = []

    def choose(*args, **kwargs):
        chosen.append(conv_tiling.choose_conv_tiling(*args, **kwargs))
        return chosen[-1]
    monkeypatch.setattr(conv, "choose_conv_tiling", choose)
    return chosen


@pytest.mark.parametrize(("cin", "cout", "size", "rows", "dtype"), [
    (256, 80, 14, 4, torch.float16),   # 4 chunks rotated; last channel and row tiles short
    (128, 96, 9, 2, torch.float32),    # 2 chunks; 5 row tiles, the last of one row
])
def test_staged_numbers_match_torch(cin: int, cout: int, size: int, rows: int,
                                    dtype: torch.dtype,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _forced(monkeypatch, images=1, out_rows=rows, out_channels=64, in_channels=64, taps=3,
            staged_weights=True)
    compiled, _ = check_op(aten.convolution.default, _conv(cin, cout, size, dtype),
                           "ascend-910b")
    assert compiled.choices["convolution_default"].endswith(
        "; weights shared through shared SRAM")


def _weight_traffic(program) -> tuple[int, int]:
    """(bytes of weights loaded from DRAM, copies out of shared SRAM) of a program."""
    loaded = sum(c.op.dst.nbytes for c in program.commands if isinstance(c.op, Load)
                 and c.op.src.tensor == "arg1")
    copies = sum(1 for c in program.commands if isinstance(c.op, Copy)
                 and c.op.src.space == "shared")
    return loaded, copies


@pytest.mark.parametrize("staged", [False, True])
def test_four_tiles_of_one_block_read_it_from_dram_once(
        staged: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # 8x8 image, 2-row tiles: four tiles on four cores, all of the one 64 x 64 x 3 x 3
    # f16 weight block (73,728 B). Unstaged each core loads it from DRAM; staged DRAM
    # carries it once into shared SRAM and each of the four copies it from there
    _forced(monkeypatch, images=1, out_rows=2, out_channels=64, in_channels=64, taps=1,
            staged_weights=staged)
    compiled, result = check_op(aten.convolution.default, _conv(64, 64, 8), "ascend-910b")
    block = 64 * 64 * 9 * 2
    assert _weight_traffic(compiled.program) == ((block, 4) if staged else (4 * block, 0))
    # the windows are the same: the DRAM reads differ by three blocks exactly
    _forced(monkeypatch, images=1, out_rows=2, out_channels=64, in_channels=64, taps=1,
            staged_weights=not staged)
    _, other = check_op(aten.convolution.default, _conv(64, 64, 8), "ascend-910b")
    saved = (other.dram_bytes_read - result.dram_bytes_read) * (1 if staged else -1)
    assert saved == 3 * block == 221_184


@pytest.mark.parametrize(("taps", "cycles"), [
    # one 64 x 64 fold a matmul on ascend-910b's output-stationary 64x64 array: K
    # streams, each matmul paying a fill and drain of 64 + 64 - 2 = 126 cycles.
    # One tap at a time: 9 x (126 + 64); a kernel row: 3 x (126 + 3 x 64)
    (1, 9 * (126 + 64)),
    (3, 3 * (126 + 192)),
])
def test_a_kernel_rows_taps_in_one_matmul_pay_one_fill(
        taps: int, cycles: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _forced(monkeypatch, images=1, out_rows=8, out_channels=64, in_channels=64, taps=taps)
    compiled, result = check_op(aten.convolution.default, _conv(64, 64, 8), "ascend-910b")
    matmuls = [c for c in compiled.program.commands if isinstance(c.op, MatMul)]
    assert len(matmuls) == 9 // taps
    assert result.engine_busy_cycles["core0.mxu0"] == cycles == (1710 if taps == 1 else 954)


def test_tap_packs_add_a_kernel_row_on_output_stationary_arrays_only() -> None:
    ascend = config("ascend-910b").core.matrix   # 64x64, output stationary
    tpu = config("tpu-v4").core.matrix           # 128x128, weight stationary
    assert tap_packs(ascend, 9, 3, 128) == {1, 3}
    assert tap_packs(ascend, 9, 3, 16) == {1, 4}    # the rows hold four: no row added
    assert tap_packs(tpu, 9, 3, 128) == {1}
    # only where the fill (rows + cols - 2 = 126) is a third of a tap's K or more
    assert tap_packs(ascend, 9, 3, 378) == {1, 3}
    assert tap_packs(ascend, 9, 3, 379) == {1}
    # SCALE-Sim's os 32x32 with 512-channel chunks: 62 cycles of fill against 512
    small = dataclasses.replace(ascend, rows=32, cols=32)
    assert tap_packs(small, 9, 3, 512) == {1}


def test_sharers_and_rotation() -> None:
    # 4 channel tiles of 16 tiles on 16 cores: tiles o, o + 4, o + 8, o + 12 of a block
    assert sharers(4, 16, 16) == 4
    # 8 channel tiles on 8 cores: every tile of a block on the same core
    assert sharers(8, 56, 8) == 1
    # 4 channel tiles, 28 tiles on 8 cores: cores o and o + 4
    assert sharers(4, 28, 8) == 2
    assert rotated([0, 1, 2, 3], 6) == [2, 3, 0, 1]


def test_staged_on_ascend_for_resnets_14x14_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    # 7-row tiles of 64 channels filled 8 of 20 cores; staged, 4-row tiles fill 16 and
    # 3-row tiles 20 (9,906 and 9,935 cycles simulated: the estimate takes either)
    chosen = _spy(monkeypatch)
    args = _conv(256, 256, 14)
    compiled, result = check_op(aten.convolution.default, args, "ascend-910b")
    tiling = chosen[-1]
    ty = tiling.out_rows
    assert tiling.staged_weights and tiling.out_channels == 64 and ty in (3, 4)
    assert compiled.choices["convolution_default"].endswith("shared through shared SRAM")
    # DRAM carries the 256 x 256 x 3 x 3 f16 weights once (1,179,648 B), and for each
    # of the 4 channel tiles the windows of the row tiles (4-row tiles: input rows 0-4,
    # 3-8, 7-12, 11-13, 20 rows) of 256 channels, each 14-column row of 28 B charged as
    # a 32-byte access
    rows = sum(min(y0 + ty + 1, 14) - max(y0 - 1, 0) for y0 in range(0, 14, ty))
    windows = 4 * rows * 256 * 32
    assert result.dram_bytes_read == 256 * 256 * 9 * 2 + windows


@pytest.mark.parametrize(("cin", "cout", "size", "kernel", "preset"), [
    (256, 256, 14, 3, "tpu-v4"),        # 8 tiles: no block on two cores
    (512, 512, 7, 3, "ascend-910b"),    # one row tile: each block on one core
    (256, 1024, 14, 1, "atom"),         # every core reloads its own block
])
def test_not_staged_where_it_does_not_pay(cin: int, cout: int, size: int, kernel: int,
                                          preset: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = _spy(monkeypatch)
    x, w, *rest = _conv(cin, cout, size, kernel=kernel)
    meta = (x.to("meta"), w.to("meta"), *rest)
    compiled = compile_op(aten.convolution.default, meta, {}, config(preset))
    assert not chosen[-1].staged_weights
    assert "shared SRAM" not in compiled.choices["convolution_default"]


def test_each_tile_of_a_block_starts_at_another_whole_chunk(monkeypatch) -> None:
    # 520 input channels in chunks of 128: four whole chunks and a short one of 8. The
    # tiles of one weight block rotate their first chunk among the whole ones (so their
    # first DRAM loads differ), the short chunk always last: a tile's first step must be
    # whole, dealt K blocks start every array's sum there (it raised with the short
    # chunk first: 3 K blocks for 4 arrays)
    _forced(monkeypatch, images=1, out_rows=4, out_channels=128, in_channels=128, taps=4,
            k_split=True, staged_weights=True)
    monkeypatch.setattr(conv, "choose_packed_tiling", lambda *a, **k: None)
    torch.manual_seed(0)
    x = torch.randn(1, 520, 20, 7)
    w = torch.randn(128, 520, 3, 3) / 70
    compiled, _ = check_op(aten.convolution.default,
                           (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), "tpu-v4")
    clear_cache()
    # the shared copies out of shared SRAM, in program order, per core: each tile's
    # chunks as (first input channel) of the Copy's source block
    weights = [c for c in compiled.program.commands
               if isinstance(c.op, Load) and c.op.src.tensor == "arg1"]
    firsts = sorted({c.op.src.slices[1].start for c in weights})
    assert firsts == [0, 128, 256, 384, 512]
    # five row tiles (20 rows by 4) of the one block over two cores: tile t starts at
    # whole chunk t mod 4, and the 8-channel chunk is its last step
    copies = {core: [c.op.src.offset for c in compiled.program.commands
                     if isinstance(c.op, Copy) and c.engine.startswith(core)]
              for core in ("core0", "core1")}
    assert [len(v) for v in copies.values()] == [15, 10]  # tiles 0, 2, 4 and 1, 3
    tiles = {t: copies[f"core{t % 2}"][t // 2 * 5:t // 2 * 5 + 5] for t in range(5)}
    starts = [tiles[t][0] for t in range(5)]
    assert len(set(starts[:4])) == 4 and starts[4] == starts[0]
    assert len({tiles[t][4] for t in range(5)}) == 1  # the short chunk, last in every tile
    assert tiles[0][4] not in starts


def test_staging_fits_the_blocks_at_their_aligned_offsets() -> None:
    # four blocks of 100 bytes: 400 bytes, 448 rounded once, but each block is allocated
    # at a 64-byte boundary, 4 x 128 = 512 bytes of shared SRAM
    from compiler.kernels.conv_staging import StagingCost, staged_cost
    unstaged = Cost(mxu_cycles=10.0, vpu_cycles=0.0, dma_cycles=10.0, dram_bytes=8000,
                    serial_cycles=0.0)
    blocks = StagingCost(distinct=400, sharers=2, blocks=4, weight_share=4000.0,
                         step_weights=100, load_bw=8.0, setup=10.0)
    for size, fits in ((450, False), (512, True)):
        cfg = config("ascend-910b").with_overrides({"shared_sram.size_bytes": size})
        assert (staged_cost(cfg, unstaged, 2, blocks) is not None) == fits
