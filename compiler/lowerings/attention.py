"""scaled_dot_product_attention as one Attention primitive (a flash-attention kernel).

torch.export's default decompositions split SDPA into bmm + softmax + bmm; export with
:func:`compiler.export_decompositions` to keep it whole and get the tiled kernel.

Keys and values dequantized from an int8 or fp8 cache right before the attention
(``k_int8.to(dtype) * k_scale`` with one scale per key row, ``[..., Sk, 1]``) are read
as the cache and its scales: the kernel dequantizes each tile as it loads it, so
the cache moves at one byte an element and no dequantized copy is written.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from compiler import graph as g
from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind
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
    shape = q.shape[:-1] + (v.shape[-1],)
    masks = () if attn_mask is None else (attn_mask,)
    int8_k, int8_v = _int8_rows(k, dtype), _int8_rows(v, dtype)
    if int8_k is not None and int8_v is not None:
        inputs: tuple[Any, ...] = (q, int8_k[0], int8_v[0], *masks, int8_k[1], int8_v[1])
        return b.add(g.Attention(scale, bool(is_causal), kv_scales=True), inputs, shape,
                     dtype, "attention")
    k, v = b.cast(k, dtype), b.cast(v, dtype)
    return b.add(g.Attention(scale, bool(is_causal)), (q, k, v, *masks), shape, dtype,
                 "attention")


QUANTIZED_KV = (DType.i8, DType.e4m3, DType.e5m2)
"""Cache dtypes the attention kernel reads as stored, with a scale per key."""


def _int8_rows(x: Value, dtype: DType) -> tuple[Value, Value] | None:
    """(int8 or fp8 tensor, per-row scale) when ``x`` is ``values.to(dtype) * scale``
    with the scale ``[..., S, 1]`` in ``dtype``, else None."""
    node = x.producer
    if node is None or x.dtype is not dtype or not isinstance(node.spec, g.Binary) \
            or node.spec.kind is not BinaryKind.mul:
        return None
    rows = x.shape[:-1] + (1,)
    for wide, scale in (node.inputs, node.inputs[::-1]):
        cast = wide.producer if isinstance(wide, Value) else None
        if cast is not None and isinstance(cast.spec, g.Cast) and wide.shape == x.shape \
                and cast.inputs[0].dtype in QUANTIZED_KV and isinstance(scale, Value) \
                and scale.shape == rows and scale.dtype is dtype:
            return cast.inputs[0], scale
    return None
