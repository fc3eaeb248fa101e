"""Prefill chunks timed with their own attention context (``serving.iteration``), on a
small model and the tiny preset, worked out by hand from attention blocks simulated by
a :class:`serving.timing.Timer` of the test's own: a chunk after a prompt's first pays
its attention over the tokens already cached, a first chunk nothing; more cached
tokens cost more; chunks of different sequences in one iteration no longer attend to
each other; sliding-window layers read their window only. And the attention block with
several new tokens over a cache computes what it does one token at a time."""

from __future__ import annotations

import pytest
import torch

from archsim.app.models import inverse_frequencies, rotary_tables
from archsim.config import load_config
from serving.layers import AttentionBlock
from serving.plan import Parallelism, Request, Shard, check
from serving.spec import ModelSpec, spec_from_config
from serving.timing import Timer
from serving.traffic import ServeOptions, Server
from serving.workload import Arrival

TINY = load_config("tiny")
SMALL_CONFIG = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2,
                "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256}
SMALL = spec_from_config(SMALL_CONFIG, "small")
# layer 0 attends to the last 64 tokens, layer 1 to all
WINDOWED = spec_from_config({**SMALL_CONFIG, "sliding_window": 64,
                             "layer_types": ["sliding_attention", "full_attention"]},
                            "windowed")
OPTIONS = ServeOptions(max_num_seqs=8, max_num_batched_tokens=16)
"""16 tokens an iteration: the prefill grid is 1, 16; the cached-token grid (to the
model's 256 positions) 1, 256."""


def server(spec: ModelSpec = SMALL) -> Server:
    return Server.build(spec, TINY, options=OPTIONS)


@pytest.fixture(scope="module")
def small() -> Server:
    return server()


class Blocks:
    """Attention blocks of ``spec`` simulated by a timer built as the server's is."""

    def __init__(self, spec: ModelSpec) -> None:
        request = Request(1, 1, 0)
        self.timer = Timer(spec, check(spec, request, Parallelism()), request, 1, TINY)

    def __call__(self, new: int, context: int, layer: int = 0) -> float:
        """Seconds of layer ``layer``'s attention block, ``new`` queries over a cache of
        ``context`` tokens (its window's share of them)."""
        block = self.timer.layer_block("attention", new, context, layer)
        return block.cycles / TINY.clock_hz

    def extra(self, new: int, cached: int) -> float:
        """SMALL's two alike layers: reading ``cached`` tokens rather than 1."""
        return 2 * (self(new, cached) - self(new, 1))


@pytest.fixture(scope="module")
def blocks() -> Blocks:
    return Blocks(SMALL)


def test_grid_points_are_the_layers_attention_blocks_and_lines_between(small,
                                                                       blocks) -> None:
    timer = small.timing
    e256 = blocks.extra(16, 256)
    assert e256 > 0
    assert timer.chunk_attention_s(16, 256) == pytest.approx(e256, rel=1e-12)
    # between cached 1 (nothing) and 256
    assert timer.chunk_attention_s(16, 64) == pytest.approx(e256 * 63 / 255, rel=1e-12)
    assert timer.chunk_attention_s(16, 200) == pytest.approx(e256 * 199 / 255, rel=1e-12)
    # 8 new tokens: between the prefill grid's 1 and 16
    e1 = blocks.extra(1, 256)
    assert timer.chunk_attention_s(8, 256) == pytest.approx(e1 * 8 / 15 + e256 * 7 / 15,
                                                            rel=1e-12)
    # what the grid stands for: the same blocks at the exact shape
    assert timer.chunk_direct_s(16, 200) == pytest.approx(blocks.extra(16, 200), rel=1e-12)


def test_a_first_chunk_adds_nothing(small) -> None:
    timer = small.timing
    assert timer.chunk_attention_s(16, 0) == 0.0 == timer.chunk_direct_s(16, 0)
    assert timer(16, 0, 0.0, ((16, 0),)) == timer(16, 0, 0.0) == timer.prefill_s(16)


def test_more_cached_tokens_cost_more(small) -> None:
    timer = small.timing
    costs = [timer.chunk_attention_s(16, s) for s in (1, 16, 64, 127, 128, 160, 200, 255)]
    assert costs[0] == 0.0
    assert all(a < b for a, b in zip(costs, costs[1:]))


def test_a_chunked_prompt_s_ttft_grows_by_its_later_chunks_attention(small,
                                                                      blocks) -> None:
    # a lone 64-token prompt at 16 tokens an iteration: chunks with 0, 16, 32, 48
    # tokens cached, each iteration a 16-token prefill; its first token ends the 4th
    arrivals = [Arrival(0, 0.0, 64, 2)]
    timer = small.timing
    as_one = Server.build(SMALL, TINY, options=OPTIONS,
                          timing=lambda p, s, c, chunks: timer(p, s, c))
    before = as_one.run(arrivals).engine.records[0].ttft_s
    assert before == pytest.approx(4 * timer.prefill_s(16), rel=1e-12)
    after = small.run(arrivals).engine.records[0].ttft_s
    # cached 16, 32, 48 lie on the line from 1 to 256
    e256 = blocks.extra(16, 256)
    assert after - before == pytest.approx(e256 * (15 + 31 + 47) / 255, rel=1e-9)


def test_chunks_of_different_sequences_do_not_attend_to_each_other(small, blocks) -> None:
    timer = small.timing
    e1, e16 = blocks.extra(1, 256), blocks.extra(16, 256)

    def at8(cached: int) -> float:  # 8 new tokens: 8/15 of the 1-token line, 7/15 of 16
        return (e1 * 8 / 15 + e16 * 7 / 15) * (cached - 1) / 255

    # two fresh 8-token prompts: one 16-token prefill, less the second's attention to
    # the first's 8 tokens
    assert timer(16, 0, 0.0, ((8, 0), (8, 0))) == pytest.approx(
        timer.prefill_s(16) - at8(8), rel=1e-12)
    # and two chunks after a fresh 4-token one, of 2 and 10 tokens with 32 and 48
    # cached: each reads its cache, and not the 4 and 6 tokens before it
    at2 = (e1 * 14 / 15 + e16 * 1 / 15) / 255
    at10 = (e1 * 6 / 15 + e16 * 9 / 15) / 255
    assert timer(16, 0, 0.0, ((4, 0), (2, 32), (10, 48))) == pytest.approx(
        timer.prefill_s(16) + at2 * (31 - 3) + at10 * (47 - 5), rel=1e-12)
    # with 2 decoding tokens (first in the one sequence, their keys left in): a chunk
    # of 14 with 32 cached; 14 new tokens are 2/15 of the way from 1 to 16
    at14 = (e1 * 2 / 15 + e16 * 13 / 15) / 255
    assert timer(14, 2, 10.0, ((14, 32),)) == pytest.approx(
        timer.prefill_s(16) + timer.attention_s(2, 10.0) + at14 * 31, rel=1e-12)


def test_a_sliding_window_layer_reads_its_window_only() -> None:
    timer, blocks = server(WINDOWED).timing, Blocks(WINDOWED)
    window = blocks(16, 64, 0) - blocks(16, 1, 0)  # layer 0: the last 64 cached tokens
    full = blocks(16, 256, 1) - blocks(16, 1, 1)  # layer 1: all of them
    assert blocks(16, 256, 0) == blocks(16, 64, 0)  # the window caps layer 0's cache
    assert timer.chunk_attention_s(16, 256) == pytest.approx(window + full, rel=1e-12)
    assert timer.chunk_direct_s(16, 256) == pytest.approx(window + full, rel=1e-12)


def test_attention_block_with_new_tokens_over_a_cache_is_one_token_at_a_time() -> None:
    # 3 new tokens at positions 5-7 over a 5-token cache: each attends to the cache
    # alone, so each row is what the decode path gives for that token by itself
    torch.manual_seed(0)
    block = AttentionBlock(SMALL, Shard(4, 2, 128, 100), torch.float32).eval()
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(1, 3, 64)
    cos, sin = rotary_tables(torch.arange(5, 8), inverse_frequencies(16), torch.float32)
    k_cache, v_cache = torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16)
    with torch.no_grad():
        together = block(x, cos, sin, k_cache, v_cache)[0]
        alone = [block(x[:, j:j + 1], cos[j:j + 1], sin[j:j + 1], k_cache, v_cache)[0]
                 for j in range(3)]
    torch.testing.assert_close(together, torch.cat(alone, dim=1))
