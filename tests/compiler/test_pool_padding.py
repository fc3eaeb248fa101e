"""Pooling pads by addressing, as convolutions do: the window's border is filled with
``-inf`` (max) or zeros (avg) in the scratchpad and the input lands inside it, so the
padded copy ResNet's stem max pool made (a kernel reading and writing the whole
112x112x64 activation) is never made. The numbers are torch's, on both of the pooling
kernel's paths (the window split into stride phases, and the per-tap fallback)."""

from __future__ import annotations

import pytest
import torch

import compiler
import compiler.kernels.conv_geometry as conv_geometry
from compiler.compile import clear_cache
from compiler.ir.ops import Load, Store
from compiler_helpers import config


def _run(model: torch.nn.Module, x: torch.Tensor, per_tap: bool = False):
    clear_cache()
    exported = torch.export.export(model.eval(), (x,)).run_decompositions()
    with pytest.MonkeyPatch.context() as patch:
        if per_tap:  # no window fits: one strided load per tap
            patch.setattr(conv_geometry.Geometry, "fits", lambda self, ty: False)
        compiled = compiler.compile_graph(exported, config("atom"))
    (out,), result = compiled.run(x)
    clear_cache()
    return compiled, out, result


POOLS = [
    torch.nn.MaxPool2d(3, 2, 1),                         # ResNet's stem
    torch.nn.MaxPool2d((3, 2), (2, 1), (1, 1)),          # lopsided
    torch.nn.MaxPool2d(3, 1, 1, dilation=2),
    torch.nn.AvgPool2d(3, 2, 1),                         # zeros counted (the default)
]


@pytest.mark.parametrize("per_tap", [False, True], ids=["phases", "per-tap"])
@pytest.mark.parametrize("pool", POOLS, ids=["stem", "lopsided", "dilated", "avg"])
@pytest.mark.parametrize("hw", [(12, 12), (13, 9)])
def test_padded_pools_match_torch_without_a_padded_copy(pool, hw, per_tap):
    torch.manual_seed(0)
    x = torch.randn(2, 5, *hw) - 3.0  # mostly negative: a zero border would win a max
    compiled, out, result = _run(pool, x, per_tap)
    torch.testing.assert_close(out, pool(x), rtol=1e-6, atol=1e-6)
    assert len(compiled.kernels) == 1
    stores = [c.op for c in compiled.program.commands if isinstance(c.op, Store)]
    assert {s.dst.tensor for s in stores} == {compiled.output_names[0]}  # no padded tensor


def test_a_bfloat16_max_pool_fills_its_border_with_minus_infinity():
    torch.manual_seed(0)
    pool = torch.nn.MaxPool2d(3, 2, 1)
    x = (torch.randn(1, 8, 10, 10) - 4.0).to(torch.bfloat16)
    _, out, _ = _run(pool, x)
    assert torch.equal(out, pool(x))


def test_the_stem_pool_reads_its_input_once():
    # ResNet-18's stem pool on atom: the window of every tile lands inside its border by
    # one strided DMA; with the row overlap of a 3x3 stride-2 window, each tile reads
    # its rows plus one shared row, never a padded copy
    torch.manual_seed(0)
    pool = torch.nn.MaxPool2d(3, 2, 1)
    x = torch.randn(1, 64, 112, 112, dtype=torch.float16)
    compiled, out, _ = _run(pool, x)
    torch.testing.assert_close(out, pool(x), rtol=0, atol=0)
    loads = [c.op for c in compiled.program.commands if isinstance(c.op, Load)]
    read = sum(int(torch.tensor(ld.dst.shape).prod()) for ld in loads)
    assert x.numel() <= read <= x.numel() * 9 // 8  # 2 ty + 1 rows for ty, ty >= 4


@pytest.mark.parametrize("pool, shape", [
    (torch.nn.AvgPool2d(2560, ceil_mode=True), (1, 2560, 7, 7)),   # EfficientNet's pooler
    (torch.nn.MaxPool2d(9, 4, ceil_mode=True), (1, 4, 11, 13)),
    (torch.nn.AvgPool2d(5, 3, 2, ceil_mode=True, count_include_pad=False), (1, 4, 11, 13)),
], ids=["efficientnet-pooler", "max-ceil", "avg-ceil-excluded"])
def test_taps_that_read_only_padding_are_dropped(pool, shape):
    # a 2,560-wide window on a 7x7 image padded the image to 2,560x2,560 and summed
    # 2,560 taps per axis (CapacityError: a minimal tile needed 26 MB); 7 taps read it
    torch.manual_seed(0)
    x = torch.randn(shape)
    compiled, out, _ = _run(pool, x)
    torch.testing.assert_close(out, pool(x), rtol=1e-5, atol=1e-6)
    assert len(compiled.program.commands) < 500
