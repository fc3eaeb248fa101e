"""Small attention items in groups, pinned where mutation testing found them loose
(``python benchmarks/mutation.py compiler/kernels/attention_items.py``): the latency
bound at its edge, a group of two, an item's tile in a group buffer, and a group's keys
transposed by the DMA (the vector unit's transpose gives the same numbers)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler.compile import clear_cache
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.ir.ops import Load, Transpose
from compiler.kernels.attention_items import group_size, item_tile, latency_bound
from compiler_helpers import config


@pytest.mark.parametrize("dram_latency, bound", [(156, False), (157, True)])
def test_the_latency_bound_at_its_edge(dram_latency: int, bound: bool) -> None:
    # tpu-v4, a 49x49 item of 32-wide heads: each matmul is one 510-cycle fold, 382 of
    # them saved back to back, over 4 arrays: (2 x 510 - 2 x 382) / 4 = 64 cycles. 3
    # loads of 100 setup + the DRAM latency over 3 load engines (one of 4 keeps the
    # stores) x 4 outstanding: 3 x (100 + 156) / 12 = 64, not above; 157: 64.25
    cfg = config("tpu-v4").with_overrides({"dram.latency_cycles": dram_latency})
    assert latency_bound(cfg, 49, 49, 32, 32, DType.bf16, 3) is bound


@pytest.mark.parametrize("dram_latency, bound", [(764, False), (765, True)])
def test_the_latency_bound_at_its_edge_on_one_array(dram_latency: int, bound: bool) -> None:
    # atom, bf16: Q K^T 414 cycles (2 folds), P V 207, no saving on its single-buffered
    # array: 621. 3 loads of 64 setup + the DRAM latency on 1 load engine (one of 2
    # keeps the stores) x 4 outstanding: 3 x (64 + 764) / 4 = 621, not above; 765: 621.75
    cfg = config("atom").with_overrides({"dram.latency_cycles": dram_latency})
    assert latency_bound(cfg, 49, 49, 32, 32, DType.bf16, 3) is bound


def test_a_mask_is_a_fourth_load() -> None:
    # 4 x (100 + 156) / 12 = 85.3 > 64 at the edge's 156
    cfg = config("tpu-v4").with_overrides({"dram.latency_cycles": 156})
    assert latency_bound(cfg, 49, 49, 32, 32, DType.bf16, 4)


def test_a_group_of_two_items() -> None:
    # [12] on 2 cores, 3 groups a core at least: 12 // 6 = 2 items a group
    assert group_size((12,), 2, lambda group: True) == 2
    # [10]: 10 // 6 = 1, no group
    assert group_size((10,), 2, lambda group: True) == 1


BUF = SramRef("sram0", 1024, (2 * 3 * 4, 8), DType.f32)
"""A group buffer of lead box (2 windows, 3 heads), 4 rows of 8 an item."""


def test_an_items_tile_in_a_group_stored_item_major() -> None:
    # item 4 (window 1, head 1): rows 16..20 of [24, 8], 4 x 4 x 8 x 4 B = 512 B in
    tile = item_tile(BUF, ((0, 2), (0, 3)), 4, 4, 8, False)
    assert (tile.offset, tile.shape, tile.strides) == (1024 + 512, (4, 8), None)


def test_an_items_tile_in_a_group_stored_heads_after_tokens() -> None:
    # stored [windows, tokens, heads, 8]: item 4 is window 1 (4 x 3 x 8 elements in),
    # head 1 (8 more), its rows 3 x 8 = 24 elements apart
    tile = item_tile(BUF, ((0, 2), (0, 3)), 4, 4, 8, True)
    assert (tile.offset, tile.shape, tile.strides) == (1024 + (96 + 8) * 4, (4, 8), (24, 1))
    # one head a group: the tiles are dense, one after another
    tile = item_tile(BUF, ((2, 4), (1, 2)), 1, 4, 8, True)
    assert (tile.offset, tile.shape, tile.strides) == (1024 + 32 * 4, (4, 8), None)


class _Sdpa(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("shape, group, strides", [
    # [24] items on 2 cores: groups of 4; K^T [4, 32, 49] written as [4, 49, 32] with
    # an item's 32 x 49 elements apart, a key's 1 apart, a dim's 49 apart
    ((24, 49, 32), (4, 49, 32), (32 * 49, 1, 49)),
    # [16, 3] items: groups of 6 (two batches' 3 heads), one [2, 3, 49, 32] box
    ((16, 3, 49, 32), (2, 3, 49, 32), (3 * 32 * 49, 32 * 49, 1, 49)),
    # [4, 6] items: runs of 4 wrap, groups of 3, half a batch's heads (every other one
    # starts at head 3)
    ((4, 6, 49, 32), (1, 3, 49, 32), (3 * 32 * 49, 32 * 49, 1, 49)),
], ids=["items", "batch-and-heads", "half-the-heads"])
def test_a_groups_keys_are_transposed_by_their_one_load(shape, group, strides) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(shape, dtype=torch.bfloat16) for _ in range(3))
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(_Sdpa(), (q, k, v)),
                                      config("tpu-v4"))
    (out,), _ = compiled.run(q, k, v)
    torch.testing.assert_close(out, _Sdpa()(q, k, v), rtol=2e-2, atol=2e-2)
    commands = compiled.program.commands
    keys = [c.op for c in commands if isinstance(c.op, Load) and c.op.src.tensor == "k"]
    assert {(ld.src.shape, ld.dst.shape, ld.dst.strides) for ld in keys} == {
        (group, group, strides)}
    assert not any(isinstance(c.op, Transpose) for c in commands)  # none on the vector unit
