"""Small torch.nn models used by the compiler tests and benchmarks (GPT-2-style block,
ResNet-style block, Llama-style decoder layer, a decode step's rotated Q and K), written
here without transformers."""

from __future__ import annotations

import math

import torch
from torch import nn

from archsim.app.models import rotate


class GPT2Block(nn.Module):
    """Pre-LN decoder block: causal multi-head attention + GELU(tanh) MLP."""

    def __init__(self, hidden: int = 768, heads: int = 12) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(hidden)
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden)
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.mlp_proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(h, dim=2)
        q = q.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        k = k.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        v = v.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(h // self.heads)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        attn = scores.softmax(dim=-1) @ v
        x = x + self.c_proj(attn.transpose(1, 2).reshape(b, s, h))
        mlp = self.mlp_proj(nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x + mlp


class ResNetBlock(nn.Module):
    """conv-bn-relu-conv-bn + shortcut (strided 1x1 conv), relu; then max pool."""

    def __init__(self, cin: int = 8, cout: int = 16, stride: int = 2) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = nn.Conv2d(cin, cout, 1, stride, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.pool = nn.MaxPool2d(3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        y = torch.relu(y + self.bn3(self.down(x)))
        return self.pool(y)


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class LlamaLayer(nn.Module):
    """Llama-style decoder layer: RMSNorm, rotary attention (SDPA, causal), SwiGLU MLP."""

    def __init__(self, hidden: int = 4096, heads: int = 32, intermediate: int = 11008) -> None:
        super().__init__()
        self.heads = heads
        self.input_norm = RMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.post_norm = RMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        hd = h // self.heads
        y = self.input_norm(x)
        q = self.q_proj(y).view(b, s, self.heads, hd).transpose(1, 2)
        k = self.k_proj(y).view(b, s, self.heads, hd).transpose(1, 2)
        v = self.v_proj(y).view(b, s, self.heads, hd).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        attn = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, s, h))
        y = self.post_norm(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(y)) * self.up_proj(y))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(seq: int, head_dim: int, device: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(seq, device=device).float(), inv)
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos(), emb.sin()


class Projected(nn.Module):
    """A decode step's Q and K: projected, heads split (views), then rotated."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.k = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, hidden = x.shape
        q = self.q(x).view(b, t, self.heads, hidden // self.heads).transpose(1, 2)
        k = self.k(x).view(b, t, self.heads, hidden // self.heads).transpose(1, 2)
        return rotate(q, cos, sin), rotate(k, cos, sin)
