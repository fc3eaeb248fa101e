"""Pooling's tiles, pinned where mutation testing found them loose
(``python benchmarks/mutation.py compiler/kernels/pool.py``): the scratchpad a tile
needs, to the byte; how a pooling is shared among cores; when a split into smaller
tiles pays; a pooling of an image without a batch dim."""

from __future__ import annotations

import pytest
import torch

import compiler
from archsim.config import load_config
from compiler.compile import clear_cache
from compiler.ir.operands import Scalar
from compiler.ir.ops import Binary, BinaryKind, Load, Store, VCopy
from compiler.kernels.conv_geometry import Geometry
from compiler.kernels.pool import _split_pays


def _compile(module: torch.nn.Module, x: torch.Tensor, preset: str, capacity: int = 0):
    """Compile and run ``module`` on ``preset`` (its scratchpad ``capacity`` bytes, one
    bank, when given), check it against torch, return the program's commands."""
    clear_cache()
    cfg = load_config(preset)
    if capacity:
        cfg = cfg.with_overrides({"core.scratchpad.size_bytes": capacity,
                                  "core.scratchpad.banks": 1})
    exported = torch.export.export(module.eval(), (x,)).run_decompositions()
    compiled = compiler.compile_graph(exported, cfg)
    (out,), _ = compiled.run(x)
    clear_cache()
    torch.testing.assert_close(out, module(x), rtol=1e-6, atol=1e-6)
    return compiled.program.commands


def _loads(commands) -> list:
    return [c for c in commands if isinstance(c.op, Load)]


def _maxima(commands) -> int:
    return sum(isinstance(c.op, Binary) and c.op.kind is BinaryKind.max for c in commands)


class _PoolRelu(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.nn.functional.max_pool2d(x, 3, 2, 1))


# A 3x3 stride-2 max pool with padding 1 of [1, 4, 16, 16] f32 on one TPU v3 core
# (2 buffer sets): 8 x 8 outputs, a window of 2 * 8 + 2 = 18 rows of 18 columns (9 a
# stride phase). One tile of 8 output rows (the halo rule keeps it whole: halving to 4
# rows would re-read 2 of 8) needs, per set, the window twice (raw and in phases:
# 2 x 18 x 18 x 4 ch x 4 B = 10,368), the accumulator (8 x 9 x 4 x 4 = 1,152) and the
# output tile channels first (8 x 8 x 4 x 4 = 1,024), 1,024 B of alignment; 8,192 B
# beside: 2 x (10,368 + 1,152 + 1,024 + 1,024) + 8,192 = 35,328 B.
ONE_TILE = 35328
# a fused ReLU's epilogue buffer adds its 8 x 8 x 4 x 4 B (f32) a set: 35,328 + 2 x 1,024
ONE_TILE_RELU = 37376


def test_a_tile_takes_exactly_the_scratchpad_it_needs():
    torch.manual_seed(0)
    x = torch.randn(1, 4, 16, 16)
    pool = torch.nn.MaxPool2d(3, 2, 1)
    whole = _compile(pool, x, "tpu-v3", ONE_TILE)
    assert len(_loads(whole)) == 1 and _maxima(whole) == 8
    # a byte less: two tiles of 4 output rows (10 input rows each, 9 inside the border)
    halves = _compile(pool, x, "tpu-v3", ONE_TILE - 1)
    assert [c.op.dst.shape for c in _loads(halves)] == [(1, 4, 9, 16)] * 2
    assert _maxima(halves) == 2 * 8


def test_a_one_channel_tile_is_halved_down_to_one_row():
    # the same pool over one channel: a tile of t rows needs, per set, 2 x (2 t + 2) x
    # 18 x 4 B of window, 9 t x 4 of accumulator and 8 t x 4 of output, and 1,024 B:
    # 2 x (356 t + 1,312) + 8,192 = 712 t + 10,816 B; 12,240 B for 2 rows, 11,528 for
    # 1. A byte under 2 rows' need: 8 tiles of one output row (4 input rows, 3
    # inside the border at the top and the bottom), not the per-tap fallback
    torch.manual_seed(0)
    x = torch.randn(1, 1, 16, 16)
    commands = _compile(torch.nn.MaxPool2d(3, 2, 1), x, "tpu-v3", 712 * 2 + 10816 - 1)
    assert [c.op.dst.shape for c in _loads(commands)] == (
        [(1, 1, 3, 16)] + [(1, 1, 4, 16)] * 6 + [(1, 1, 3, 16)])
    assert _maxima(commands) == 8 * 8


def test_a_fused_epilogue_counts_in_the_tiles_scratchpad():
    torch.manual_seed(0)
    x = torch.randn(1, 4, 16, 16)
    assert len(_loads(_compile(_PoolRelu(), x, "tpu-v3", ONE_TILE_RELU))) == 1
    assert len(_loads(_compile(_PoolRelu(), x, "tpu-v3", ONE_TILE_RELU - 1))) == 2


def test_one_image_is_shared_by_the_cores_in_row_tiles():
    # the same pool on tpu-v4's two cores: 8 output rows, 4 a core; halving again (2
    # rows, 6 input rows, 2 of them re-read) does not pay, so one tile per core
    torch.manual_seed(0)
    x = torch.randn(1, 4, 16, 16)
    loads = _loads(_compile(torch.nn.MaxPool2d(3, 2, 1), x, "tpu-v4"))
    assert [c.engine.split(".")[0] for c in loads] == ["core0", "core1"]
    assert [c.op.dst.shape for c in loads] == [(1, 4, 9, 16)] * 2


def test_a_pooling_of_an_image_without_a_batch_dim():
    torch.manual_seed(0)
    x = torch.randn(4, 12, 12)
    commands = _compile(torch.nn.MaxPool2d(3, 2, 1), x, "tpu-v3")
    assert _maxima(commands) == 8  # one tile, 9 taps


def test_a_split_counts_the_tiles_of_every_image():
    # 4 images of 64 output rows on one core, tiles of 32 rows: 4 x 2 = 8 tiles, more
    # than TILES_PER_CORE (4), though each re-reads only 2 of its 64 input rows
    geo = Geometry((3, 3), (2, 2), (1, 1), 64, 64, 130, 130)
    assert not _split_pays(geo, 4, 64, 32, 1)
    assert _split_pays(geo, 2, 64, 32, 1)  # 4 tiles


def test_a_split_reads_the_row_stride():
    # 3x3 windows, stride 2 down and 1 across: tiles of 8 output rows load 2 x 7 + 3 =
    # 17 rows, 18 in whole phases, 16 their own: 8 x 2 re-read <= 16; 4-row tiles
    # re-read 2 of 8
    geo = Geometry((3, 3), (2, 1), (1, 1), 64, 64, 130, 66)
    assert _split_pays(geo, 1, 64, 8, 64)
    assert not _split_pays(geo, 1, 64, 4, 64)


# A 2x2 stride-2 max pool of [1, 4, 8, 8] f32 on one TPU v3 core: 4 x 4 outputs, tiles
# of one output row (no halo: the split halves 4 -> 2 -> 1), a window of 2 rows of 8.
# A tile of c channels needs, per set, the window twice (2 x 2 x 8 x c x 4 B = 128 c),
# the accumulator (4 x c x 4 = 16 c) and the output tile (4 x c x 4 = 16 c), and
# 1,024 B: 2 x (160 c + 1,024) + 8,192 = 320 c + 10,240 B.
@pytest.mark.parametrize("capacity, shapes, maxima", [
    (320 * 2 + 10240, [(1, 2, 2, 8)] * 8, 8 * 3),       # 4 rows x 2 pairs of channels
    (320 * 2 + 10240 - 1, [(1, 1, 2, 8)] * 16, 16 * 3),  # one channel a tile
    # not even one channel's row fits: the per-tap fallback, all of it in one tile
    # (2 sets x 2 buffers x 4 ch x 16 pixels x 4 B + 8,192 B), a strided load per tap
    # (one tile: 3 maxima)
    (320 + 10240 - 1, [(1, 4, 4, 4)] * 4, 3),
], ids=["pairs", "singles", "per-tap"])
def test_channels_are_halved_once_a_tile_is_one_row(capacity, shapes, maxima):
    torch.manual_seed(0)
    x = torch.randn(1, 4, 8, 8)
    commands = _compile(torch.nn.MaxPool2d(2, 2), x, "tpu-v3", capacity)
    assert [c.op.dst.shape for c in _loads(commands)] == shapes
    assert _maxima(commands) == maxima
    if len(shapes) > 4:  # TPU v3's 4 DMA engines: loads take turns on 3, the 4th stores
        assert [c.engine for c in _loads(commands)] == [
            f"core0.dma{i % 3}" for i in range(len(shapes))]
        assert {c.engine for c in commands if isinstance(c.op, Store)} == {"core0.dma3"}


def test_the_split_tries_half_of_an_even_tile():
    # 3x3 stride-2 pool of 56 x 56 (28 output rows) on one core: 28 -> 14 rows a tile;
    # 7 rows would re-read 2 of 14 rows (> 1/8), so two tiles of 14 rows, 29 input rows
    # inside the border each
    torch.manual_seed(0)
    x = torch.randn(1, 4, 56, 56)
    loads = _loads(_compile(torch.nn.MaxPool2d(3, 2, 1), x, "tpu-v3"))
    assert [c.op.dst.shape for c in loads] == [(1, 4, 29, 56)] * 2


def test_every_command_of_a_pooling_is_its_ops():
    # the border's fills, the load, the rearrangement, the taps and the store: all of
    # them the exported op's (reports attribute time by it)
    torch.manual_seed(0)
    x = torch.randn(1, 4, 16, 16)
    commands = _compile(torch.nn.MaxPool2d(3, 2, 1), x, "tpu-v3")
    assert {c.source for c in commands} == {"max_pool2d_with_indices"}
    # the first maximum reads two taps: no copy of the first into the accumulator
    assert not any(isinstance(c.op, VCopy) for c in commands)


def test_a_one_tap_pool_copies_its_tap():
    # a 1x1 window of stride 2 (a subsampling) of [1, 4, 8, 8]: 4 x 4 outputs; no halo,
    # so the split halves 4 -> 2 -> 1 output rows (4 tiles, TILES_PER_CORE), each
    # loading 2 input rows of 8 columns and copying its one tap, 4 pixels x 4 channels
    torch.manual_seed(0)
    x = torch.randn(1, 4, 8, 8)
    commands = _compile(torch.nn.MaxPool2d(1, 2), x, "tpu-v3")
    assert [c.op.dst.shape for c in _loads(commands)] == [(1, 4, 2, 8)] * 4
    copies = [c.op for c in commands if isinstance(c.op, VCopy)]
    assert [(op.src.shape, op.dst.shape) for op in copies] == [((4, 4), (4, 4))] * 4
    assert _maxima(commands) == 0
    assert {c.source for c in commands} == {"max_pool2d_with_indices"}


@pytest.mark.parametrize("pool, ops", [
    # two taps: their sum (read both, write it), the division on it in registers
    (torch.nn.AvgPool2d((1, 2), 2), [("add", False), ("mul", True)]),
    # one tap, divided by 2: copied, then divided in a pass of its own
    (torch.nn.AvgPool2d(1, 2, divisor_override=2), [("mul", False)]),
    # one tap, divided by 1: the copy only
    (torch.nn.AvgPool2d(1, 2), []),
], ids=["two-taps", "one-tap-halved", "one-tap"])
def test_an_average_divides_chained_only_after_a_sum(pool, ops):
    torch.manual_seed(0)
    x = torch.randn(1, 4, 8, 8)
    commands = _compile(pool, x, "tpu-v3")
    tiles = len(_loads(commands))
    assert [(c.op.kind.value, c.op.chained) for c in commands if isinstance(c.op, Binary)
            and not isinstance(c.op.a, Scalar)] == ops * tiles
    assert {c.source for c in commands} == {"avg_pool2d"}
