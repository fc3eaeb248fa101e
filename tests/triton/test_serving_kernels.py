"""Serving kernels with vLLM's constructs on npu tensors, built for the values in the
launch's tensors (sequence lengths, block tables, query_start_loc, sorted_token_ids)
and checked against torch on CPU."""

import math

import pytest
import torch
import triton
import triton.language as tl

import torch_bridge  # noqa: F401  (the npu device)
from archsim.config import load_config
from compiler.triton import compile_launch
from serving_kernels import (fused_moe_kernel, fused_moe_reference, merge_states_kernel,
                             split_decode_kernel, split_reduce_kernel,
                             merge_states_reference, moe_align, paged_decode_kernel,
                             paged_decode_reference, varlen_attention_kernel, varlen_grid,
                             varlen_reference)

PAGE, D = 16, 16


def _cache(pages: int, kv_heads: int, seed: int):
    torch.manual_seed(seed)
    return (torch.randn(pages, PAGE, kv_heads, D), torch.randn(pages, PAGE, kv_heads, D))


def _block_table(seq_lens: list[int], max_pages: int, pages: int, seed: int):
    """Each sequence gets distinct, shuffled pages."""
    order = torch.randperm(pages, generator=torch.Generator().manual_seed(seed))
    table = torch.zeros(len(seq_lens), max_pages, dtype=torch.int32)
    used = 0
    for s, n in enumerate(seq_lens):
        k = -(-n // PAGE)
        table[s, :k] = order[used:used + k].to(torch.int32)
        used += k
    return table


def _npu(*tensors):
    return tuple(t.to("npu") for t in tensors)


@pytest.mark.parametrize("q_heads,kv_heads", [(2, 2), (4, 2)], ids=["mha", "gqa"])
def test_paged_decode_attention_matches_torch(q_heads, kv_heads):
    seq_lens = [5, 33, 16, 50]
    k_cache, v_cache = _cache(24, kv_heads, 1)
    table = _block_table(seq_lens, 4, 24, 2)
    q = torch.randn(len(seq_lens), q_heads, D)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    out = torch.empty(len(seq_lens), q_heads, D, device="npu")
    scale = 1 / math.sqrt(D)
    with pytest.warns(UserWarning, match="built for the values in this launch's tensors"):
        paged_decode_kernel[(len(seq_lens), q_heads)](
            *_npu(q, k_cache, v_cache, table, lens), out, scale, 4, q_heads=q_heads,
            kv_heads=kv_heads, PAGE=PAGE, BLOCK_N=32, D=D)
    expected = paged_decode_reference(q, k_cache, v_cache, table, lens, scale)
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("q_heads,kv_heads", [(2, 2), (8, 2)], ids=["mha", "gqa"])
def test_split_kv_paged_decode_in_two_stages_matches_torch(q_heads, kv_heads):
    """4 splits: the 5-token sequence leaves its fourth split empty (2+2+1+0), which
    writes nothing and is skipped by the reduction."""
    seq_lens = [5, 70, 33]
    k_cache, v_cache = _cache(24, kv_heads, 11)
    table = _block_table(seq_lens, 5, 24, 12)
    q = torch.randn(len(seq_lens), q_heads, D)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    group = q_heads // kv_heads
    heads = 4
    partial = torch.empty(len(seq_lens), q_heads, 4, D + 1, device="npu")
    out = torch.empty(len(seq_lens), q_heads, D, device="npu")
    scale = 1 / math.sqrt(D)
    q_n, k_n, v_n, table_n, lens_n = _npu(q, k_cache, v_cache, table, lens)
    grid = (len(seq_lens), -(-q_heads // min(heads, group)), 4)
    split_decode_kernel[grid](q_n, k_n, v_n, table_n, lens_n, partial, scale, 5,
                              q_heads=q_heads, group=group, HEADS=heads,
                              VALID=min(heads, group), SPLITS=4,
                              PAGE=PAGE, BLOCK_N=16, D=D)
    split_reduce_kernel[(len(seq_lens), q_heads)](partial, lens_n, out, q_heads=q_heads,
                                                  SPLITS=4, D=D)
    expected = paged_decode_reference(q, k_cache, v_cache, table, lens, scale)
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-4)


def test_varlen_attention_finds_each_sequence_by_binary_search():
    """Three sequences of 3, 9 and 1 new tokens after 20, 0 and 30 cached ones."""
    new, context = [3, 9, 1], [20, 0, 30]
    seq_lens = [n + c for n, c in zip(new, context)]
    heads = 2
    k_cache, v_cache = _cache(16, heads, 3)
    table = _block_table(seq_lens, 3, 16, 4)
    qsl = torch.tensor([0, 3, 12, 13], dtype=torch.int32)
    q = torch.randn(13, heads, D)
    out = torch.zeros(13, heads, D, device="npu")
    scale = 1 / math.sqrt(D)
    grid = varlen_grid(qsl, 4, heads)
    varlen_attention_kernel[grid](
        *_npu(q, k_cache, v_cache, table, torch.tensor(seq_lens, dtype=torch.int32), qsl),
        out, scale, 3, 3, heads=heads, PAGE=PAGE, BLOCK_Q=4, BLOCK_N=16, D=D)
    expected = varlen_reference(q, k_cache, v_cache, table, seq_lens, qsl, scale)
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-4)


def test_fused_moe_gathers_sorted_tokens_and_skips_padding_blocks():
    """Blocks past num_tokens_post_padded return at once; expert 3's block writes zeros."""
    torch.manual_seed(7)
    tokens, experts, top_k, K, N, block_m = 6, 4, 2, 24, 20, 4
    a = torch.randn(tokens, K)
    w = torch.randn(experts, K, N)
    topk_ids = torch.tensor([[0, 2], [2, 3], [0, 1], [2, 0], [3, 2], [1, 2]])
    topk_weights = torch.rand(tokens, top_k)
    sorted_ids, expert_ids, post_padded = moe_align(topk_ids, experts, block_m)
    expert_ids[expert_ids == 3] = -1  # expert 3 lives on another rank
    # two spare blocks past num_tokens_post_padded, as a launch sized for the worst case has
    sorted_ids = torch.cat([sorted_ids, torch.full((2 * block_m,), tokens * top_k,
                                                   dtype=torch.int32)])
    expert_ids = torch.cat([expert_ids, torch.zeros(2, dtype=torch.int32)])
    c = torch.zeros(tokens, top_k, N, device="npu")
    grid = (len(sorted_ids) // block_m * -(-N // 16),)
    fused_moe_kernel[grid](*_npu(a, w), c, *_npu(topk_weights, sorted_ids, expert_ids,
                                                 post_padded),
                           N, K, tokens * top_k, top_k=top_k, BLOCK_M=block_m, BLOCK_N=16,
                           BLOCK_K=16)
    expected = fused_moe_reference(a, w, topk_weights, topk_ids, local={0, 1, 2})
    torch.testing.assert_close(c.cpu(), expected, rtol=1e-4, atol=1e-4)


def test_merge_attn_states_selects_on_the_loaded_lse():
    """An lse of +inf is a select (no branch): the program holds for any lse values."""
    torch.manual_seed(8)
    tokens, heads = 3, 2
    prefix, suffix = torch.randn(tokens, heads, D), torch.randn(tokens, heads, D)
    p_lse, s_lse = torch.randn(heads, tokens), torch.randn(heads, tokens)
    p_lse[0, 1] = math.inf
    s_lse[1, 2] = math.inf
    out = torch.empty(tokens, heads, D)
    args = (out, prefix, p_lse, suffix, s_lse, tokens)
    program = compile_launch(merge_states_kernel, args, {"heads": heads, "D": D},
                             (tokens, heads), load_config("atom"))
    assert program.resolved == {}
    out_npu = out.to("npu")
    merge_states_kernel[(tokens, heads)](out_npu, *_npu(prefix, p_lse, suffix, s_lse),
                                         tokens, heads=heads, D=D)
    expected = merge_states_reference(prefix, p_lse, suffix, s_lse)
    torch.testing.assert_close(out_npu.cpu(), expected, rtol=1e-5, atol=1e-5)


def _decode_program(seq_lens: list[int], pages: int):
    """Paged decode of 2 sequences x 2 heads (D=16, 16-token pages, BLOCK_N=64) over a
    cache of ``pages`` pages; each sequence's pages are every other page."""
    heads = 2
    k_cache, v_cache = _cache(pages, heads, 9)
    table = torch.stack([torch.arange(s, pages, 2, dtype=torch.int32)[:16] for s in (0, 1)])
    args = (torch.randn(2, heads, D), k_cache, v_cache, table,
            torch.tensor(seq_lens, dtype=torch.int32), torch.empty(2, heads, D), 0.25,
            table.shape[1])
    return compile_launch(paged_decode_kernel, args,
                          {"q_heads": heads, "kv_heads": heads, "PAGE": PAGE, "BLOCK_N": 64,
                           "D": D}, (2, heads), load_config("atom"))


def test_paged_decode_time_follows_the_sequence_lengths_not_the_cache_size():
    """Per program (sequence, head), in atom's 32-byte DRAM granules: q (64 B) and its
    length (32) once; per page touched one block-table read (32); K and V 64 B per valid
    token; per KV tile the 64 offsets ``offs_n < seq_len`` compares against (256, a
    constant tensor). Sequences of 40 and 100 tokens touch 3 and 4+3 pages in 1 and 2
    tiles; the output is 64 B per program."""
    lengths, pages_touched, tiles = [40, 100], [3, 7], [1, 2]
    read = 2 * sum(64 + 32 + 32 * pages + 2 * n * 64 + 256 * t for n, pages, t in
                   zip(lengths, pages_touched, tiles))
    small, big = _decode_program(lengths, 16).simulate(), _decode_program(lengths, 64).simulate()
    assert small.dram_bytes_read == read
    assert small.dram_bytes_written == 2 * 2 * 64
    assert big.total_cycles == small.total_cycles  # 4x the allocated cache, same time
    longer = _decode_program([128, 128], 64)
    result = longer.simulate()
    assert result.dram_bytes_read == 4 * (96 + 32 * 8 + 2 * 128 * 64 + 256 * 2)
    # more tokens, more time, also inside one 64-token tile (a masked tile's padding is
    # filled after its loads, so the loads need not wait for the vector unit)
    cycles = [_decode_program([n, n], 64).simulate().total_cycles
              for n in (16, 32, 48, 64, 128, 256)]
    assert all(a < b for a, b in zip(cycles, cycles[1:])), cycles
    # descriptors per program: q, its length; per tile 4 block-table reads, one K and one
    # V run per page (each sequence's pages are every other page), the offsets constant
    loads = sum(type(c.op).__name__ == "Load" for c in longer.program.commands)
    assert loads == 4 * (2 + 2 * (4 + 4 + 4 + 1))


@triton.jit
def bump_kernel(x_ptr, count_ptr, BLOCK: tl.constexpr):
    """x[:count] += 1 in place, count read from memory (a data-dependent mask)."""
    offs = tl.arange(0, BLOCK)
    keep = offs < tl.load(count_ptr)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=keep) + 1.0, mask=keep)


def test_tracing_on_the_launchs_data_leaves_its_tensors_alone():
    """The trace's stores go to a copy: an in-place kernel adds 1 once, not twice."""
    x = torch.zeros(16, device="npu")
    bump_kernel[(1,)](x, torch.tensor([5], dtype=torch.int32, device="npu"), BLOCK=16)
    assert torch.equal(x.cpu(), torch.tensor([1.0] * 5 + [0.0] * 11))
