"""Memory per chip and the rooflines of a small Llama on hand-computed numbers (issue
34: their mutants survived the end-to-end tests). SMALL: hidden 64, 2 layers, 4 heads
and 2 K/V heads of 16, gated MLP 128, vocabulary 100, untied head, RMSNorms."""

from __future__ import annotations

from dataclasses import replace

import pytest

from archsim.config import load_config
from serving.plan import Memory, Parallelism, Request, check, memory_per_chip
from serving.roofline import causal_pairs, peak_flops, roofline, weight_bytes, weight_intake
from serving.spec import spec_from_config

SMALL = spec_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2,
                          "intermediate_size": 128, "vocab_size": 100,
                          "max_position_embeddings": 64}, "small")
WINDOWED = spec_from_config({"model_type": "mistral", "hidden_size": 64,
                             "num_hidden_layers": 2, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "intermediate_size": 128,
                             "vocab_size": 100, "max_position_embeddings": 64,
                             "sliding_window": 4}, "windowed")


def _memory(request: Request, par: Parallelism, spec=SMALL) -> Memory:
    return memory_per_chip(spec, request, par, check(spec, request, par))


def test_tp2_pp2_memory_per_chip_is_the_fuller_stage() -> None:
    # tp 2: 2 query heads (q = 32), 1 K/V head (kv = 16), MLP 64, vocabulary 50 a chip
    request = Request(batch=4, prefill=8, decode=4)
    par = Parallelism(tp=2, pp=2, micro_batches=2)
    layer = (64 * (2 * 32 + 2 * 16) + 3 * 64 * 64) * 2 + 2 * 64 * 2  # matmuls + 2 norms
    head = 50 * 64 * 2 + 64 * 2  # LM head shard + final norm
    kv = 12 * 4 * 2 * 16 * 2  # 12 tokens x batch 4 x K and V x 16 x 2 bytes, one layer
    act = 2 * (4 // 2 * 8) * (2 * 64 + 32 + 2 * 16 + 2 * 64) * 2  # a micro-batch's prefill
    # stage 0 holds the embedding (50 x 64 x 2 = 6,400 B), stage 1 the head (6,528 B)
    assert _memory(request, par) == Memory(layer + head, kv, act)


def test_one_chip_holds_every_layer_and_both_ends() -> None:
    request = Request(batch=1, prefill=10, decode=6)
    layer = (64 * (2 * 64 + 2 * 32) + 3 * 64 * 128) * 2 + 2 * 64 * 2
    embed, head = 100 * 64 * 2, 100 * 64 * 2 + 64 * 2
    kv = 2 * 16 * 1 * 2 * 32 * 2  # two layers x 16 tokens x K and V x 32 x 2 bytes
    act = 2 * 10 * (2 * 64 + 64 + 2 * 32 + 2 * 128) * 2
    assert _memory(request, Parallelism()) == Memory(2 * layer + embed + head, kv, act)


def test_an_int8_kv_cache_keeps_a_bf16_scale_per_token_and_head() -> None:
    request = Request(batch=1, prefill=10, decode=6, kv_dtype="int8")
    # per token and layer: K and V, 2 heads x (16 one-byte values + one 2-byte scale)
    assert _memory(request, Parallelism()).kv_cache == 2 * 16 * 2 * (2 * 16 + 2 * 2)


def test_a_sliding_window_caps_the_cache_each_layer_keeps() -> None:
    request = Request(batch=1, prefill=10, decode=6)
    assert _memory(request, Parallelism(), WINDOWED).kv_cache == 2 * 4 * 2 * 32 * 2


def test_causal_pairs_with_and_without_a_window() -> None:
    assert causal_pairs(SMALL, 6) == 21  # 1 + 2 + ... + 6
    # window 4: queries 0..3 see 1..4 keys, the other 2 see 4 each
    assert causal_pairs(WINDOWED, 6) == 10 + 2 * 4
    assert causal_pairs(WINDOWED, 3) == 6  # shorter than the window: all of it


@pytest.mark.parametrize("preset,dtype,passes", [
    ("atom", "f32", 3), ("atom", "f16", 1), ("atom", "bf16", 1), ("tiny", "f32", 1),
    ("tpu-v4", "f32", 1)])
def test_f32_on_a_16_bit_array_takes_its_precision_passes(preset, dtype, passes) -> None:
    config = load_config(preset)  # atom: 'high' (3 passes); tpu-v4: 'default' (1)
    assert peak_flops(config, dtype) == config.peak_flops / passes


def test_the_roofline_of_a_prefill_and_a_decode_step() -> None:
    config = load_config("tiny")
    request = Request(batch=1, prefill=8, decode=2)
    roof = roofline(SMALL, request, config)
    matmul = 64 * (2 * 64 + 2 * 32) + 3 * 64 * 128  # 36,864 weights a layer
    # 2 FLOPs a weight a token, QK^T and PV over 36 causal pairs a layer, the head once
    assert roof.prefill_flops == 2 * 2 * 8 * matmul + 2 * 4 * 64 * 36 + 2 * 64 * 100
    weights = weight_bytes(SMALL, request)
    kv = [2 * context * 2 * 32 * 2 for context in (9, 10)]  # 2 layers, K and V, bf16
    assert roof.decode_bytes == (weights + kv[0], weights + kv[1])
    bandwidth = config.dram_bandwidth_bytes_per_s
    flops = 2 * 2 * matmul + 4 * 64 * 2 * 9 + 2 * 64 * 100
    assert roof.decode_s[0] == max((weights + kv[0]) / bandwidth, flops / config.peak_flops)
    assert roof.prefill_s == pytest.approx(
        max(roof.prefill_flops / config.peak_flops, weights / bandwidth), rel=1e-12)
    assert roof.tpot_s == sum(roof.decode_s) / 2


@pytest.mark.parametrize("weights,rate", [("int8-a8", 2), ("fp8", 2), ("int8", 1)])
def test_quantized_activations_bound_the_linear_layers_at_the_narrow_peak(weights,
                                                                          rate) -> None:
    # tiny's arrays do int8 and fp8 at 2x: W8A8's and fp8's linear layers may take half
    # the time of 16-bit ones, attention (bf16) not; weight-only int8 stays at 1x
    config = load_config("tiny")
    request = Request(batch=4, prefill=64, decode=2, weights=weights)
    roof = roofline(SMALL, request, config)
    matmul = 64 * (2 * 64 + 2 * 32) + 3 * 64 * 128
    linear = 4 * (2 * 2 * 64 * matmul + 2 * 64 * 100)
    attention = 4 * 2 * 4 * 64 * (64 * 65 // 2)
    assert roof.prefill_flops == linear + attention
    compute = linear / (rate * config.peak_flops) + attention / config.peak_flops
    assert roof.prefill_s == pytest.approx(
        max(compute, weight_bytes(SMALL, request) / config.dram_bandwidth_bytes_per_s),
        rel=1e-12)
    # two chips split both parts of the compute (and the weights' bytes)
    assert roofline(SMALL, request, config, chips=2).prefill_s == pytest.approx(
        compute / 2, rel=1e-12)


def test_a_gpt2_style_model_plain_mlp_learned_positions_tied_head() -> None:
    gpt2 = spec_from_config({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
                             "vocab_size": 100, "n_positions": 32}, "tiny-gpt2")
    assert (gpt2.gated, gpt2.tied_embeddings, gpt2.position_rows) == (False, True, 32)
    request = Request(batch=1, prefill=10, decode=6)
    matmul = 64 * (2 * 64 + 2 * 64) + 2 * 64 * 256  # q, k, v, o; up and down (4 x 64)
    rest = gpt2.layer_parameters - gpt2.layer_matmul_weights  # biases and LayerNorms
    embed = (100 + 32) * 64 * 2  # tokens and learned positions
    head = gpt2.norm_parameters * 2  # the LM head is the embedding
    assert _memory(request, Parallelism(), gpt2).weights == \
        2 * (matmul + rest) * 2 + embed + head
    # two stages: the first holds the embeddings (132 rows); the last its own copy of
    # the tied token table (100 rows) and the final norm: the first is the fuller
    par = Parallelism(pp=2, micro_batches=1)
    first, last = (matmul + rest) * 2 + embed, (matmul + rest) * 2 + head + 100 * 64 * 2
    assert first > last
    assert _memory(request, par, gpt2).weights == first


def test_a_decode_step_waits_for_every_weight_to_enter_an_array() -> None:
    # tiny: 2 cores of one 4x4 weight-stationary array, 1 GHz: 2 x 4 = 8 weights a
    # nanosecond, whatever their dtype; and 2 vector units of 4 lanes, an int4 weight
    # unpacked and widened (2 operations) and multiply-added once a row (1 at batch 1):
    # 2 x 4 / 3 a nanosecond more. SMALL's 2 layers of 36,864 matmul weights and a
    # 64 x 100 head take 7.512 us to enter, more than int4's packed bytes take from HBM
    config = load_config("tiny")
    request = Request(batch=1, prefill=8, decode=2, weights="int4-g32")
    intake = 8e9 + 8e9 / 3
    assert weight_intake(config, request) == pytest.approx(intake, rel=1e-12)
    roof = roofline(SMALL, request, config)
    weights = 2 * 36_864 + 64 * 100
    assert weight_bytes(SMALL, request) / config.dram_bandwidth_bytes_per_s < weights / intake
    assert roof.decode_s == pytest.approx((weights / intake, weights / intake), rel=1e-12)
    # at batch 4 a weight takes 4 multiply-adds and its unpacking: 2 x 4 / 6 more
    assert weight_intake(config, Request(4, 8, 2, weights="int4-g32")) == \
        pytest.approx(8e9 + 8e9 / 6, rel=1e-12)
    # one-byte weights: widened only (1 operation), 2 x 4 / 2 more at batch 1
    assert weight_intake(config, Request(1, 8, 2, weights="int8")) == \
        pytest.approx(12e9, rel=1e-12)
    # W8A8 in tiny's 2x int8 mode: a PE takes two k elements, twice the intake; its
    # int8 activations multiply on the arrays only
    assert weight_intake(config, Request(1, 8, 2, weights="int8-a8")) == 16e9


@pytest.mark.parametrize("dataflow,row", [("ws", 4), ("os", 4), ("is", 8)])
def test_the_arrays_take_a_row_of_weights_a_cycle_along_their_dataflow(dataflow,
                                                                        row) -> None:
    # 8x4 arrays, two a core: ws shifts a tile's rows in (4 columns a cycle), os streams
    # the weights along the columns, is along the 8 rows
    tiny = load_config("tiny")
    matrix = replace(tiny.core.matrix, rows=8, cols=4, arrays=2, dataflow=dataflow)
    config = replace(tiny, core=replace(tiny.core, matrix=matrix))
    assert weight_intake(config, Request(1, 8, 2)) == 2 * 2 * row * 1e9


def test_a_one_token_prefill_waits_for_the_weights_to_enter_the_arrays() -> None:
    # the arrays' 8 weights a ns and the vector units' 8 / 3 (see above)
    config = load_config("tiny")
    request = Request(batch=1, prefill=1, decode=1, weights="int4-g32")
    weights = 2 * 36_864 + 64 * 100
    assert roofline(SMALL, request, config).prefill_s == \
        pytest.approx(weights / (8e9 + 8e9 / 3), rel=1e-12)


def test_a_one_token_bf16_prefill_waits_for_the_weights_bytes() -> None:
    # bf16 on tiny: two bytes a weight over 16 GB/s outlast 8 weights a ns into the arrays
    config = load_config("tiny")
    request = Request(batch=1, prefill=1, decode=1)
    bound = weight_bytes(SMALL, request) / config.dram_bandwidth_bytes_per_s
    assert bound > (2 * 36_864 + 64 * 100) / 8e9
    assert roofline(SMALL, request, config).prefill_s == bound
