"""One chip's share of a decoder layer as plain ``torch.nn`` blocks, built on the meta
device (no weights) and timed by compiling and simulating them.

A layer is two blocks, so tensor parallelism can put an all-reduce after each:
:class:`AttentionBlock` (norm, Q/K/V, query/key norms, rotary, attention, output
projection, post-norm, residual) and :class:`MlpBlock` (norm, gated or plain MLP,
post-norm, residual). :class:`Embed` and :class:`Head` (final norm and LM head, for
the last token of each sequence only, as a generation's prefill computes it) wrap the
stack; :class:`Stage` is a pipeline stage's share of all of them, timed as one program
on one chip. Each family's differences (:class:`serving.spec.ModelSpec`) are built as
transformers builds them: fused projections, Gemma's norms, parallel attention and MLP
(the MLP block then takes the attention block's extra output), learned positions.

Prefill: attention over the prompt is causal (``is_causal``: the flash kernel skips
key tiles the mask hides entirely); the block returns the new K and V, written to
DRAM as the cache. Decode: the block takes the cache as inputs of ``context`` tokens
(the slot of the new token included) and returns the new token's K and V, written
once; grouped-query heads fold into the query rows of their K/V head, so each cache
byte is read once per step; with a KV cache in another dtype the query is cast to it
(the cache is read as stored). The new token's own K/V enter the attention through its
cache slot (same bytes moved as writing it there first). Several new tokens with a
cache (what a prefill chunk's attention over its cached prefix costs,
:mod:`serving.iteration`): each attends to the whole cache and not to the others, the
heads as a prefill's attention takes them.

An int8 or fp8 KV cache (``kv_dtype`` ``torch.int8`` or ``torch.float8_e4m3fn``) holds
each token's K and V per head as int8 (or e4m3) with one scale (absmax / 127, or / 448,
in the activations' dtype): the block quantizes its new
K/V on write and returns ``(int8, scale)`` pairs; in decode it takes the cache as such
pairs and dequantizes on read (``int8.to(dtype) * scale`` right before the attention,
which the compiler reads as the int8 cache: its kernel dequantizes each tile on load).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from archsim.app.models import RMSNorm, inverse_frequencies, rotary_tables, rotate
from serving.plan import Shard
from serving.spec import ModelSpec



class GemmaRMSNorm(nn.Module):
    """Gemma's RMSNorm: normalized and scaled by 1 + weight in float32, then cast."""

    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).to(x.dtype)


NORMS: dict[str, Callable[[int], nn.Module]] = {
    "rms": RMSNorm, "rms_f32": GemmaRMSNorm, "layer": nn.LayerNorm}


def _gelu_new(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's GELU, written out as transformers' ``NewGELUActivation`` does."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                       * (x + 0.044715 * torch.pow(x, 3.0))))


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_new": _gelu_new, "relu": F.relu}


def _norm(spec: ModelSpec, size: int | None = None) -> nn.Module:
    return NORMS[spec.norm](size or spec.hidden)


KvEntry = torch.Tensor | tuple[torch.Tensor, torch.Tensor]
"""A layer's cached K (or V): a tensor, or for an int8 cache (int8 values, scales)."""


QUANTIZED_KV: dict[torch.dtype, float] = {torch.int8: 127.0, torch.float8_e4m3fn: 448.0}
"""Cache dtypes stored with a scale per token and head: the value each row's absmax
maps to (int8's largest, e4m3's largest finite)."""


def quantize_kv(x: torch.Tensor, dtype: torch.dtype = torch.int8
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [..., D]`` in ``dtype`` (int8 or float8_e4m3fn) with one scale per row
    (symmetric, absmax / the dtype's largest value, in ``x``'s dtype): int8 rounds and
    clamps ``x / scale`` to [-128, 127], e4m3 rounds it to nearest even."""
    scale = (x.abs().amax(dim=-1, keepdim=True) / QUANTIZED_KV[dtype]).clamp(min=1e-8)
    if dtype == torch.int8:
        return torch.round(x / scale).clamp(-128, 127).to(torch.int8), scale
    return (x / scale).to(dtype), scale


def dequantize_kv(entry: KvEntry) -> torch.Tensor:
    """A cache entry in its compute dtype: int8 values times their row's scale."""
    if isinstance(entry, torch.Tensor):
        return entry
    values, scale = entry
    return values.to(scale.dtype) * scale


class AttentionBlock(nn.Module):
    def __init__(self, spec: ModelSpec, shard: Shard, kv_dtype: torch.dtype) -> None:
        super().__init__()
        self.rotary = spec.positions == "rotary"
        self.rotary_dim = spec.rotary_dim or spec.head_dim
        self.heads, self.kv_heads, self.head_dim = shard.heads, shard.kv_heads, spec.head_dim
        self.kv_dtype = kv_dtype
        self.parallel = spec.parallel
        self.query_scale = spec.head_dim ** -0.5 if spec.scaled_query else None
        self.norm = _norm(spec)
        q, kv = shard.heads * spec.head_dim, shard.kv_heads * spec.head_dim
        self.widths = (q, kv, kv)
        if spec.fused_qkv:
            self.qkv = nn.Linear(spec.hidden, q + 2 * kv, bias=spec.qkv_bias)
        else:
            self.q = nn.Linear(spec.hidden, q, bias=spec.qkv_bias)
            self.k = nn.Linear(spec.hidden, kv, bias=spec.qkv_bias)
            self.v = nn.Linear(spec.hidden, kv, bias=spec.qkv_bias)
        self.qk_norm = spec.qk_norm
        if spec.qk_norm:
            self.q_norm, self.k_norm = _norm(spec, spec.head_dim), _norm(spec, spec.head_dim)
        self.o = nn.Linear(q, spec.hidden, bias=spec.out_bias)
        self.post_norm = spec.sandwich_norms
        if spec.sandwich_norms:
            self.out_norm = _norm(spec)

    def _project(self, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if hasattr(self, "qkv"):
            return self.qkv(y).split(self.widths, dim=-1)
        q = self.q(y)
        if self.query_scale is not None:  # OPT: right after the projection
            q = q * self.query_scale
        return q, self.k(y), self.v(y)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.rotary_dim == self.head_dim:
            return rotate(x, cos, sin)
        part, rest = x[..., :self.rotary_dim], x[..., self.rotary_dim:]
        return torch.cat((rotate(part, cos, sin), rest), dim=-1)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                k_cache: KvEntry | None = None, v_cache: KvEntry | None = None
                ) -> tuple[KvEntry, ...]:
        """(x + attention, new K, new V), and with attention and MLP side by side the
        MLP's input: the shared norm's output, or the layer input for its own norm. K
        and V (new and cached) are ``(int8, scale)`` pairs with an int8 cache."""
        b, t, _ = x.shape
        y = self.norm(x)
        q, k, v = self._project(y)
        q = q.view(b, t, self.heads, self.head_dim)
        k = k.view(b, t, self.kv_heads, self.head_dim)
        if self.qk_norm:  # each head, before heads move ahead of tokens (Qwen3)
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.rotary:
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        scale = 1.0 if self.query_scale is not None else 1 / math.sqrt(self.head_dim)
        if k_cache is None:
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale,
                                                  enable_gqa=self.heads != self.kv_heads)
            attn = attn.transpose(1, 2).reshape(b, t, -1)
        elif t > 1:  # a prefill chunk over the cache alone, as a prefill attends
            k_cache, v_cache = dequantize_kv(k_cache), dequantize_kv(v_cache)
            attn = F.scaled_dot_product_attention(q.to(k_cache.dtype), k_cache, v_cache,
                                                  scale=scale,
                                                  enable_gqa=self.heads != self.kv_heads)
            attn = attn.transpose(1, 2).reshape(b, t, -1).to(x.dtype)
        else:  # one token: the query heads of each K/V head become its query rows
            k_cache, v_cache = dequantize_kv(k_cache), dequantize_kv(v_cache)
            group = self.heads // self.kv_heads
            rows = q.reshape(b, self.kv_heads, group * t, self.head_dim).to(k_cache.dtype)
            attn = F.scaled_dot_product_attention(rows, k_cache, v_cache, scale=scale)
            attn = attn.reshape(b, t, -1).to(x.dtype)
        out = self.o(attn)
        if self.post_norm:
            out = self.out_norm(out)
        kv: tuple[KvEntry, KvEntry] = (
            (quantize_kv(k, self.kv_dtype), quantize_kv(v, self.kv_dtype))
            if self.kv_dtype in QUANTIZED_KV
            else (k.to(self.kv_dtype), v.to(self.kv_dtype)))
        if self.parallel:
            return x + out, *kv, (y if self.parallel == "shared_norm" else x)
        return x + out, *kv


class MlpBlock(nn.Module):
    def __init__(self, spec: ModelSpec, shard: Shard) -> None:
        super().__init__()
        self.gated, self.fused = spec.gated, spec.fused_gate_up
        self.act = ACTIVATIONS[spec.activation]
        self.parallel = spec.parallel
        if spec.parallel != "shared_norm":
            self.norm = _norm(spec)
        inter = shard.intermediate
        if self.fused:
            self.gate_up = nn.Linear(spec.hidden, 2 * inter, bias=spec.mlp_bias)
        else:
            self.up = nn.Linear(spec.hidden, inter, bias=spec.mlp_bias)
            if self.gated:
                self.gate = nn.Linear(spec.hidden, inter, bias=spec.mlp_bias)
        self.down = nn.Linear(inter, spec.hidden, bias=spec.mlp_bias)
        self.post_norm = spec.sandwich_norms
        if spec.sandwich_norms:
            self.out_norm = _norm(spec)

    def _mlp(self, y: torch.Tensor) -> torch.Tensor:
        if self.fused:
            gate, up = self.gate_up(y).chunk(2, dim=-1)
            return self.down(up * self.act(gate))
        if self.gated:
            return self.down(self.act(self.gate(y)) * self.up(y))
        return self.down(self.act(self.up(y)))

    def forward(self, x: torch.Tensor, mlp_in: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` + the MLP of ``x`` (in sequence) or of ``mlp_in`` (side by side: the
        attention block's extra output)."""
        source = x if mlp_in is None else mlp_in
        y = source if self.parallel == "shared_norm" else self.norm(source)
        out = self._mlp(y)
        return x + (self.out_norm(out) if self.post_norm else out)


class Embed(nn.Module):
    def __init__(self, spec: ModelSpec, shard: Shard) -> None:
        super().__init__()
        self.tokens = nn.Embedding(shard.vocab, spec.hidden)
        self.positions = (nn.Embedding(spec.position_rows, spec.hidden)
                          if spec.positions == "learned" else None)
        self.offset = spec.position_offset
        self.scale = spec.hidden ** 0.5 if spec.embed_scale else None

    def forward(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids)
        if self.scale is not None:
            x = x * self.scale
        if self.positions is None:
            return x
        return x + self.positions(positions + self.offset if self.offset else positions)


class Head(nn.Module):
    def __init__(self, spec: ModelSpec, shard: Shard) -> None:
        super().__init__()
        self.norm = _norm(spec)
        self.lm_head = nn.Linear(spec.hidden, shard.vocab, bias=False)
        self.softcap = spec.logit_softcap

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of the last token: the final norm over every token (it ends the model's
        forward, as in transformers and serving runtimes), the LM head over the last."""
        logits = self.lm_head(self.norm(x)[:, -1:])
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


class Layer(nn.Module):
    """A whole decoder layer on one chip: the attention block, then the MLP block."""

    def __init__(self, spec: ModelSpec, shard: Shard, kv_dtype: torch.dtype) -> None:
        super().__init__()
        self.attention = AttentionBlock(spec, shard, kv_dtype)
        self.mlp = MlpBlock(spec, shard)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                k_cache: KvEntry | None = None, v_cache: KvEntry | None = None
                ) -> tuple[torch.Tensor, KvEntry, KvEntry]:
        x, k, v, *mlp_in = self.attention(x, cos, sin, k_cache, v_cache)
        return self.mlp(x, *mlp_in), k, v


class Stage(nn.Module):
    """A pipeline stage on one chip: its layers, after the embedding on the first stage
    and before the head on the last. Takes token ids (first stage) or hidden states,
    the new tokens' positions (the rotary tables are computed from them, as
    transformers does) and, in decode, each layer's cache; returns the hidden states
    (or the last token's logits) and each layer's new K and V."""

    def __init__(self, spec: ModelSpec, shard: Shard, kv_dtype: torch.dtype, layers: int,
                 embed: bool, head: bool) -> None:
        super().__init__()
        self.rotary = spec.positions == "rotary"
        if self.rotary:
            self.register_buffer("inv_freq", inverse_frequencies(spec.rotary_dim
                                                                 or spec.head_dim),
                                 persistent=False)
        self.embed = Embed(spec, shard) if embed else None
        self.layers = nn.ModuleList(Layer(spec, shard, kv_dtype) for _ in range(layers))
        self.head = Head(spec, shard) if head else None

    def forward(self, x: torch.Tensor, positions: torch.Tensor,
                k_caches: list[KvEntry] | None = None,
                v_caches: list[KvEntry] | None = None
                ) -> tuple[torch.Tensor, list[KvEntry], list[KvEntry]]:
        if self.embed is not None:
            x = self.embed(x, positions)
        dtype = x.dtype
        cos = sin = positions  # unused without rotary
        if self.rotary:  # the tables of this step's positions, once for all layers
            cos, sin = rotary_tables(positions, self.inv_freq, dtype)
        keys, values = [], []
        for i, layer in enumerate(self.layers):
            caches = (k_caches[i], v_caches[i]) if k_caches else ()
            x, k, v = layer(x, cos, sin, *caches)
            keys.append(k)
            values.append(v)
        if self.head is not None:
            x = self.head(x)
        return x, keys, values


def meta_block(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """``module`` moved to meta in ``dtype`` (no memory), in eval mode."""
    return module.to(device="meta", dtype=dtype).eval()


__all__ = ["ACTIVATIONS", "AttentionBlock", "Embed", "GemmaRMSNorm", "Head", "KvEntry",
           "Layer", "MlpBlock", "NORMS", "QUANTIZED_KV", "Stage", "dequantize_kv", "meta_block",
           "quantize_kv"]
