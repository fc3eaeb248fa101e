"""Built-in models, written with plain ``torch.nn`` so they need nothing but torch.

Shapes follow the public models (GPT-2 small, BERT-base, Llama-style decoders,
ResNet-18/50) with the layer count, batch and sequence length configurable. Weights
are random: archsim measures time, and checks numbers against torch itself.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int | None = None,
                 causal: bool = True, bias: bool = True) -> None:
        super().__init__()
        self.heads = heads
        self.kv_heads = kv_heads or heads
        self.head_dim = hidden // heads
        self.causal = causal
        self.q = nn.Linear(hidden, hidden, bias=bias)
        self.k = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.v = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.out = nn.Linear(hidden, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.kv_heads != self.heads:
            repeat = self.heads // self.kv_heads
            k = k.repeat_interleave(repeat, dim=1)
            v = v.repeat_interleave(repeat, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if self.causal:
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        attn = scores.softmax(dim=-1) @ v
        return self.out(attn.transpose(1, 2).reshape(b, s, h))


class GPT2Block(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = Attention(hidden, heads)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """GPT-2 (small: hidden 768, 12 heads) without the LM head: embeddings + blocks."""

    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12,
                 vocab: int = 50257, positions: int = 1024) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(positions, hidden)
        self.blocks = nn.ModuleList(GPT2Block(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.attn = Attention(hidden, heads, causal=False)
        self.ln1 = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.proj = nn.Linear(4 * hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.proj(F.gelu(self.fc(x))))


class Bert(nn.Module):
    """BERT-base encoder (hidden 768, 12 heads) with token/position embeddings."""

    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12,
                 vocab: int = 30522, positions: int = 512) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(positions, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList(BertLayer(hidden, heads) for _ in range(layers))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.ln(self.tokens(ids) + self.positions(positions))
        for layer in self.layers:
            x = layer(x)
        return x


class RMSNorm(nn.Module):
    """Llama's RMSNorm as transformers and Meta's reference write it: normalized in
    float32, cast back, then scaled by the weight."""

    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


def inverse_frequencies(head_dim: int, theta: float = 10000.0) -> torch.Tensor:
    """Rotary's angle per position of each pair of dimensions [head_dim / 2] (float32;
    a buffer, as transformers keeps it)."""
    return 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)


def rotary_tables(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [tokens, head_dim] of ``positions`` (computed in float32 on the
    device, once per forward, as transformers' rotary embedding does)."""
    angles = positions.float()[:, None] * inv_freq.float()[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding, rotate-half form (transformers' Llama)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class LlamaAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.out = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                              enable_gqa=self.kv_heads != self.heads)
        return self.out(attn.transpose(1, 2).reshape(b, s, -1))


class LlamaLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, intermediate: int,
                 eps: float = 1e-5) -> None:
        super().__init__()
        self.norm1 = RMSNorm(hidden, eps)
        self.attn = LlamaAttention(hidden, heads, kv_heads)
        self.norm2 = RMSNorm(hidden, eps)
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos, sin)
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    """Llama-2 (7B by default: hidden 4096, 32 heads, SwiGLU 11008, vocabulary 32000):
    token embedding, RMSNorm, rotary positions, causal attention
    (``scaled_dot_product_attention``, grouped-query when ``kv_heads < heads``), SwiGLU
    MLP, final norm and LM head. It takes token ids [batch, seq] and, as the prefill of
    a generation does (``archsim llm``, transformers' ``generate``), returns the logits
    of the last position only [batch, 1, vocab]; ``all_logits=True`` returns those of
    every position, as a plain forward of transformers' ``LlamaForCausalLM`` does."""

    def __init__(self, layers: int = 2, hidden: int = 4096, heads: int = 32, kv_heads: int = 32,
                 intermediate: int = 11008, vocab: int = 32000, all_logits: bool = False
                 ) -> None:
        super().__init__()
        self.all_logits = all_logits
        self.register_buffer("inv_freq", inverse_frequencies(hidden // heads), persistent=False)
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(LlamaLayer(hidden, heads, kv_heads, intermediate)
                                    for _ in range(layers))
        self.norm = RMSNorm(hidden, 1e-5)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        positions = torch.arange(ids.shape[1], device=ids.device)
        cos, sin = rotary_tables(positions, self.inv_freq, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        x = self.norm(x)
        return self.lm_head(x if self.all_logits else x[:, -1:])


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module | None:
    """A residual block's projection (1x1 conv + batch norm) when its shape changes."""
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = _shortcut(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + identity)


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = _shortcut(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + identity)


class ResNet(nn.Module):
    """ResNet-18 (``bottleneck=False``, blocks 2-2-2-2) or ResNet-50 (3-4-6-3)."""

    def __init__(self, blocks: tuple[int, ...], bottleneck: bool, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers: list[nn.Module] = []
        cin = 64
        for stage, count in enumerate(blocks):
            width = 64 * 2 ** stage
            for i in range(count):
                stride = 2 if stage > 0 and i == 0 else 1
                if bottleneck:
                    layers.append(Bottleneck(cin, width, stride))
                    cin = width * 4
                else:
                    layers.append(BasicBlock(cin, width, stride))
                    cin = width
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Gemm(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


class IntGemm(nn.Module):
    """int8 x int8 -> int32, as quantized stacks call it (``torch._int_mm``)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch._int_mm(a, b)


class Conv(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, padding=kernel // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class SDPA(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class AttentionCore(nn.Module):
    """The attention core as BERT-era code writes it: no SDPA call, no mask."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        return torch.softmax(scores, dim=-1) @ v


class BertEncoderLayer(nn.Module):
    """One BERT encoder layer (``BertLayer`` with ``hidden_act="relu"``, no dropout)."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.attention = Attention(hidden, heads, causal=False)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, 4 * hidden)
        self.output = nn.Linear(4 * hidden, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.attention(x))
        return self.output_norm(x + self.output(F.relu(self.intermediate(x))))
