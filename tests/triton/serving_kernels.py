"""Kernels with the constructs of vLLM's Triton serving kernels, re-typed for the tests
(not vLLM's code): paged decode attention over a block table, varlen attention that
finds its sequence by a binary search over ``query_start_loc``, a fused-MoE GEMM over
``sorted_token_ids`` with its early return, and merge_attn_states' select on loaded
log-sum-exps. Each comes with a torch reference on CPU."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from paged_attention import paged_decode_kernel, paged_decode_reference  # noqa: F401


@triton.jit
def split_decode_kernel(q_ptr, k_cache, v_cache, block_table, seq_lens, partial_ptr, scale,
                        max_pages, q_heads: tl.constexpr, group: tl.constexpr,
                        HEADS: tl.constexpr, VALID: tl.constexpr, SPLITS: tl.constexpr,
                        PAGE: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    """Stage 1 of a split-KV paged decode: program (sequence, head block, split) attends
    HEADS query heads of one kv head (a ``tl.dot``) over its share of the sequence and
    writes the partial output and its log-sum-exp (at column D) of partial [B, Hq,
    SPLITS, D + 1]; an empty share writes nothing. VALID = min(HEADS, group) rows of
    the HEADS are real heads."""
    seq = tl.program_id(0)
    head_block = tl.program_id(1)
    split = tl.program_id(2)
    kv_heads: tl.constexpr = q_heads // group
    kv_head = head_block // tl.cdiv(group, HEADS)
    heads = head_block * VALID + tl.arange(0, HEADS)
    head_ok = (heads < (head_block + 1) * VALID) & (heads < q_heads)
    offs_d = tl.arange(0, D)
    seq_len = tl.load(seq_lens + seq)
    q = tl.load(q_ptr + (seq * q_heads + heads[:, None]) * D + offs_d[None, :],
                mask=head_ok[:, None], other=0.0)
    share = tl.cdiv(seq_len, SPLITS)
    lo = share * split
    hi = tl.minimum(lo + share, seq_len)
    m = tl.zeros([HEADS], dtype=tl.float32) - float("inf")
    total = tl.zeros([HEADS], dtype=tl.float32)
    acc = tl.zeros([HEADS, D], dtype=tl.float32)
    if hi > lo:
        for start in range(lo, hi, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            page = tl.load(block_table + seq * max_pages + offs_n // PAGE, mask=offs_n < hi,
                           other=0)
            slot = page * PAGE + offs_n % PAGE
            k = tl.load(k_cache + (slot[None, :] * kv_heads + kv_head) * D + offs_d[:, None],
                        mask=offs_n[None, :] < hi, other=0.0)
            qk = tl.dot(q, k) * scale
            qk = tl.where(head_ok[:, None] & (offs_n[None, :] < hi), qk, float("-inf"))
            v = tl.load(v_cache + (slot[:, None] * kv_heads + kv_head) * D + offs_d[None, :],
                        mask=offs_n[:, None] < hi, other=0.0)
            m_new = tl.maximum(tl.max(qk, 1), m)
            rescale = tl.exp(m - m_new)
            p = tl.exp(qk - m_new[:, None])
            acc = acc * rescale[:, None] + tl.dot(p, v)
            total = total * rescale + tl.sum(p, 1)
            m = m_new
        row = (seq * q_heads + heads) * SPLITS + split
        tl.store(partial_ptr + row[:, None] * (D + 1) + offs_d[None, :], acc / total[:, None],
                 mask=head_ok[:, None])
        tl.store(partial_ptr + row * (D + 1) + D, m + tl.log(total), mask=head_ok)


@triton.jit
def split_reduce_kernel(partial_ptr, seq_lens, out_ptr, q_heads: tl.constexpr,
                        SPLITS: tl.constexpr, D: tl.constexpr):
    """Stage 2: merge the non-empty splits of one (sequence, head) by their lse."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    seq_len = tl.load(seq_lens + seq)
    offs_d = tl.arange(0, D)
    m = -float("inf")
    total = 0.0
    acc = tl.zeros([D], dtype=tl.float32)
    for split in range(0, SPLITS):
        share = tl.cdiv(seq_len, SPLITS)
        lo = share * split
        hi = tl.minimum(lo + share, seq_len)
        if hi > lo:
            row = ((seq * q_heads + head) * SPLITS + split) * (D + 1)
            part = tl.load(partial_ptr + row + offs_d)
            lse = tl.load(partial_ptr + row + D)
            m_new = tl.maximum(lse, m)
            rescale = tl.exp(m - m_new)
            weight = tl.exp(lse - m_new)
            acc = acc * rescale + weight * part
            total = total * rescale + weight
            m = m_new
    tl.store(out_ptr + (seq * q_heads + head) * D + offs_d, acc / total)


@triton.jit
def _find_sequence(query_start_loc, num_seqs, q_block, BLOCK_Q: tl.constexpr):
    """The sequence whose query blocks hold global block ``q_block`` (binary search)."""
    left = 0
    right = num_seqs
    while left < right:
        mid = (left + right) // 2
        start = tl.load(query_start_loc + mid)
        if start // BLOCK_Q + mid <= q_block:
            left = mid + 1
        else:
            right = mid
    return left - 1


@triton.jit
def varlen_attention_kernel(q_ptr, k_cache, v_cache, block_table, seq_lens,
                            query_start_loc, out_ptr, scale, num_seqs, max_pages,
                            heads: tl.constexpr, PAGE: tl.constexpr,
                            BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    """Causal attention of a packed batch of new tokens ([tokens, heads, D]) over paged
    caches holding each sequence's context and new tokens; program (global query block,
    head). Query blocks past a sequence's tokens return early."""
    q_block = tl.program_id(0)
    head = tl.program_id(1)
    seq = _find_sequence(query_start_loc, num_seqs, q_block, BLOCK_Q)
    q_start = tl.load(query_start_loc + seq)
    q_len = tl.load(query_start_loc + seq + 1) - q_start
    local = q_block - (q_start // BLOCK_Q + seq)
    if local * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(seq_lens + seq)
    context = seq_len - q_len
    offs_q = local * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, D)
    q_rows = q_start + offs_q
    q_valid = offs_q < q_len
    q = tl.load(q_ptr + (q_rows[:, None] * heads + head) * D + offs_d[None, :],
                mask=q_valid[:, None], other=0.0)
    m = tl.full([BLOCK_Q], -float("inf"), tl.float32)
    total = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, D], tl.float32)
    last = tl.minimum(context + (local + 1) * BLOCK_Q, seq_len)
    for start in range(0, tl.cdiv(last, BLOCK_N)):
        offs_n = start * BLOCK_N + tl.arange(0, BLOCK_N)
        n_valid = offs_n < seq_len
        page = tl.load(block_table + seq * max_pages + offs_n // PAGE, mask=n_valid, other=0)
        slot = page * PAGE + offs_n % PAGE
        k = tl.load(k_cache + (slot[None, :] * heads + head) * D + offs_d[:, None],
                    mask=n_valid[None, :], other=0.0)
        v = tl.load(v_cache + (slot[:, None] * heads + head) * D + offs_d[None, :],
                    mask=n_valid[:, None], other=0.0)
        qk = tl.dot(q, k) * scale
        causal = offs_n[None, :] <= context + offs_q[:, None]
        qk = tl.where(causal & n_valid[None, :], qk, -float("inf"))
        m_new = tl.maximum(m, tl.max(qk, 1))
        rescale = tl.exp(m - m_new)
        p = tl.exp(qk - m_new[:, None])
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p, v)
        m = m_new
    tl.store(out_ptr + (q_rows[:, None] * heads + head) * D + offs_d[None, :],
             acc / total[:, None], mask=q_valid[:, None])


def varlen_grid(query_start_loc: torch.Tensor, block_q: int, heads: int) -> tuple[int, int]:
    """vLLM's grid: every sequence's query blocks, one spare per sequence."""
    tokens = int(query_start_loc[-1])
    return tokens // block_q + len(query_start_loc) - 1, heads


def varlen_reference(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, scale):
    page = k_cache.shape[1]
    out = torch.zeros_like(q)
    for s in range(len(seq_lens)):
        lo, hi = int(query_start_loc[s]), int(query_start_loc[s + 1])
        n = int(seq_lens[s])
        tokens = torch.arange(n)
        slots = block_table[s, tokens // page].long() * page + tokens % page
        k = k_cache.reshape(-1, *k_cache.shape[2:])[slots]
        v = v_cache.reshape(-1, *v_cache.shape[2:])[slots]
        context = n - (hi - lo)
        allowed = tokens[None, :] <= context + torch.arange(hi - lo)[:, None]
        for h in range(q.shape[1]):
            scores = (q[lo:hi, h] @ k[:, h].T) * scale
            scores = scores.masked_fill(~allowed, -math.inf)
            out[lo:hi, h] = torch.softmax(scores, 1) @ v[:, h]
    return out


@triton.jit
def _zeros_to_rows(c_ptr, offs_token, token_mask, offs_n, N, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    c = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    tl.store(c_ptr + (offs_token[:, None] * N + offs_n[None, :]).to(tl.int64), c,
             mask=token_mask[:, None] & (offs_n[None, :] < N))


@triton.jit
def fused_moe_kernel(a_ptr, b_ptr, c_ptr, topk_weights, sorted_token_ids, expert_ids,
                     num_tokens_post_padded, N, K, num_valid_tokens,
                     top_k: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr):
    """C[token, slot] = (A[token // top_k] @ B[expert]) * weight for the token-slots
    sorted by expert in blocks of BLOCK_M (padding ids are >= num_valid_tokens); a block
    of expert -1 (an expert on another rank) writes zeros."""
    pid = tl.program_id(0)
    n_blocks = tl.cdiv(N, BLOCK_N)
    pid_m = pid // n_blocks
    pid_n = pid % n_blocks
    if pid_m * BLOCK_M >= tl.load(num_tokens_post_padded):
        return
    offs_token = tl.load(sorted_token_ids + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    token_mask = offs_token < num_valid_tokens
    offs_n = tl.max_contiguous(tl.multiple_of(pid_n * BLOCK_N + tl.arange(0, BLOCK_N),
                                              BLOCK_N), BLOCK_N)
    expert = tl.load(expert_ids + pid_m).to(tl.int64)
    if expert == -1:
        _zeros_to_rows(c_ptr, offs_token, token_mask, offs_n, N, BLOCK_M, BLOCK_N)
        return
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_token[:, None] // top_k) * K + offs_k[None, :]
    b_ptrs = b_ptr + expert * K * N + offs_k[:, None] * N + offs_n[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=token_mask[:, None] & (offs_k[None, :] < K - k * BLOCK_K),
                    other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_K) & (offs_n[None, :] < N),
                    other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    weight = tl.load(topk_weights + offs_token, mask=token_mask, other=0.0)
    acc = acc * weight[:, None]
    tl.store(c_ptr + offs_token[:, None] * N + offs_n[None, :], acc,
             mask=token_mask[:, None] & (offs_n[None, :] < N))


def moe_align(topk_ids: torch.Tensor, experts: int, block_m: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sorted_token_ids, expert_ids, num_tokens_post_padded) as vLLM's moe_align_block_size
    defines them: token-slots grouped by expert, each group padded to BLOCK_M with the
    id numel (out of range)."""
    flat = topk_ids.reshape(-1)
    ids, blocks = [], []
    for e in range(experts):
        slots = torch.nonzero(flat == e).reshape(-1).tolist()
        padded = -(-len(slots) // block_m) * block_m
        ids += slots + [flat.numel()] * (padded - len(slots))
        blocks += [e] * (padded // block_m)
    return (torch.tensor(ids, dtype=torch.int32), torch.tensor(blocks, dtype=torch.int32),
            torch.tensor([len(ids)], dtype=torch.int32))


def fused_moe_reference(a, w, topk_weights, topk_ids, local=None):
    """``local``: the experts on this rank (the others give zeros)."""
    top_k = topk_ids.shape[1]
    out = torch.zeros(a.shape[0], top_k, w.shape[2])
    for t in range(a.shape[0]):
        for j in range(top_k):
            e = int(topk_ids[t, j])
            if local is None or e in local:
                out[t, j] = (a[t] @ w[e]) * topk_weights[t, j]
    return out


@triton.jit
def merge_states_kernel(out_ptr, prefix_out, prefix_lse, suffix_out, suffix_lse,
                        num_tokens, heads: tl.constexpr, D: tl.constexpr):
    """Merge two partial attentions by their log-sum-exps ([heads, tokens]); an lse of
    +inf (an empty part, as vLLM's FlashAttention reports it) counts as -inf."""
    token = tl.program_id(0)
    head = tl.program_id(1)
    p_lse = tl.load(prefix_lse + head * num_tokens + token)
    s_lse = tl.load(suffix_lse + head * num_tokens + token)
    p_lse = float("-inf") if p_lse == float("inf") else p_lse
    s_lse = float("-inf") if s_lse == float("inf") else s_lse
    top = tl.maximum(p_lse, s_lse)
    p_w = tl.exp(p_lse - top)
    s_w = tl.exp(s_lse - top)
    total = p_w + s_w
    offs = (token * heads + head) * D + tl.arange(0, D)
    merged = tl.load(prefix_out + offs) * (p_w / total) + tl.load(suffix_out + offs) * (s_w / total)
    tl.store(out_ptr + offs, merged)


def merge_states_reference(prefix_out, prefix_lse, suffix_out, suffix_lse):
    p = torch.where(prefix_lse == math.inf, -math.inf, prefix_lse).T[..., None]
    s = torch.where(suffix_lse == math.inf, -math.inf, suffix_lse).T[..., None]
    top = torch.maximum(p, s)
    pw, sw = torch.exp(p - top), torch.exp(s - top)
    return (prefix_out * pw + suffix_out * sw) / (pw + sw)


def cdiv(a: int, b: int) -> int:
    return triton.cdiv(a, b)
