"""One chip's share of a decoder layer as plain ``torch.nn`` blocks, built on the meta
device (no weights) and timed by compiling and simulating them.

A layer is two blocks, so tensor parallelism can put an all-reduce after each:
:class:`AttentionBlock` (norm, Q/K/V, rotary, attention, output projection, residual)
and :class:`MlpBlock` (norm, SwiGLU or GELU MLP, residual). :class:`Embed` and
:class:`Head` (final norm and LM head, for the last token of each sequence only) wrap
the stack.

Prefill: attention over the prompt is causal (``is_causal``: the flash kernel skips
key tiles the mask hides entirely); the block returns the new K and V, written to
DRAM as the cache. Decode: the block takes the cache as inputs of ``context`` tokens
(the slot of the new token included) and returns the new token's K and V, written
once; grouped-query heads fold into the query rows of their K/V head, so each cache
byte is read once per step; with a KV cache in another dtype the query is cast to it
(the cache is read as stored). The new token's own K/V enter the attention through its
cache slot (same bytes moved as writing it there first).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from archsim.app.models import RMSNorm
from serving.plan import Shard
from serving.spec import ModelSpec

TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def _norm(spec: ModelSpec) -> nn.Module:
    return nn.LayerNorm(spec.hidden) if spec.family == "gpt2" else RMSNorm(spec.hidden)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class AttentionBlock(nn.Module):
    def __init__(self, spec: ModelSpec, shard: Shard, kv_dtype: torch.dtype) -> None:
        super().__init__()
        self.rotary = spec.family == "llama"
        self.heads, self.kv_heads, self.head_dim = shard.heads, shard.kv_heads, spec.head_dim
        self.kv_dtype = kv_dtype
        self.norm = _norm(spec)
        q, kv = shard.heads * spec.head_dim, shard.kv_heads * spec.head_dim
        self.q = nn.Linear(spec.hidden, q, bias=spec.qkv_bias)
        self.k = nn.Linear(spec.hidden, kv, bias=spec.qkv_bias)
        self.v = nn.Linear(spec.hidden, kv, bias=spec.qkv_bias)
        self.o = nn.Linear(q, spec.hidden, bias=spec.dense_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                k_cache: torch.Tensor | None = None, v_cache: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        y = self.norm(x)
        q = self.q(y).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(y).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(y).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.rotary:
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if k_cache is None:
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                  enable_gqa=self.heads != self.kv_heads)
            attn = attn.transpose(1, 2).reshape(b, t, -1)
        else:  # one token: the query heads of each K/V head become its query rows
            group = self.heads // self.kv_heads
            rows = q.reshape(b, self.kv_heads, group * t, self.head_dim).to(k_cache.dtype)
            attn = F.scaled_dot_product_attention(rows, k_cache, v_cache,
                                                  scale=1 / math.sqrt(self.head_dim))
            attn = attn.reshape(b, t, -1).to(x.dtype)
        return x + self.o(attn), k.to(self.kv_dtype), v.to(self.kv_dtype)


class MlpBlock(nn.Module):
    def __init__(self, spec: ModelSpec, shard: Shard) -> None:
        super().__init__()
        self.gated = spec.gated_mlp
        self.norm = _norm(spec)
        self.up = nn.Linear(spec.hidden, shard.intermediate, bias=spec.dense_bias)
        if self.gated:
            self.gate = nn.Linear(spec.hidden, shard.intermediate, bias=False)
        self.down = nn.Linear(shard.intermediate, spec.hidden, bias=spec.dense_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        if self.gated:
            return x + self.down(F.silu(self.gate(y)) * self.up(y))
        return x + self.down(F.gelu(self.up(y), approximate="tanh"))


class Embed(nn.Module):
    def __init__(self, spec: ModelSpec, shard: Shard) -> None:
        super().__init__()
        self.tokens = nn.Embedding(shard.vocab, spec.hidden)
        self.positions = (nn.Embedding(spec.max_positions, spec.hidden)
                          if spec.family == "gpt2" else None)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids)
        return x if self.positions is None else x + self.positions(positions)


class Head(nn.Module):
    def __init__(self, spec: ModelSpec, shard: Shard) -> None:
        super().__init__()
        self.norm = _norm(spec)
        self.lm_head = nn.Linear(spec.hidden, shard.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(x))


def meta_block(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """``module`` moved to meta in ``dtype`` (no memory), in eval mode."""
    return module.to(device="meta", dtype=dtype).eval()


__all__ = ["AttentionBlock", "Embed", "Head", "MlpBlock", "TORCH_DTYPES",
           "meta_block"]
