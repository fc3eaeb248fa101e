"""serving.plan on hand-computed numbers where its mutants survived (issue 34): the
refusals' texts, which stage holds which layers and windows, a tied head's copy on the
last stage, weight-only scales of a plain MLP, the exact memory fit, and the split
``suggest_split`` proposes. SMALL: hidden 64, 2 layers, 4 heads and 2 K/V heads of 16,
gated MLP 128, vocabulary 100, untied head, RMSNorms."""

from __future__ import annotations

import dataclasses

import pytest

from archsim.config import load_config
from archsim.config.model import NpuConfig
from archsim.errors import DeviceMemoryError, ModelConfigError
from serving.plan import (
    KV_BYTES,
    WEIGHT_BYTES,
    Memory,
    Parallelism,
    Request,
    Shard,
    check,
    check_memory,
    memory_per_chip,
    suggest_split,
)
from serving.spec import ModelSpec, spec_from_config

TINY = load_config("tiny")
SMALL = spec_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2,
                          "intermediate_size": 128, "vocab_size": 100,
                          "max_position_embeddings": 64}, "small")
LAYER = (64 * (2 * 64 + 2 * 32) + 3 * 64 * 128) * 2 + 2 * 64 * 2  # matmuls + 2 norms, bf16
EMBED = 100 * 64 * 2
HEAD = 100 * 64 * 2 + 64 * 2  # LM head + final norm


def with_capacity(nbytes: int) -> NpuConfig:
    """``tiny`` with ``nbytes`` of DRAM per chip."""
    return dataclasses.replace(TINY, dram=dataclasses.replace(TINY.dram, capacity_bytes=nbytes))


def need(spec: ModelSpec, request: Request, par: Parallelism) -> int:
    return memory_per_chip(spec, request, par, check(spec, request, par)).total


# -- check --------------------------------------------------------------------------------
def test_every_bad_value_is_named_in_one_error() -> None:
    request = Request(batch=0, prefill=0, decode=-1, dtype="f64", kv_dtype="int2",
                      weights="int3")
    with pytest.raises(ModelConfigError) as info:
        check(SMALL, request, Parallelism(tp=0, pp=0, micro_batches=0))
    assert str(info.value) == (
        "batch must be >= 1, got 0; prefill must be >= 1, got 0; decode must be >= 0, "
        "got -1; tp must be >= 1, got 0; pp must be >= 1, got 0; micro-batches must be "
        ">= 1, got 0; dtype 'f64' is not one of f32, f16, bf16; kv-dtype 'int2' is not "
        f"one of {', '.join(KV_BYTES)}; weights 'int3' is not one of "
        f"{', '.join(WEIGHT_BYTES)}")


def test_kv_heads_are_split_or_replicated_and_otherwise_refused() -> None:
    # tp 4 over 2 K/V heads: a multiple of them, so each chip keeps one (replicated)
    assert check(SMALL, Request(prefill=8), Parallelism(tp=4)) == Shard(1, 1, 32, 25)
    twelve = dataclasses.replace(SMALL, name="twelve", heads=12, kv_heads=4)
    with pytest.raises(ModelConfigError) as info:  # 4 % 3 and 3 % 4 are both non-zero
        check(twelve, Request(prefill=8), Parallelism(tp=3))
    assert str(info.value) == ("twelve: --tp 3 neither divides nor is a multiple of its 4 "
                               "key/value heads")


def test_prompt_and_generated_tokens_may_fill_the_positions_exactly() -> None:
    assert check(SMALL, Request(prefill=60, decode=4), Parallelism()) == Shard(4, 2, 128, 100)
    with pytest.raises(ModelConfigError) as info:
        check(SMALL, Request(prefill=60, decode=5), Parallelism())
    assert str(info.value) == "small: 60 + 5 tokens exceed its 64 positions"


@pytest.mark.parametrize("layers, pp, split", [(5, 3, (2, 2, 1)), (3, 2, (2, 1)),
                                               (4, 2, (2, 2))])
def test_earlier_stages_take_the_remaining_layers(layers: int, pp: int, split) -> None:
    spec = dataclasses.replace(SMALL, layers=layers)
    assert Parallelism(pp=pp).stage_layers(spec) == split


# -- memory per chip ----------------------------------------------------------------------
ALTERNATING = dataclasses.replace(SMALL, name="alternating", layers=3, sliding_window=4,
                                  sliding_layers=(True, False, True))
"""Layers 0 and 2 see 4 tokens, layer 1 all of them."""


def test_each_stage_caches_the_window_of_its_own_layers() -> None:
    request = Request(batch=4, prefill=10, decode=6)  # 16 tokens
    token = 4 * 2 * 32 * 2  # one cached token of one layer: batch 4, K and V, 32, bf16
    act = 2 * (4 * 10) * (2 * 64 + 64 + 2 * 32 + 2 * 128) * 2
    one = memory_per_chip(ALTERNATING, request, Parallelism(),
                          check(ALTERNATING, request, Parallelism()))
    assert one == Memory(3 * LAYER + EMBED + HEAD, (4 + 16 + 4) * token, act)
    # pp 3, a layer a stage: stage 0 layer 0 + embedding (86,784 B) and 4 tokens; stage 1
    # layer 1 (73,984 B) and 16 tokens; stage 2 layer 2 + head (86,912 B) and 4 tokens:
    # the last is the fullest (88,960 B + activations)
    par = Parallelism(pp=3)
    assert memory_per_chip(ALTERNATING, request, par, check(ALTERNATING, request, par)) == \
        Memory(LAYER + HEAD, 4 * token, act)


def test_a_tied_head_needs_its_own_copy_of_the_table_on_the_last_stage() -> None:
    tied = dataclasses.replace(SMALL, name="tied", tied_embeddings=True)
    request = Request(batch=1, prefill=10, decode=6)
    kv = 16 * 2 * 32 * 2  # one layer a stage: 16 tokens, K and V, 32, bf16
    act = 2 * 10 * (2 * 64 + 64 + 2 * 32 + 2 * 128) * 2
    # one chip: the embedding is the head (only the final norm added)
    assert memory_per_chip(tied, request, Parallelism(), check(tied, request, Parallelism())) \
        == Memory(2 * LAYER + EMBED + 64 * 2, 2 * kv, act)
    # pp 2: stage 0 layer + embedding (86,784 B), stage 1 layer + final norm + the table
    # again (86,912 B)
    par = Parallelism(pp=2)
    assert memory_per_chip(tied, request, par, check(tied, request, par)) == \
        Memory(LAYER + 64 * 2 + EMBED, kv, act)


def test_int8_weights_of_a_plain_mlp_keep_one_scale_per_output() -> None:
    gpt2 = spec_from_config({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
                             "vocab_size": 100, "n_positions": 32}, "tiny-gpt2")
    request = Request(batch=1, prefill=10, decode=6, weights="int8")
    matmul = 64 * (2 * 64 + 2 * 64) + 2 * 64 * 256  # q, k, v, o; up and down: one byte each
    # 2 LayerNorms (2 x 128), q/k/v bias 192, out bias 64, up bias 256, down bias 64
    rest = 2 * 128 + 192 + 64 + 256 + 64
    outputs = 64 + 2 * 64 + 64 + 256 + 64  # q, k, v, o, up, down rows: a bf16 scale each
    layer = matmul + rest * 2 + outputs * 2
    embed = (100 + 32) * 64 * 2  # token and position tables in bf16; the head is tied
    mem = memory_per_chip(gpt2, request, Parallelism(), check(gpt2, request, Parallelism()))
    assert mem.weights == 2 * layer + embed + 128 * 2


def test_memory_that_fills_the_chip_exactly_fits() -> None:
    request = Request(batch=1, prefill=10, decode=6)
    kv = 2 * 16 * 2 * 32 * 2  # two layers x 16 tokens x K and V x 32 x bf16
    act = 2 * 10 * (2 * 64 + 64 + 2 * 32 + 2 * 128) * 2
    total = 2 * LAYER + EMBED + HEAD + kv + act  # 198,272 B
    mem = check_memory(SMALL, request, Parallelism(), check(SMALL, request, Parallelism()),
                       with_capacity(total))
    assert mem == Memory(2 * LAYER + EMBED + HEAD, kv, act)
    assert type(mem.activations) is int  # bytes, not a float from a true division
    with pytest.raises(DeviceMemoryError, match="0.0 GiB too much"):
        check_memory(SMALL, request, Parallelism(), check(SMALL, request, Parallelism()),
                     with_capacity(total - 1))


def test_too_big_says_each_part_and_by_how_much() -> None:
    long = dataclasses.replace(SMALL, name="long", max_positions=2048)
    request = Request(batch=256, prefill=2048, decode=0)
    # KV: 256 x 2 layers x 2048 tokens x 128 B = 0.125 GiB; activations 2 x 256 x 2048 x
    # 512 x 2 B = 1 GiB; weights 173,696 B: 1.125 GiB against 0.5, 0.625 too much. tp 2
    # needs 0.625 GiB of activations alone, tp 4 0.469 + 0.0625 of KV; tp 8 does not
    # divide the 4 heads: no split fits
    par = Parallelism()
    with pytest.raises(DeviceMemoryError) as info:
        check_memory(long, request, par, check(long, request, par), with_capacity(2**29))
    assert str(info.value) == (
        "long needs 1.1 GiB per chip on tiny (weights 0.0 GiB, KV cache 0.1 GiB, "
        "activations 1.0 GiB) but a chip has 0.5 GiB: 0.6 GiB too much; use more chips "
        "(--tp/--pp), a smaller batch or a shorter context")


# -- suggest_split ------------------------------------------------------------------------
@pytest.mark.parametrize("pp", [2, 4, 8, 16, 32])
def test_past_eight_chips_the_suggestion_adds_pipeline_stages(pp: int) -> None:
    # 8 heads: tp 16 and more do not divide them, so 8 x pp chips is tp 8 with pp stages;
    # the DRAM holds exactly that split's need (fewer stages hold more layers each)
    deep = dataclasses.replace(SMALL, name="deep", layers=32, heads=8, kv_heads=8, head_dim=8)
    request = Request(batch=1, prefill=8, decode=0)
    config = with_capacity(need(deep, request, Parallelism(tp=8, pp=pp)))
    assert suggest_split(deep, request, Parallelism(), config) == \
        f"split it over more chips, e.g. --tp 8 --pp {pp} (--chips {8 * pp})"


def test_sixteen_chips_are_tp_16_when_the_heads_divide() -> None:
    wide = dataclasses.replace(SMALL, name="wide", heads=16, kv_heads=16, head_dim=4)
    request = Request(batch=1, prefill=8, decode=0)
    config = with_capacity(need(wide, request, Parallelism(tp=16)))
    assert suggest_split(wide, request, Parallelism(), config) == \
        "split it over more chips, e.g. --tp 16 (--chips 16)"


def test_a_suggestion_uses_more_chips_than_the_run_has() -> None:
    # pp 2 already uses 2 chips: tp 2 would fit but is not more chips; tp 4 needs less
    request = Request(batch=1, prefill=8, decode=0)
    config = with_capacity(need(SMALL, request, Parallelism(tp=2)))
    assert suggest_split(SMALL, request, Parallelism(pp=2), config) == \
        "split it over more chips, e.g. --tp 4 (--chips 4)"


def test_a_suggestion_keeps_the_micro_batches() -> None:
    # 4 micro-batches of one sequence: tp 2 fits exactly; with one micro-batch of 4 the
    # activations would be 4 times as large
    request = Request(batch=4, prefill=8, decode=0)
    config = with_capacity(need(SMALL, request, Parallelism(tp=2, micro_batches=4)))
    assert suggest_split(SMALL, request, Parallelism(micro_batches=4), config) == \
        "split it over more chips, e.g. --tp 2 (--chips 2)"
