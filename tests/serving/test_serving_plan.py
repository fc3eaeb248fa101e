"""LLM serving without compiling: model configs, hand-computed rooflines, memory per
chip and its error, and the composition of blocks into layers, stages and pipelines
(blocks timed by a stub so every expected cycle can be derived by hand)."""

from __future__ import annotations

import pytest

from archsim.config import load_config
from archsim.errors import DeviceMemoryError, ModelConfigError
from serving.compose import BlockTime, Composer
from serving.plan import Parallelism, Request, check, check_memory
from serving.roofline import roofline
from serving.spec import bundled_models, load_model, spec_from_config

TINY = load_config("tiny")  # ring, 8 B/cycle per link and direction, 100 cycles per hop
SMALL = spec_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2,
                          "intermediate_size": 128, "vocab_size": 100,
                          "max_position_embeddings": 64}, "small")


def test_bundled_models_have_their_published_parameter_counts() -> None:
    assert {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b",
            "mistral-7b", "qwen2-7b", "gpt2-xl"} <= set(bundled_models())
    assert load_model("llama-2-7b").parameters == 6_738_415_616
    assert load_model("llama-2-70b").parameters == 68_976_648_192
    assert load_model("llama-3-8b").parameters == 8_030_261_248
    assert load_model("gpt2-xl").parameters == 1_557_611_200
    assert load_model("mistral-7b").sliding_window == 4096


def test_model_from_a_directory_and_bad_names(tmp_path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "qwen2", "hidden_size": 64, '
                                          '"num_hidden_layers": 2, "num_attention_heads": 4, '
                                          '"vocab_size": 10}')
    spec = load_model(tmp_path)
    assert (spec.kv_heads, spec.intermediate, spec.qkv_bias) == (4, 256, True)
    with pytest.raises(ModelConfigError, match="unknown model 'llama-9b': not a bundled"):
        load_model("llama-9b")
    with pytest.raises(ModelConfigError, match="model_type 'bert' is not supported"):
        spec_from_config({"model_type": "bert"}, "bert")


def test_rooflines_by_hand() -> None:
    request = Request(batch=2, prefill=8, decode=2)
    roof = roofline(SMALL, request, TINY)
    # matmul weights per layer: 64 x (2x64 + 2x32) + 3 x 64 x 128 = 36864;
    # causal pairs over 8 tokens: 36; per sequence: 2 layers x (2x8x36864 + 4x64x36)
    # + LM head for the last token 2 x 64 x 100
    assert roof.prefill_flops == 2 * (2 * (2 * 8 * 36864 + 4 * 64 * 36) + 2 * 64 * 100)
    assert roof.prefill_flops == 2_421_760
    # weights read per step: 2 layers x (36864 + 2 norms x 64) + final norm 64 + head
    # 6400, in bf16; KV cache: 2 sequences x 2 layers x context x (2 x 2 x 16) x 2 B
    weights = (2 * 36992 + 6464) * 2
    assert roof.decode_bytes == (weights + 2 * 2 * 9 * 64 * 2, weights + 2 * 2 * 10 * 64 * 2)
    bandwidth = TINY.dram_bandwidth_bytes_per_s
    assert roof.decode_s[0] == pytest.approx(165504 / bandwidth)
    assert roof.prefill_s == pytest.approx(max(2_421_760 / TINY.peak_flops,
                                               weights / bandwidth))


def test_too_big_for_one_chip_says_by_how_much_and_which_split_fits() -> None:
    spec = load_model("llama-2-70b")
    request = Request(1, 2048, 16)
    par = Parallelism()
    with pytest.raises(DeviceMemoryError) as info:
        check_memory(spec, request, par, check(spec, request, par), load_config("tpu-v4"))
    message = str(info.value)
    assert message.startswith("llama-2-70b needs 129.") and "but a chip has 32.0 GiB" in message
    assert message.endswith("too much; split it over more chips, e.g. --tp 8 (--chips 8)")
    eight = Parallelism(tp=8)
    mem = check_memory(spec, request, eight, check(spec, request, eight), load_config("tpu-v4"))
    assert mem.kv_cache == 80 * 2064 * 2 * 1 * 128 * 2  # one of 8 K/V heads per chip


def test_parallelism_that_does_not_divide_is_refused() -> None:
    with pytest.raises(ModelConfigError, match="--tp 3 does not divide its 4 attention heads"):
        check(SMALL, Request(), Parallelism(tp=3))
    with pytest.raises(ModelConfigError, match="--micro-batches 3 does not divide --batch 4"):
        check(SMALL, Request(batch=4, prefill=8), Parallelism(pp=2, micro_batches=3))
    with pytest.raises(ModelConfigError, match="--pp 3 is more stages than its 2 layers"):
        check(SMALL, Request(prefill=8), Parallelism(pp=3))


class StubTimer:
    """Attention and MLP blocks take 1000 cycles each, embedding and head none; a stage
    on one chip is its layers."""

    simulated: list = []

    def block(self, kind: str, tokens: int, context: int = 0) -> BlockTime:
        return BlockTime(1000 if kind in ("attention", "mlp") else 0, 0, 0)

    def layer_block(self, kind: str, tokens: int, context: int, layer: int) -> BlockTime:
        return self.block(kind, tokens, context)

    def stage(self, first: int, count: int, embed: bool, head: bool, tokens: int,
              context: int = 0) -> BlockTime:
        return BlockTime(2000 * count, 0, 0)


def compose(request: Request, par: Parallelism, algorithm: str = "bidir_ring") -> Composer:
    check(SMALL, request, par)
    return Composer(SMALL, request, par, TINY, StubTimer(), algorithm)


@pytest.mark.parametrize("micro_batches, ttft", [(1, 4612), (2, 6356), (4, 10228)])
def test_pipeline_bubbles_for_known_micro_batch_counts(micro_batches: int, ttft: int) -> None:
    # 2 stages of 1 layer (2000 cycles a pass, whatever the micro-batch); the
    # activations of a micro-batch of b sequences (b x 8 x 64 x 2 B) reach stage 1 in
    # 100 + b x 1024 / 8 cycles. TTFT = (m + pp - 1) passes + one send: stage 1 idles
    # for (pp - 1) passes, the bubble.
    pipeline = compose(Request(batch=4, prefill=8, decode=0),
                       Parallelism(pp=2, micro_batches=micro_batches)).pipeline()
    send = 100 + (4 // micro_batches) * 1024 // 8
    assert pipeline.ttft_cycles == (micro_batches + 1) * 2000 + send == ttft


@pytest.mark.parametrize("algorithm, all_reduce, gather, ttft",
                         [("ring", 2 * (100 + 512 // 8), 100 + 13, 5753),
                          ("bidir_ring", 2 * (100 + 256 // 8), 100 + 7, 5427)])
def test_tensor_parallel_layer_has_an_all_reduce_after_each_half(
        algorithm: str, all_reduce: int, gather: int, ttft: int) -> None:
    # tp 2 on a 2-chip ring: an all-reduce of 1 x 8 x 64 x 2 = 1024 B is 2 steps of
    # 100 + 512 / 8 (ring) or 100 + 256 / 8 (half each way); the embedding
    # all-reduces too; the head all-gathers the logits (100 x 2 B): 1 step of
    # 100 + ceil(100 / 8) or 100 + ceil(50 / 8)
    pipeline = compose(Request(batch=1, prefill=8, decode=0), Parallelism(tp=2),
                       algorithm).pipeline()
    layer = 1000 + all_reduce + 1000 + all_reduce
    assert pipeline.ttft_cycles == all_reduce + 2 * layer + gather == ttft
    segment = pipeline.segments[0][1]
    assert segment.collective_cycles == all_reduce + 4 * all_reduce + gather


def test_decode_steps_follow_the_prefill_and_wait_for_their_token() -> None:
    # pp 2, one micro-batch: each decode step is 2 stage passes of 2000, a send of
    # 100 + 128 between them and the token (4 B) back to chip 0: 100 + 1 cycles
    pipeline = compose(Request(batch=1, prefill=8, decode=3), Parallelism(pp=2)).pipeline()
    assert pipeline.ttft_cycles == 2000 + 228 + 2000
    step = 101 + 2000 + (100 + 1024 // 8 // 8) + 2000
    assert pipeline.result.total_cycles == pipeline.ttft_cycles + 3 * step


def test_planning_and_the_many_chip_model_do_not_import_torch() -> None:
    import subprocess
    import sys

    code = ("import sys, archsim.cluster, archsim.interconnect, serving, serving.plan, "
            "serving.roofline, serving.compose, serving.run, archsim.cli.llm, reports.llm\n"
            "from archsim.cli.main import build_parser; build_parser()\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_segments_keep_each_blocks_place_for_the_trace() -> None:
    pipeline = compose(Request(batch=1, prefill=8, decode=0), Parallelism(tp=2),
                       "ring").pipeline()
    parts = pipeline.segments[0][1].parts
    # embedding (0 cycles) + its all-reduce, 2 layers of attention, all-reduce, mlp,
    # all-reduce, then the head and its all-gather: one chip's view, back to back
    assert [p[0] for p in parts] == [
        "embed", "all-reduce", "layer 0 attention", "layer 0 all-reduce", "layer 0 mlp",
        "layer 0 all-reduce", "layer 1 attention", "layer 1 all-reduce", "layer 1 mlp",
        "layer 1 all-reduce", "head", "all-gather"]
    assert parts[2][1:] == (328, 1328, False) and parts[3][1:] == (1328, 1656, True)
    assert parts[-1][2] == pipeline.ttft_cycles
