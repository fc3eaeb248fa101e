"""serving.roofline on hand-computed numbers where its mutants survived (issue 34):
per-layer windows, tied heads, weight-only bytes, f32 passes, chips, and a decode step
that is bound by compute rather than by memory. SMALL: hidden 64, 2 layers, 4 heads and
2 K/V heads of 16, gated MLP 128, vocabulary 100, untied head, RMSNorms."""

from __future__ import annotations

import dataclasses

import pytest

from archsim.config import load_config
from serving.plan import Request
from serving.roofline import causal_pairs, roofline, weight_bytes
from serving.spec import spec_from_config

TINY = load_config("tiny")  # 64 GFLOP/s, 16 GB/s; an f32 array
SMALL = spec_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2,
                          "intermediate_size": 128, "vocab_size": 100,
                          "max_position_embeddings": 64}, "small")
ALTERNATING = dataclasses.replace(SMALL, name="alternating", layers=3, sliding_window=4,
                                  sliding_layers=(True, False, True))
"""Layers 0 and 2 see 4 tokens, layer 1 all of them."""
MATMUL = 64 * (2 * 64 + 2 * 32) + 3 * 64 * 128  # 36,864 weights a layer
WEIGHTS = (2 * (MATMUL + 2 * 64) + 64 + 100 * 64) * 2  # layers, final norm, head: 160,896 B


def test_causal_pairs_follow_each_layers_window_and_are_integers() -> None:
    # 6 tokens: a window of 4 gives 1 + 2 + 3 + 4 + 4 + 4 = 18 pairs, no window 21
    assert causal_pairs(ALTERNATING, 6) == 18
    assert causal_pairs(ALTERNATING, 6, 1) == 21
    assert causal_pairs(ALTERNATING, 6, 2) == 18
    assert type(causal_pairs(SMALL, 6)) is int
    assert type(causal_pairs(ALTERNATING, 6)) is int


def test_prefill_counts_each_layers_own_pairs() -> None:
    roof = roofline(dataclasses.replace(ALTERNATING, max_positions=64),
                    Request(batch=1, prefill=6, decode=0), TINY)
    # 3 layers x 2 x 6 tokens x 36,864; QK^T and PV (4 x 64) over 18 + 21 + 18 pairs
    assert roof.prefill_flops == 3 * 2 * 6 * MATMUL + 4 * 64 * (18 + 21 + 18) + 2 * 64 * 100


def test_a_tied_head_reads_the_embedding_table() -> None:
    tied = dataclasses.replace(SMALL, name="tied", tied_embeddings=True)
    layers = 2 * (MATMUL + 2 * 64)
    # the head reads the 100 x 64 table (the final norm is left out: a bound may be lower)
    assert weight_bytes(tied, Request()) == (layers + 100 * 64) * 2
    # int8: the layers' matmul weights at one byte; norms and the tied table in bf16
    assert weight_bytes(tied, Request(weights="int8")) == 2 * MATMUL + (2 * 2 * 64 + 6400) * 2
    # untied: the head's matmul weights are int8 too, only the norms stay bf16
    assert weight_bytes(SMALL, Request(weights="int8")) == \
        2 * MATMUL + 100 * 64 + (2 * 2 * 64 + 64) * 2
    assert weight_bytes(SMALL, Request()) == WEIGHTS


def test_f32_prefill_on_a_16_bit_array_is_bound_by_its_three_passes() -> None:
    atom = load_config("atom")  # 32.768 TFLOP/s at 16 bits, 3 passes for f32; 256 GB/s
    roof = roofline(SMALL, Request(batch=32, prefill=8, decode=0, dtype="f32"), atom)
    flops = 32 * (2 * (2 * 8 * MATMUL + 4 * 64 * 36) + 2 * 64 * 100)  # 38,748,160
    assert roof.prefill_flops == flops
    # 3.55 us of compute against 1.26 us to read the 321,792 B of f32 weights
    assert roof.prefill_s == pytest.approx(flops / (32.768e12 / 3))


def test_more_chips_add_their_bandwidth() -> None:
    roof = roofline(SMALL, Request(batch=1, prefill=8, decode=1), TINY, chips=2)
    # the step at context 9 reads the weights and 2 layers x 9 tokens x 64 x 2 B of KV
    # over 2 x 16 GB/s (5.1 us); its 164,864 FLOPs take 1.3 us at 2 x 64 GFLOP/s
    assert roof.decode_bytes == (WEIGHTS + 2 * 9 * 64 * 2,)
    assert roof.decode_s[0] == pytest.approx((WEIGHTS + 2304) / 32e9)


def test_a_large_batch_decode_step_is_bound_by_compute() -> None:
    roof = roofline(SMALL, Request(batch=8, prefill=8, decode=1), TINY)
    # per sequence: 2 FLOPs a weight, QK^T and PV over 2 layers x 9 cached tokens, the head
    flops = 8 * (2 * 2 * MATMUL + 4 * 64 * 18 + 2 * 64 * 100)  # 1,318,912: 20.6 us
    nbytes = WEIGHTS + 8 * 18 * 64 * 2  # 179,328 B: 11.2 us
    assert roof.decode_bytes == (nbytes,)
    assert nbytes / 16e9 < flops / 64e9
    assert roof.decode_s[0] == pytest.approx(flops / 64e9)
