"""``scaled_dot_product_attention`` on npu through PyTorch's "overrideable" entry.

torch asks a PrivateUse1 device which SDPA backend to use (``_fused_sdp_choice``);
torch_openreg and torch-npu answer ``SDPBackend.OVERRIDEABLE`` and implement
``_scaled_dot_product_fused_attention_overrideable`` (forward: output and logsumexp)
and its ``_backward``. Here both are written with npu ops the way SDPA's math path
computes (``q`` and ``k`` each scaled by ``sqrt(scale)``, a safe softmax), so the
numbers are those of CPU's math SDPA and every op runs on the simulator. Calls the
entry does not cover (dropout, inputs that are not 4-D, grouped-query heads) are
given the math backend.

``F.scaled_dot_product_attention`` itself does not reach this entry on torch 2.13:
it asks ``_fused_sdp_choice_stub``, a C++ DispatchStub that only C++ can register
for PrivateUse1 (torch_openreg does), so it keeps the math path (the same numbers,
op by op on the device, the form the compile backend matches). The entry serves
direct calls (``torch._fused_sdp_choice``, the overrideable op and its backward).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.nn.attention import SDPBackend

from torch_bridge.kernels import register_npu_kernel

aten = torch.ops.aten


@register_npu_kernel(aten._fused_sdp_choice.default)
def fused_sdp_choice(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                     is_causal: bool = False, *, scale: float | None = None,
                     enable_gqa: bool = False) -> int:
    four_d = query.dim() == key.dim() == value.dim() == 4
    same_heads = four_d and query.size(1) == key.size(1) == value.size(1)
    if dropout_p == 0.0 and same_heads and SDPBackend.OVERRIDEABLE in _enabled():
        return SDPBackend.OVERRIDEABLE.value
    return SDPBackend.MATH.value


def _enabled() -> set[SDPBackend]:
    """The backends ``torch.nn.attention.sdpa_kernel`` leaves enabled."""
    enabled = {SDPBackend.MATH}
    if torch._C._get_overrideable_sdp_enabled():
        enabled.add(SDPBackend.OVERRIDEABLE)
    return enabled


def _scores(query: torch.Tensor, key: torch.Tensor, bias: torch.Tensor | None,
            is_causal: bool, scale: float | None) -> torch.Tensor:
    """``q kᵀ · scale`` plus the bias or the causal mask, as SDPA's math path adds them."""
    root = math.sqrt(_scale(query, scale))
    scores = (query * root) @ (key * root).transpose(-2, -1)
    if is_causal:
        length, kv_length = scores.shape[-2:]
        keep = torch.ones(length, kv_length, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(keep.logical_not(), float("-inf"))
    if bias is not None:
        if bias.dtype == torch.bool:
            bias = torch.zeros_like(bias, dtype=scores.dtype).masked_fill(
                bias.logical_not(), float("-inf"))
        scores = scores + bias
    return scores


def _scale(query: torch.Tensor, scale: float | None) -> float:
    return 1.0 / math.sqrt(query.size(-1)) if scale is None else float(scale)


def _check_heads(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError("fused attention on npu takes 4-D (batch, heads, seq, dim) inputs")
    if not query.size(1) == key.size(1) == value.size(1):
        raise ValueError("fused attention on npu takes as many key/value heads as query "
                         "heads (expand them, or use enable_gqa with the math backend)")


@register_npu_kernel(aten._scaled_dot_product_fused_attention_overrideable.default)
def fused_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attn_bias: torch.Tensor | None = None, dropout_p: float = 0.0,
                    is_causal: bool = False, return_debug_mask: bool = False, *,
                    scale: float | None = None) -> tuple[Any, ...]:
    """(output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed,
    philox_offset, debug_attn_mask), as the schema; no dropout (the choice gives
    dropout to the math path, which draws it)."""
    if dropout_p:
        raise NotImplementedError("fused attention on npu has no dropout; "
                                  "torch's math backend draws it")
    _check_heads(query, key, value)
    scores = _scores(query, key, attn_bias, is_causal, scale)
    logsumexp = torch.logsumexp(scores.float(), dim=-1)
    output = aten._safe_softmax.default(scores, -1) @ value
    empty = torch.empty(0, device=query.device)
    long = torch.empty(0, dtype=torch.long, device=query.device)
    return (output, logsumexp, long, long, query.size(2), key.size(2), long, long, empty)


@register_npu_kernel(aten._scaled_dot_product_fused_attention_overrideable_backward.default)
def fused_attention_backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                             value: torch.Tensor, attn_bias: torch.Tensor | None,
                             grad_input_mask: list[bool], out: torch.Tensor,
                             logsumexp: torch.Tensor, cum_seq_q: torch.Tensor,
                             cum_seq_k: torch.Tensor, max_q: int, max_k: int,
                             dropout_p: float, is_causal: bool, philox_seed: torch.Tensor,
                             philox_offset: torch.Tensor, *, scale: float | None = None
                             ) -> tuple[torch.Tensor | None, ...]:
    """Gradients of query, key, value and the bias, from the recomputed probabilities."""
    _check_heads(query, key, value)
    probs = aten._safe_softmax.default(_scores(query, key, attn_bias, is_causal, scale), -1)
    grad_probs = grad_out @ value.transpose(-2, -1)
    grad_scores = probs * (grad_probs - (grad_probs * probs).sum(-1, keepdim=True))
    factor = _scale(query, scale)
    want_q, want_k, want_v, want_bias = grad_input_mask
    grad_q = (grad_scores @ key) * factor if want_q else None
    grad_k = (grad_scores.transpose(-2, -1) @ query) * factor if want_k else None
    grad_v = probs.transpose(-2, -1) @ grad_out if want_v else None
    grad_bias = None
    if want_bias and attn_bias is not None and attn_bias.is_floating_point():
        grad_bias = _sum_to(grad_scores, attn_bias.shape).to(attn_bias.dtype)
    return grad_q, grad_k, grad_v, grad_bias


def _sum_to(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``grad`` summed over the dims a broadcast ``shape`` expanded."""
    lead = grad.dim() - len(shape)
    dims = [d for d in range(grad.dim())
            if d < lead or (shape[d - lead] == 1 and grad.size(d) != 1)]
    return grad.sum(dims, keepdim=True).reshape(shape) if dims else grad


__all__ = ["fused_attention", "fused_attention_backward", "fused_sdp_choice"]
