"""int8 and fp8 KV caches (issue 30, ``archsim llm --kv-dtype int8|fp8``): quantized
per token and head on write, read as stored by the attention kernel (the arrays widen
the tiles, the scales multiply the score columns), so a decode step reads one byte a
cached element plus a scale per token and head."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from archsim.config import load_config
from archsim.errors import ModelConfigError
from serving.layers import dequantize_kv, quantize_kv
from serving.plan import Parallelism, Request, check, memory_per_chip
from serving.run import serve
from serving.spec import spec_from_config
from serving.timing import Timer

TINY = load_config("tiny")
SMALL = spec_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2,
                          "intermediate_size": 128, "vocab_size": 100,
                          "max_position_embeddings": 512}, "small")
KV_HEADS, HEAD_DIM = 2, 16  # SMALL: 64 / 4 heads; 2 key/value heads


def _request(kv: str) -> Request:
    return Request(batch=1, prefill=8, decode=2, kv_dtype=kv)


def test_quantize_kv_is_absmax_per_row_rounded_half_to_even() -> None:
    x = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0]])
    values, scale = quantize_kv(x)
    # row 0: scale 2 / 127; 1 / scale = 63.5 -> 64 (half to even), 0.5 / scale = 31.75
    assert values.dtype == torch.int8 and values.tolist() == [[64, -127, 32], [0, 0, 0]]
    assert scale.flatten().tolist() == pytest.approx([2 / 127, 1e-8])
    x = torch.randn(3, 4, 50, 32, dtype=torch.bfloat16)
    values, scale = quantize_kv(x)
    error = (dequantize_kv((values, scale)).float() - x.float()).abs()
    # half a step, plus bf16 rounding of the scale and of the products (2^-8 relative)
    assert (error <= scale.float() * 0.5 + x.float().abs() * 2 ** -7).all()


def test_fp8_kv_is_absmax_per_row_over_448_rounded_to_e4m3() -> None:
    x = torch.tensor([[1.0, -2.0, 0.3]])
    values, scale = quantize_kv(x, torch.float8_e4m3fn)
    assert scale.item() == pytest.approx(2 / 448)
    assert values.dtype == torch.float8_e4m3fn
    assert values.float().tolist() == (x / scale).to(torch.float8_e4m3fn).float().tolist()
    assert values.float().tolist()[0][:2] == [224.0, -448.0]


@pytest.mark.parametrize("cache", [torch.int8, torch.float8_e4m3fn])
def test_attention_reads_the_cache_as_stored(cache: torch.dtype) -> None:
    from compiler import compile_graph, export_model

    class Decode(torch.nn.Module):
        def forward(self, q, k, v, k_scale, v_scale):
            return F.scaled_dot_product_attention(q, dequantize_kv((k, k_scale)),
                                                  dequantize_kv((v, v_scale)))

    torch.manual_seed(0)
    b, h, s, d = 1, 2, 64, 32
    q = torch.randn(b, h, 4, d, dtype=torch.bfloat16)
    k, k_scale = quantize_kv(torch.randn(b, h, s, d, dtype=torch.bfloat16), cache)
    v, v_scale = quantize_kv(torch.randn(b, h, s, d, dtype=torch.bfloat16), cache)
    inputs = (q, k, v, k_scale, v_scale)
    compiled = compile_graph(export_model(Decode(), inputs), load_config("atom"))
    (out,), result = compiled.run(*inputs)
    torch.testing.assert_close(out, Decode()(*inputs), rtol=1.6e-2, atol=1e-2)
    # q in bf16, the cache at one byte an element, a bf16 scale per key row; the
    # output once; no dequantized copy in DRAM
    assert result.dram_bytes_read == q.nbytes + 2 * b * h * s * d + 2 * b * h * s * 2
    assert result.dram_bytes_written == out.nbytes
    assert not [t for t in compiled.program.tensors if t.role == "temp"]


def test_a_decode_step_reads_half_the_cache_bytes_plus_the_scales() -> None:
    """Layer 0's attention block at two contexts: each extra cached token costs its K
    and V per key/value head, 2 bytes an element in bf16, 1 in int8 or fp8 plus a
    2-byte scale per head."""
    extra = 256 - 64
    per_token = {}
    for kv in ("bf16", "int8", "fp8"):
        request = _request(kv)
        timer = Timer(SMALL, check(SMALL, request, Parallelism()), request, 1, TINY)
        per_token[kv] = (timer.block("attention", 1, 256).dram_bytes
                         - timer.block("attention", 1, 64).dram_bytes) / extra
    assert per_token["bf16"] == 2 * KV_HEADS * HEAD_DIM * 2
    assert per_token["int8"] == per_token["fp8"] == 2 * KV_HEADS * (HEAD_DIM * 1 + 2)


def test_memory_and_roofline_at_the_packed_size() -> None:
    par = Parallelism()
    tokens = 8 + 2
    bf16, int8 = _request("bf16"), _request("int8")
    mem = {r.kv_dtype: memory_per_chip(SMALL, r, par, check(SMALL, r, par)).kv_cache
           for r in (bf16, int8)}
    assert mem["bf16"] == 2 * tokens * 2 * KV_HEADS * HEAD_DIM * 2
    assert mem["int8"] == 2 * tokens * 2 * KV_HEADS * (HEAD_DIM + 2)
    a, b = serve(SMALL, TINY, bf16), serve(SMALL, TINY, int8)
    kv_bf16 = a.roofline.decode_bytes[0] - b.roofline.decode_bytes[0]  # weights cancel
    assert kv_bf16 == 2 * 9 * 2 * KV_HEADS * HEAD_DIM  # 9 tokens: half of bf16's 2 bytes
    assert b.tpot_s >= b.roofline.tpot_s
    assert b.request.precision == ("bf16 weights, bf16 activations, int8 KV cache "
                                   "(bf16 scale per token and head)")


def test_an_unknown_kv_dtype_is_refused() -> None:
    with pytest.raises(ModelConfigError, match=r"kv-dtype 'int4' is not one of f32, f16, "
                                               r"bf16, int8, fp8"):
        check(SMALL, _request("int4"), Parallelism())
