"""scaled_dot_product_attention as one Attention primitive (a flash-attention kernel).

torch.export's default decompositions split SDPA into bmm + softmax + bmm; export with
:func:`compiler.export_decompositions` to keep it whole and get the tiled kernel.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from compiler import graph as g
from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.lowerings.registry import lowering

aten = torch.ops.aten


@lowering(aten.scaled_dot_product_attention.default)
def lower_sdpa(b: GraphBuilder, q: Value, k: Value, v: Value, attn_mask: Value | None = None,
               dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
               enable_gqa: bool = False) -> Value:
    if dropout_p:
        raise NotImplementedError("attention dropout")
    if attn_mask is not None and is_causal:
        raise NotImplementedError("attn_mask together with is_causal")
    if len(q.shape) >= 3 and (q.shape[:-3] != k.shape[:-3] or q.shape[-3] % k.shape[-3]):
        raise NotImplementedError("attention batch shapes")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    dtype = q.dtype
    k, v = b.cast(k, dtype), b.cast(v, dtype)
    inputs: tuple[Any, ...] = (q, k, v) if attn_mask is None else (q, k, v, attn_mask)
    shape = q.shape[:-1] + (v.shape[-1],)
    return b.add(g.Attention(scale, bool(is_causal)), inputs, shape, dtype, "attention")
