"""``archsim llm --activations int8|fp8`` (issue 30): W8A8 linear layers (activations
quantized to int8 per token, ``torch._int_mm``, both scales in the epilogue) on the npu
against the same module on CPU; fp8 activations are what ``--weights fp8`` does."""

from __future__ import annotations

import copy

import torch

import torch_bridge
from serving.plan import Parallelism, Request, check, memory_per_chip, weight_format
from serving.quant import Int8DynamicLinear, quantize_weights
from serving.spec import spec_from_config


def test_w8a8_linear_on_npu_is_bit_exact_against_cpu_with_no_host_work() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.SiLU(),
                                torch.nn.Linear(96, 32)).to(torch.bfloat16)
    quantized = quantize_weights(copy.deepcopy(model), "int8-a8", torch.bfloat16)
    assert all(isinstance(quantized[i], Int8DynamicLinear) for i in (0, 2))
    x = torch.randn(3, 7, 64, dtype=torch.bfloat16)
    expected = quantized(x)
    with torch_bridge.profile() as prof:
        out = quantized.to("npu")(x.to("npu")).cpu()
    # int8 x int8 sums are exact; the per-token absmax, divide, round and the f32
    # epilogue are the same elementwise f32 operations as torch's
    assert torch.equal(out, expected)
    assert prof.result.cycles("host") == 0
    # and it is a quantization of the bf16 model: within the int8 steps of both sides
    dense = model(x).float()
    assert (expected.float() - dense).abs().max() <= 0.05 * dense.abs().max()


def test_w8a8_computes_what_the_scheme_says() -> None:
    # y = round(x / sx) . w_int8 * sx * sw with sx = absmax(x row) / 127
    layer = Int8DynamicLinear(4, 1, None, torch.float32, "cpu")
    layer.weight.copy_(torch.tensor([[127, -64, 0, 1]], dtype=torch.int8))
    layer.scales.fill_(0.5)
    x = torch.tensor([[254.0, 2.0, -100.0, 1.0]])  # sx = 2: codes 127, 1, -50, 0 (0.5 -> 0)
    assert layer(x).item() == (127 * 127 - 64 * 1) * 2.0 * 0.5


def test_w8a8_keeps_f32_scales_and_the_report_names_both_precisions() -> None:
    small = spec_from_config({"model_type": "llama", "hidden_size": 64,
                              "num_hidden_layers": 2, "num_attention_heads": 4,
                              "num_key_value_heads": 2, "intermediate_size": 128,
                              "vocab_size": 100, "max_position_embeddings": 64}, "small")
    w8a8 = Request(batch=1, prefill=8, decode=2, weights="int8-a8")
    int8 = Request(batch=1, prefill=8, decode=2, weights="int8")
    par = Parallelism()
    outputs = 64 + 2 * 32 + 64 + 2 * 128 + 64  # one scale per output row of a layer
    mem = memory_per_chip(small, w8a8, par, check(small, w8a8, par)).weights
    assert mem - memory_per_chip(small, int8, par, check(small, int8, par)).weights == \
        (2 * outputs + 100) * (4 - 2)  # f32 scales, not bf16: two layers and the head
    assert w8a8.precision == ("int8 weights, bf16 activations (int8 per token into the "
                              "matmuls, int32 sums), bf16 KV cache")


def test_fp8_activations_are_the_fp8_weight_format() -> None:
    assert weight_format("fp8", None, "fp8").text == "fp8"
    assert weight_format("int8", None, "int8").text == "int8-a8"
    assert weight_format("int4", 64).text == "int4-g64"
