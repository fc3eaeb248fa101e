"""Causal flash attention for prefill, in the style of vLLM-RBLN's
``flash_attention_naive_prefill``: registered with ``torch.library.triton_op`` and
called as ``torch.ops.rbln_triton_ops.flash_attention_naive_prefill``.

One program per (query block, batch x head); keys and values stream in blocks up to
the causal diagonal, with the online softmax (running max and sum in f32).
"""

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton


@triton.jit
def flash_attention_naive_prefill_kernel(q_ptr, k_ptr, v_ptr, o_ptr, scale, seq_len,
                                         BM: tl.constexpr, BN: tl.constexpr,
                                         D: tl.constexpr):
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    base = head * seq_len * D
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + base + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, D], dtype=tl.float32)
    for start in range(0, (pid_m + 1) * BM, BN):
        cols = start + offs_n
        k = tl.load(k_ptr + base + cols[:, None] * D + offs_d[None, :])
        qk = tl.dot(q, tl.trans(k)) * scale
        qk = tl.where(offs_m[:, None] >= cols[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_ptr + base + cols[:, None] * D + offs_d[None, :])
        acc += tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * D + offs_d[None, :], acc.to(o_ptr.dtype.element_ty))


@triton_op("rbln_triton_ops::flash_attention_naive_prefill", mutates_args=())
def flash_attention_naive_prefill(query: torch.Tensor, key: torch.Tensor,
                                  value: torch.Tensor, scale: float) -> torch.Tensor:
    """query, key, value: [batch, heads, seq, head_dim], seq a multiple of 64."""
    batch, heads, seq, dim = query.shape
    out = torch.empty_like(query)
    block = 64
    wrap_triton(flash_attention_naive_prefill_kernel)[(seq // block, batch * heads)](
        query, key, value, out, scale, seq, BM=block, BN=block, D=dim)
    return out


@flash_attention_naive_prefill.register_fake
def _(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
      scale: float) -> torch.Tensor:
    """Shape propagation without tracing the kernel (as vLLM-RBLN registers its ops)."""
    return torch.empty_like(query)


if __name__ == "__main__":
    from demo import demo

    torch.manual_seed(0)
    shape = (1, 4, 256, 64)
    demo("causal flash attention (prefill)",
         lambda q, k, v: flash_attention_naive_prefill(q, k, v, 0.125),
         lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
             q, k, v, is_causal=True, scale=0.125),
         torch.randn(shape), torch.randn(shape), torch.randn(shape))
