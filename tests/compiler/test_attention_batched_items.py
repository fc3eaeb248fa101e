"""Small attention items adjacent in DRAM (Swin's 49x49 windows) share a step: one DMA
command per operand for the group instead of a ~3 KB one per item, whose ~600-cycle
latency bound the kernel on tpu-v4 (34,290 cycles for 64 windows x 3 heads before)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler.compile import clear_cache
from compiler.ir.dtypes import DType
from compiler.ir.ops import Load, MatMul, Store, Transpose
from compiler.kernels.attention_items import group_size, latency_bound, lead_box
from compiler_helpers import config


class Attention(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


class WindowAttention(torch.nn.Module):
    """Swin's form: q, k, v [windows, tokens, heads * dim] split into heads (stored
    with the heads after the tokens), a position bias [heads, tokens, tokens] shared by
    the windows, the heads merged back."""

    def forward(self, q, k, v, bias):
        w, n, _ = q.shape
        q, k, v = (x.view(w, n, 3, 32).transpose(1, 2) for x in (q, k, v))
        scores = q @ k.transpose(-1, -2) * 32 ** -0.5 + bias
        return (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(w, n, 96)


def _compile(module: torch.nn.Module, args: tuple, preset: str, decompose: bool = True):
    """``decompose``: written-out attention is matched after the decompositions; SDPA
    is kept whole without them (decomposed, bf16 SDPA runs in f32)."""
    clear_cache()
    exported = torch.export.export(module, args)
    if decompose:
        exported = exported.run_decompositions()
    return compiler.compile_graph(exported, config(preset))


def test_lead_box_is_a_run_of_items_or_none():
    assert lead_box(0, 6, (64, 3)) == ((0, 2), (0, 3))
    assert lead_box(3, 3, (64, 3)) == ((1, 2), (0, 3))
    assert lead_box(4, 2, (64, 3)) == ((1, 2), (1, 3))
    assert lead_box(2, 2, (64, 3)) is None  # (0, 2) and (1, 0): not one box
    assert lead_box(3, 4, (64, 3)) is None


def test_group_size_takes_the_most_items_that_tile_the_batch_in_boxes():
    def fits(group: int) -> bool:
        return True

    # [64, 3] on 2 cores: 8 at most; runs of 8 and 7 are not boxes, of 6 (2 windows) are
    assert group_size((64, 3), 2, fits) == 6
    # [24] on 2 cores, 3 groups a core at least: 24 // 6 = 4
    assert group_size((24,), 2, fits) == 4
    assert group_size((24,), 2, lambda g: g <= 3) == 3
    assert group_size((192,), 2, fits) == 8


def test_latency_bound_on_tpu_v4_not_on_atom():
    # tpu-v4: 49x32x49 and 49x49x32 matmuls are one fold each on a 128x128 array with
    # double-buffered weights, 128 + 2 * 128 + 128 - 2 = 510 cycles, 128 back to back:
    # (128 + 128) / 4 arrays = 64 a item; 3 loads of 100 + 500 cycles, 3 load engines
    # x 4 in flight: 3 * 600 / 12 = 150 > 64
    assert latency_bound(config("tpu-v4"), 49, 49, 32, 32, DType.bf16, 3)
    # atom: one 64x32 array, single-buffered: Q K^T 2 folds of 2 * 64 + 32 + 49 - 2 =
    # 207, P V one: 621 an item; 3 loads of 64 + 300 cycles on 1 engine x 4: 273 < 621
    assert not latency_bound(config("atom"), 49, 49, 32, 32, DType.bf16, 3)


def test_adjacent_items_load_with_one_command_per_operand():
    torch.manual_seed(0)
    q, k, v = (torch.randn(24, 49, 32, dtype=torch.bfloat16) for _ in range(3))
    compiled = _compile(Attention(), (q, k, v), "tpu-v4", decompose=False)
    (out,), _ = compiled.run(q, k, v)
    torch.testing.assert_close(out, Attention()(q, k, v), rtol=2e-2, atol=2e-2)
    commands = compiled.program.commands
    loads = [c.op for c in commands if isinstance(c.op, Load)]
    stores = [c.op for c in commands if isinstance(c.op, Store)]
    # 24 items, 2 cores, 3 groups a core at least: 6 groups of 4 items; Q, K^T and V of
    # a group in one command each (18, against 72 one item at a time), one store each
    assert len(loads) == 6 * 3 and len(stores) == 6
    assert Counter(ld.src.tensor for ld in loads) == {"q": 6, "k": 6, "v": 6}
    assert all(ld.src.shape == (4, 49, 32) for ld in loads)
    assert all(st.dst.shape == (4, 49, 32) for st in stores)
    # the matmuls stay one item each, two per item
    matmuls = [c.op for c in commands if isinstance(c.op, MatMul)]
    assert len(matmuls) == 24 * 2 and all(m.a.shape[0] == 49 for m in matmuls)


@pytest.mark.parametrize("windows, per_group", [(8, 1), (16, 2)])
def test_swin_windows_with_heads_after_tokens_and_a_shared_bias(windows, per_group):
    torch.manual_seed(1)
    q, k, v = (torch.randn(windows, 49, 96) for _ in range(3))
    bias = torch.randn(3, 49, 49)
    compiled = _compile(WindowAttention(), (q, k, v, bias), "tpu-v4")
    (out,), _ = compiled.run(q, k, v, bias)
    torch.testing.assert_close(out, WindowAttention()(q, k, v, bias), rtol=1e-5, atol=1e-5)
    commands = compiled.program.commands
    loads = [c.op for c in commands if isinstance(c.op, Load)]
    # 8 windows x 3 heads on 2 cores: at most 24 // 6 = 4 items, runs of 4 wrap: a
    # group is a window's 3 heads. 16 windows: 48 // 6 = 8 at most, runs of 8 and 7 do
    # not tile [16, 3] in boxes, of 6 (two windows) do. A group's q, k and v are one
    # [49 * windows, 96] command each, the bias [3, 49, 49] one (added to the scores of
    # each of its windows), the output one; K transposed by one vector op a group.
    groups = windows // per_group
    assert len(loads) == groups * 4
    assert sum(isinstance(c.op, Store) for c in commands) == groups
    assert sum(isinstance(c.op, Transpose) for c in commands) == groups
    assert Counter(math.prod(ld.src.shape) for ld in loads) == {
        per_group * 49 * 96: groups * 3, 3 * 49 * 49: groups}


class MaskedAttention(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return torch.softmax(q @ k.transpose(-1, -2) * 32 ** -0.5 + mask, -1) @ v


def test_a_mask_shared_by_the_heads_is_broadcast_over_the_group():
    torch.manual_seed(2)
    q, k, v = (torch.randn(16, 3, 49, 32) for _ in range(3))
    mask = torch.randn(16, 1, 49, 49)  # Swin's shifted-window mask: one per window
    compiled = _compile(MaskedAttention(), (q, k, v, mask), "tpu-v4")
    (out,), _ = compiled.run(q, k, v, mask)
    torch.testing.assert_close(out, MaskedAttention()(q, k, v, mask), rtol=1e-5, atol=1e-5)
    loads = [c.op for c in compiled.program.commands if isinstance(c.op, Load)]
    # 48 items: groups of 6 (two windows' 3 heads), 8 of them; the mask's [2, 1, 49, 49]
    # for a group in one command, beside q, k and v's [2, 3, 49, 32]
    assert Counter(ld.src.shape for ld in loads) == {(2, 3, 49, 32): 24, (2, 1, 49, 49): 8}


class FlatKeys(torch.nn.Module):
    """K viewed [16, 3, 7, 8] from a [336, 8] tensor: a group's keys are one [42, 8]
    piece of it, which no single DMA can write transposed per item."""

    def forward(self, q, k_flat, v):
        k = k_flat.view(16, 3, 7, 8)
        return torch.softmax(q @ k.transpose(-1, -2) * 0.3, -1) @ v


def test_keys_of_another_shape_load_as_one_piece_and_transpose_on_the_vector_unit():
    torch.manual_seed(3)
    q, v, k_flat = torch.randn(16, 3, 7, 8), torch.randn(16, 3, 7, 8), torch.randn(336, 8)
    compiled = _compile(FlatKeys(), (q, k_flat, v), "tpu-v4")
    (out,), _ = compiled.run(q, k_flat, v)
    torch.testing.assert_close(out, FlatKeys()(q, k_flat, v), rtol=1e-5, atol=1e-5)
    commands = compiled.program.commands
    loads = [c.op for c in commands if isinstance(c.op, Load)]
    # 48 items in 8 groups of 6: K as [42, 8] rows of its tensor, then one transpose
    assert Counter((ld.src.tensor, ld.src.shape) for ld in loads) == {
        ("q", (2, 3, 7, 8)): 8, ("k_flat", (42, 8)): 8, ("v", (2, 3, 7, 8)): 8}
    transposes = [c.op for c in commands if isinstance(c.op, Transpose)]
    assert [(t.src.shape, t.dst.shape) for t in transposes] == [((6, 7, 8), (6, 8, 7))] * 8
