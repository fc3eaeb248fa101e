"""Paged decode attention as vLLM runs it: one query token per sequence over a KV cache
of 16-token pages, each sequence's pages listed in a block table and its length in a
tensor. The loop bound (``tl.cdiv(seq_len, BLOCK_N)``) and the K/V addresses come from
those tensors, so archsim builds the program for the values in them at launch: the
simulated time follows the sequence lengths, not the cache's size.

    python examples/triton/paged_attention.py --config atom
"""

from __future__ import annotations

import argparse
import math

import triton
import triton.language as tl


@triton.jit
def paged_decode_kernel(q_ptr, k_cache, v_cache, block_table, seq_lens, out_ptr, scale,
                        max_pages, q_heads: tl.constexpr, kv_heads: tl.constexpr,
                        PAGE: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    """One query token per sequence; program (sequence, query head). K/V caches are
    [pages, PAGE, kv_heads, D]; a query head reads kv head ``head // (q_heads //
    kv_heads)`` (GQA)."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    kv_head = head // (q_heads // kv_heads)
    seq_len = tl.load(seq_lens + seq)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + (seq * q_heads + head) * D + offs_d)
    m = -float("inf")
    total = 0.0
    acc = tl.zeros([D], dtype=tl.float32)
    for start in range(0, tl.cdiv(seq_len, BLOCK_N)):
        offs_n = start * BLOCK_N + tl.arange(0, BLOCK_N)
        valid = offs_n < seq_len
        page = tl.load(block_table + seq * max_pages + offs_n // PAGE, mask=valid, other=0)
        slot = page * PAGE + offs_n % PAGE
        k = tl.load(k_cache + slot[None, :] * (kv_heads * D) + kv_head * D + offs_d[:, None],
                    mask=valid[None, :], other=0.0)
        qk = tl.sum(q[:, None] * k, 0) * scale
        qk = tl.where(valid, qk, -float("inf"))
        m_new = tl.maximum(tl.max(qk, 0), m)
        rescale = tl.exp(m - m_new)
        p = tl.exp(qk - m_new)
        v = tl.load(v_cache + slot[:, None] * (kv_heads * D) + kv_head * D + offs_d[None, :],
                    mask=valid[:, None], other=0.0)
        acc = acc * rescale + tl.sum(p[:, None] * v, 0)
        total = total * rescale + tl.sum(p, 0)
        m = m_new
    tl.store(out_ptr + (seq * q_heads + head) * D + offs_d, acc / total)


def decode(q, k_cache, v_cache, block_table, seq_lens, block_n: int = 64):
    """q [B, Hq, D]; caches [pages, PAGE, Hkv, D]; block_table [B, max_pages] int32."""
    import torch

    batch, q_heads, dim = q.shape
    out = torch.empty_like(q)
    paged_decode_kernel[(batch, q_heads)](
        q, k_cache, v_cache, block_table, seq_lens, out, 1 / math.sqrt(dim),
        block_table.shape[1], q_heads=q_heads, kv_heads=k_cache.shape[2],
        PAGE=k_cache.shape[1], BLOCK_N=block_n, D=dim)
    return out


def paged_decode_reference(q, k_cache, v_cache, block_table, seq_lens, scale):
    """The same attention in torch (CPU tensors)."""
    import torch

    batch, q_heads, _ = q.shape
    page = k_cache.shape[1]
    group = q_heads // k_cache.shape[2]
    out = torch.empty_like(q)
    for b in range(batch):
        n = int(seq_lens[b])
        tokens = torch.arange(n)
        slots = block_table[b, tokens // page].long() * page + tokens % page
        k = k_cache.reshape(-1, *k_cache.shape[2:])[slots]
        v = v_cache.reshape(-1, *v_cache.shape[2:])[slots]
        for h in range(q_heads):
            weights = torch.softmax(k[:, h // group] @ q[b, h] * scale, 0)
            out[b, h] = weights @ v[:, h // group]
    return out


def main(argv: list[str] | None = None) -> str:
    import warnings

    import torch

    import torch_bridge  # noqa: F401  (the npu device)
    from torch_bridge import runtime

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="atom")
    parser.add_argument("--pages", type=int, default=256, help="pages in the KV cache")
    args = parser.parse_args(argv)
    runtime.set_config(args.config)
    batch, q_heads, kv_heads, dim, page = 4, 8, 2, 64, 16
    torch.manual_seed(0)
    k_cache = torch.randn(args.pages, page, kv_heads, dim, device="npu")
    v_cache = torch.randn(args.pages, page, kv_heads, dim, device="npu")
    pages_per_seq = args.pages // batch
    table = torch.randperm(args.pages).reshape(batch, pages_per_seq).to(torch.int32).to("npu")
    lines = [f"paged decode, {batch} sequences x {q_heads} query heads ({kv_heads} kv "
             f"heads) x {dim}, {args.pages} pages of {page} tokens, on {args.config}"]
    q = torch.randn(batch, q_heads, dim, device="npu")
    for length in (64, 256, 1024):
        n = min(length, pages_per_seq * page)
        lengths = torch.tensor([n] * batch, dtype=torch.int32, device="npu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "built for the values in this launch's tensors"
            ms = triton.testing.do_bench(lambda: decode(q, k_cache, v_cache, table, lengths))
        lines.append(f"  {n:>5} tokens per sequence: {ms * 1e3:8.2f} us simulated")
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    main()
