"""``archsim llm --weights fp8`` (issue 30): e4m3 weights with per-channel scales and
activations quantized to e4m3 per token, through ``torch._scaled_mm``."""

from __future__ import annotations

import torch

import torch_bridge
from archsim.config import load_config
from serving.plan import Parallelism, Request, check, memory_per_chip
from serving.quant import Fp8Linear
from serving.roofline import weight_bytes
from serving.run import serve
from serving.spec import spec_from_config

TINY = load_config("tiny")
SMALL = spec_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2,
                          "intermediate_size": 128, "vocab_size": 100,
                          "max_position_embeddings": 64}, "small")
MATMUL = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128  # a layer's matmul weights
NORMS = 2 * 64
HEAD = 100 * 64
FP8 = Request(batch=1, prefill=8, decode=2, weights="fp8")


def test_fp8_linear_on_npu_matches_cpu_with_no_host_work() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(128, 96).to(torch.bfloat16)
    layer = Fp8Linear.of(linear, torch.bfloat16)
    x = torch.randn(3, 5, 128, dtype=torch.bfloat16)
    expected = layer(x)
    # the quantization error stays within a few e4m3 steps (3 mantissa bits) of bf16
    torch.testing.assert_close(expected, linear(x), rtol=0.1, atol=0.1)
    layer.to("npu")
    with torch_bridge.profile() as prof:
        out = layer(x.to("npu"))
    assert torch.equal(out.cpu(), expected)  # f32 sums rounded once to bf16
    assert prof.result.host_cycles == 0
    assert prof.result.matmul_flops == 2 * 15 * 128 * 96


def test_fp8_weights_are_one_byte_with_f32_scales() -> None:
    assert weight_bytes(SMALL, FP8) == (2 * MATMUL + HEAD) + (2 * NORMS + 64) * 2
    par = Parallelism()
    scales = 64 + 2 * 32 + 64 + 2 * 128 + 64  # one per output row: q, k, v, o, gate/up, down
    layer = MATMUL + NORMS * 2 + scales * 4
    assert memory_per_chip(SMALL, FP8, par, check(SMALL, FP8, par)).weights == \
        2 * layer + 100 * 64 * 2 + HEAD + 100 * 4 + 64 * 2  # the head's 100 row scales


def test_serving_fp8_weights_states_the_precision_and_keeps_above_the_roofline() -> None:
    result = serve(SMALL, TINY, FP8)
    assert result.request.precision == ("fp8 (e4m3) weights, bf16 activations (e4m3 per "
                                        "token into the matmuls), bf16 KV cache")
    assert result.tpot_s >= result.roofline.tpot_s
    assert result.ttft_s >= result.roofline.prefill_s
