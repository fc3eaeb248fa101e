"""How the pooling kernel spends its time: a tile's taps are reduced in one pass over
the scratchpad (the running max or sum in registers, each tap read once, one write),
and a core's share is cut into a few tiles so that the next tile's load runs under
this one's work, as long as a tile re-reads at most 1/8 of its input rows.

ResNet's stem pool on one TPU v3 core was one tile: load, reduce, store in turn
(24,722 cycles); it is four now."""

from __future__ import annotations

import pytest
import torch

import compiler
from archsim.vector import streamed_bytes
from compiler.compile import clear_cache
from compiler.ir.operands import Scalar
from compiler.ir.ops import Binary, Load
from compiler.kernels.pool import HALO_SHARE, TILES_PER_CORE
from compiler_helpers import config


def _compile(pool: torch.nn.Module, x: torch.Tensor, preset: str):
    clear_cache()
    exported = torch.export.export(pool.eval(), (x,)).run_decompositions()
    compiled = compiler.compile_graph(exported, config(preset))
    (out,), result = compiled.run(x)
    clear_cache()
    torch.testing.assert_close(out, pool(x), rtol=1e-6, atol=1e-6)  # max: exact
    return compiled, result


def test_the_taps_of_a_tile_are_reduced_in_one_pass():
    # 3x3 max pool: eight maxima per tile; the first reads two taps and writes the
    # result, the seven after it hold that result in registers and read one tap each
    torch.manual_seed(0)
    x = torch.randn(1, 16, 20, 20, dtype=torch.float16)
    compiled, _ = _compile(torch.nn.MaxPool2d(3, 2, 1), x, "tpu-v3")
    maxima = [c.op for c in compiled.program.commands
              if isinstance(c.op, Binary) and c.op.kind.name == "max"]
    assert len(maxima) == 8  # one tile (10 output rows: under the split's limits)
    assert [op.chained for op in maxima] == [False] + [True] * 7
    tap = maxima[0].b.nbytes
    assert [streamed_bytes(op) for op in maxima] == [3 * tap] + [tap] * 7


def test_an_average_pool_divides_in_the_same_pass():
    torch.manual_seed(0)
    x = torch.randn(1, 8, 12, 12)
    compiled, _ = _compile(torch.nn.AvgPool2d(3, 2, 1), x, "tpu-v3")
    divide = [c.op for c in compiled.program.commands if isinstance(c.op, Binary)
              and c.op.kind.name == "mul" and isinstance(c.op.b, Scalar)]
    assert len(divide) == 1 and divide[0].chained


def test_one_core_cuts_the_stem_pool_into_tiles_whose_loads_overlap_the_work():
    # ResNet-18's stem pool, 112x112x64 -> 56x56x64, on one TPU v3 core: output rows
    # 56 -> 28 -> 14 a tile (4 tiles = TILES_PER_CORE; 7 rows would make 8); a tile of
    # 14 rows loads 2 * 14 + 2 input rows (a whole number of stride phases), two of them
    # its neighbour's too (2/28 <= 1/8); the first and last tiles' outer rows are padding
    torch.manual_seed(0)
    x = torch.randn(1, 64, 112, 112, dtype=torch.bfloat16)
    compiled, result = _compile(torch.nn.MaxPool2d(3, 2, 1), x, "tpu-v3")
    commands = compiled.program.commands
    loads = [i for i, c in enumerate(commands) if isinstance(c.op, Load)]
    assert len(loads) == TILES_PER_CORE
    assert [commands[i].op.dst.shape[-2] for i in loads] == [29, 30, 30, 29]
    first_max = next(i for i, c in enumerate(commands) if isinstance(c.op, Binary)
                     and c.op.kind.name == "max")
    # the second tile's load runs while the first tile is being reduced
    assert result.starts[loads[1]] < result.ends[first_max]


@pytest.mark.parametrize("kernel, stride, rows", [(3, 2, 8), (3, 1, 16), (2, 2, 1)])
def test_a_tile_rereads_at_most_an_eighth_of_its_rows(kernel, stride, rows):
    # the least output rows a tile may have: it loads (rows - 1) * stride + kernel input
    # rows rounded up to whole stride phases, rows * stride of them its own, and the
    # rest (two for 3x3 windows, none for 2x2 stride 2) at most 1 / HALO_SHARE of those
    from compiler.kernels.conv_geometry import Geometry
    from compiler.kernels.pool import _split_pays

    geo = Geometry((kernel, kernel), (stride, stride), (1, 1), 64, 64, 130, 130)
    assert _split_pays(geo, 1, 64, rows, 64)
    assert rows == 1 or not _split_pays(geo, 1, 64, rows - 1, 64)
    assert HALO_SHARE * (geo.rows(rows) - rows * stride) <= rows * stride


def test_a_pool_whose_tiles_could_split_to_single_rows_stops_there():
    # 2x2 stride 2 windows share no rows, so the halo never stops the halving: tiles of
    # one output row (4 of them on one core) are the end of it
    torch.manual_seed(0)
    x = torch.randn(1, 4, 8, 8)
    compiled, _ = _compile(torch.nn.MaxPool2d(2, 2), x, "tpu-v3")
    loads = [c.op for c in compiled.program.commands if isinstance(c.op, Load)]
    assert [ld.dst.shape[-2] for ld in loads] == [2, 2, 2, 2]


@pytest.mark.parametrize("pool, shape", [(torch.nn.MaxPool2d(3, 2, 1), (1, 4, 15, 15)),
                                         (torch.nn.AvgPool2d(3, 2, 1), (2, 5, 13, 9))])
def test_an_odd_sized_image_loads_one_window_a_tile(pool, shape):
    # 15 + 2 padded rows are 8 output rows' window of 2 x 8 + 1 = 17, rounded up to whole
    # stride phases 18: one row past the padded input, filled with the border, read by
    # no tap. It took the per-tap path (a strided load a tap: 9 loads, 5,918 cycles on
    # tpu-v3 for the max pool against 1,498 now)
    torch.manual_seed(0)
    x = torch.randn(shape)
    compiled, _ = _compile(pool, x, "tpu-v3")
    loads = [c.op for c in compiled.program.commands if isinstance(c.op, Load)]
    assert len(loads) == shape[0]  # one tile an image: 8 (7) output rows, one window
    assert {ld.dst.shape[-2:] for ld in loads} == {shape[-2:]}  # the whole image in it
