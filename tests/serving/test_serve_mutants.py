"""Request-level serving worked out by hand, field by field: every column of the
iteration log and every number of the summary for two small schedules (continuous and
static batching), and the KV block pool's edges. Written against the survivors of a
mutation run over ``serving/scheduler.py``, ``serving/kv_cache.py`` and
``serving/metrics.py`` (``benchmarks/mutation.py``): each expectation below is derived
in the comments, not read back from the code."""

from __future__ import annotations

import pytest

from archsim.config import load_config
from archsim.errors import DeviceMemoryError
from serving.engine import run_engine
from serving.kv_cache import BlockPool, cache_budget
from serving.metrics import Slo, summarize
from serving.plan import Parallelism, Shard
from serving.scheduler import Limits
from serving.spec import spec_from_config
from serving.workload import Arrival


def fake(prefill: int, seqs: int, context: float, chunks: tuple = ()) -> float:
    """1 s an iteration, 10 ms a prefill token, 100 ms a decoding sequence."""
    return 1.0 + 0.01 * prefill + 0.1 * seqs


class Recorder:
    """``fake``, remembering every (prefill, seqs, context) it was asked, and the
    prefill chunks, (new, cached) tokens, apart."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, float]] = []
        self.chunks: list[tuple[tuple[int, int], ...]] = []

    def __call__(self, prefill: int, seqs: int, context: float,
                 chunks: tuple[tuple[int, int], ...] = ()) -> float:
        self.calls.append((prefill, seqs, context))
        self.chunks.append(chunks)
        return fake(prefill, seqs, context)


def continuous_pair():
    # A (4-token prompt, 3 tokens) at 0; B (2, 2) at 0.5; 8 slots, 64 tokens an
    # iteration, 100 blocks of 4 tokens.
    # it 1  0    -> 1.04  A prefill 4 (1 block)                      A's 1st token
    # it 2  1.04 -> 2.16  A decode (5 tokens: 2 blocks), B prefill 2 (1 block):
    #                     1 + 0.02 + 0.1; A's context 5           A's 2nd, B's 1st
    # it 3  2.16 -> 3.36  A and B decode, contexts 6 and 3 (mean 4.5): 1 + 0.2
    timing = Recorder()
    arrivals = [Arrival(0, 0.0, 4, 3), Arrival(1, 0.5, 2, 2)]
    return run_engine(arrivals, timing, Limits(8, 64), blocks=100, block_size=4), timing


def test_continuous_iteration_log_column_by_column() -> None:
    result, timing = continuous_pair()
    assert timing.calls == [(4, 0, 0.0), (2, 1, 5.0), (0, 2, 4.5)]
    assert timing.chunks == [((4, 0),), ((2, 0),), ()]  # nothing cached before
    it = result.iterations
    assert len(it) == 3
    assert list(it.start_s) == pytest.approx([0.0, 1.04, 2.16])
    assert list(it.time_s) == pytest.approx([1.04, 1.12, 1.2])
    assert list(it.prefill_tokens) == [4, 2, 0]
    assert list(it.decode_seqs) == [0, 1, 2]
    assert list(it.seqs) == [1, 2, 2]
    assert list(it.running) == [1, 2, 2]
    assert list(it.waiting) == [0, 0, 0]
    # it 1: A all along, B from 0.5 of 1.04 s: 1 + 0.54 / 1.04
    assert list(it.in_system) == pytest.approx([1 + 0.54 / 1.04, 2, 2])
    assert list(it.kv_blocks) == [1, 3, 3]
    assert list(it.tokens_out) == [1, 2, 2]
    assert (result.scheduler, result.kv_blocks, result.block_size) == ("continuous", 100, 4)


def test_continuous_summary_field_by_field() -> None:
    result, _ = continuous_pair()
    s = summarize(result)
    # TTFT A 1.04, B 2.16 - 0.5 = 1.66; TPOT A (3.36 - 1.04) / 2 = 1.16, B 1.2;
    # e2e A 3.36, B 2.86; gaps 1.12, 1.2, 1.2. numpy's percentiles interpolate linearly.
    assert s.latency_s["ttft"] == pytest.approx(
        {"mean": 1.35, "p50": 1.35, "p90": 1.04 + 0.9 * 0.62, "p99": 1.04 + 0.99 * 0.62})
    assert s.latency_s["tpot"] == pytest.approx(
        {"mean": 1.18, "p50": 1.18, "p90": 1.16 + 0.9 * 0.04, "p99": 1.16 + 0.99 * 0.04})
    assert s.latency_s["e2e"] == pytest.approx(
        {"mean": 3.11, "p50": 3.11, "p90": 2.86 + 0.9 * 0.5, "p99": 2.86 + 0.99 * 0.5})
    assert s.latency_s["itl"] == pytest.approx(
        {"mean": 3.52 / 3, "p50": 1.2, "p90": 1.2, "p99": 1.2})
    assert (s.span_s, s.requests, s.output_tokens, s.prompt_tokens) == pytest.approx(
        (3.36, 2, 5, 6))
    assert s.goodput_requests == 2 and s.slo_attained is None  # no SLO: all count
    # time averages over 3.36 s, weights 1.04, 1.12, 1.2
    assert s.mean_in_system == pytest.approx((1.04 + 0.54 + 2 * 1.12 + 2 * 1.2) / 3.36)
    assert s.mean_batch == pytest.approx((1.04 + 2 * 1.12 + 2 * 1.2) / 3.36)
    assert s.mean_slots_idle == pytest.approx((7 * 1.04 + 6 * 1.12 + 6 * 1.2) / 3.36)
    assert s.mean_padded == 0
    assert s.mean_kv_use == pytest.approx((0.01 * 1.04 + 0.03 * 1.12 + 0.03 * 1.2) / 3.36)
    assert s.peak_kv_use == pytest.approx(0.03)
    assert s.busy_fraction == pytest.approx(1.0) and s.preemptions == 0
    assert s.throughput_tokens_per_s == pytest.approx(5 / 3.36)
    assert s.throughput_requests_per_s == pytest.approx(2 / 3.36)
    assert s.goodput_requests_per_s == pytest.approx(2 / 3.36)
    assert s.arrival_rate == pytest.approx(2 / 3.36)


def test_idle_time_between_requests_lowers_the_busy_fraction_only() -> None:
    # A (2, 1) at 0 runs 1.02 s; B (2, 1) at 3 runs 1.02 s: span 4.02, busy 2.04
    arrivals = [Arrival(0, 0.0, 2, 1), Arrival(1, 3.0, 2, 1)]
    s = summarize(run_engine(arrivals, fake, Limits(8, 64), blocks=10, block_size=4))
    assert s.span_s == pytest.approx(4.02)
    assert s.busy_fraction == pytest.approx(2.04 / 4.02)
    assert s.mean_batch == pytest.approx(1.0)  # idle time excluded
    assert s.mean_slots_idle == pytest.approx(7.0)
    assert s.mean_in_system == pytest.approx(2.04 / 4.02)  # idle time included
    assert s.mean_kv_use == pytest.approx(0.1) and s.peak_kv_use == pytest.approx(0.1)
    # one token each: no TPOT, no gaps
    assert s.latency_s["tpot"] == {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0}
    assert s.latency_s["itl"]["mean"] == 0.0


def test_slo_at_a_percentile_and_goodput() -> None:
    result, _ = continuous_pair()
    # p90 TTFT 1.598 s, p90 TPOT 1.196 s
    assert summarize(result, Slo(ttft_ms=1600, tpot_ms=1196.5)).slo_attained is True
    assert summarize(result, Slo(ttft_ms=1597, tpot_ms=1196.5)).slo_attained is False
    assert summarize(result, Slo(tpot_ms=1195)).slo_attained is False
    assert summarize(result, Slo(ttft_ms=1600)).slo_attained is True
    # per request: A (TTFT 1.04 s, TPOT 1.16 s), B (1.66 s, 1.2 s)
    s = summarize(result, Slo(ttft_ms=1100, tpot_ms=1170))
    assert s.goodput_requests == 1
    assert s.goodput_requests_per_s == pytest.approx(1 / 3.36)
    assert summarize(result, Slo(ttft_ms=1039)).goodput_requests == 0
    assert summarize(result, Slo(tpot_ms=1199)).goodput_requests == 1
    assert summarize(result, Slo(tpot_ms=1201)).goodput_requests == 2


def test_static_batching_pads_prefill_and_decode_by_hand() -> None:
    # A (4, 3) and B (2, 2) both at 0, static: both admitted (2 + 1 blocks reserved for
    # every token they will hold: ceil(7/4), ceil(4/4)).
    # it 1  0    -> 1.08  prefill padded to the longest prompt: 4 x 2 = 8 tokens
    # it 2  1.08 -> 2.28  decode, padded to 2 sequences at A's context 5: 1 + 0.2;
    #                     B's 2nd token ends it
    # it 3  2.28 -> 3.48  A alone, still padded to 2 sequences (B keeps its slot) at
    #                     A's context 6
    timing = Recorder()
    arrivals = [Arrival(0, 0.0, 4, 3), Arrival(1, 0.0, 2, 2)]
    result = run_engine(arrivals, timing, Limits(8, 64), blocks=100, block_size=4,
                        scheduler="static")
    assert timing.calls == [(8, 0, 0.0), (0, 2, 5.0), (0, 2, 6.0)]
    assert timing.chunks == [(), (), ()]  # the padded prefill is one sequence
    it = result.iterations
    assert list(it.seqs) == [2, 2, 1] and list(it.running) == [2, 2, 2]
    assert list(it.kv_blocks) == [3, 3, 3]
    a, b = result.records
    assert (a.first_token_s, a.finish_s) == pytest.approx((1.08, 3.48))
    assert (b.first_token_s, b.finish_s) == pytest.approx((1.08, 2.28))
    s = summarize(result)
    assert s.mean_padded == pytest.approx(1.2 / 3.48)  # B's idle slot in it 3
    assert s.mean_batch == pytest.approx((2 * 1.08 + 2 * 1.2 + 1.2) / 3.48)


def test_static_batch_waits_for_the_whole_batch_and_its_blocks() -> None:
    # 2 slots. A (4, 3) and B (2, 2) at 0 form a batch; C (2, 1) at 0 waits for both
    # to finish (3.48, as above), then prefills alone (1.02 s) and is done at 4.5.
    arrivals = [Arrival(0, 0.0, 4, 3), Arrival(1, 0.0, 2, 2), Arrival(2, 0.0, 2, 1)]
    result = run_engine(arrivals, fake, Limits(2, 64), blocks=100, block_size=4,
                        scheduler="static")
    c = result.records[2]
    assert (c.first_token_s, c.finish_s) == pytest.approx((4.5, 4.5))
    assert list(result.iterations.waiting) == [1, 1, 1, 0]
    assert list(result.iterations.kv_blocks) == [3, 3, 3, 1]
    # blocks, not slots: 2 blocks hold A's 7 tokens but not B's too, so A runs alone
    # (1.04 + 1.1 + 1.1 = 3.24), then B and C together (prefill padded to 2 x 2)
    tight = run_engine(arrivals, fake, Limits(8, 64), blocks=2, block_size=4,
                       scheduler="static")
    assert [r.first_token_s for r in tight.records] == pytest.approx(
        [1.04, 3.24 + 1.04, 3.24 + 1.04])


def test_continuous_admission_stops_at_slots_budget_and_blocks() -> None:
    # one slot: B (arrived with A) waits until A finishes at 1.04 + 1.1 = 2.14
    arrivals = [Arrival(0, 0.0, 4, 2), Arrival(1, 0.0, 2, 1)]
    one_slot = run_engine(arrivals, fake, Limits(1, 64), blocks=100, block_size=4)
    assert one_slot.records[1].first_token_s == pytest.approx(2.14 + 1.02)
    # a 5-token budget: A's 4 prompt tokens, then 1 of B's 2 (a chunk); B's prefill
    # ends with A's first decode: it 1 1 + 0.05, it 2 1 + 0.01 + 0.1
    budget = Recorder()
    chunked = run_engine(arrivals, budget, Limits(8, 5), blocks=100, block_size=4)
    assert budget.calls[:2] == [(5, 0, 0.0), (1, 1, 5.0)]
    # B's second chunk reads the token its first chunk cached
    assert budget.chunks[:2] == [((4, 0), (1, 0)), ((1, 1),)]
    assert chunked.records[1].first_token_s == pytest.approx(1.05 + 1.11)
    # 3 blocks of 4: A (8, 1) takes 2 for its prompt; B's 6-token prompt needs 2, one
    # is free, so B waits until A is done and prefills alone
    few = Recorder()
    run_engine([Arrival(0, 0.0, 8, 1), Arrival(1, 0.0, 6, 1)], few, Limits(8, 64),
               blocks=3, block_size=4)
    assert few.calls == [(8, 0, 0.0), (6, 0, 0.0)]


class TestBlockPool:
    def test_counts(self) -> None:
        pool = BlockPool(5, 4)
        assert [pool.needed(t) for t in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
        assert pool.take(5) and pool.free == 0 and pool.used == 5
        assert not pool.take(1) and pool.free == 0
        pool.give_back(2)
        assert (pool.free, pool.used) == (2, 3)
        assert not pool.take(3) and pool.take(2) and pool.free == 0
        single = BlockPool(1, 1)  # the smallest pool there is
        assert (single.total, single.block_size, single.needed(3)) == (1, 1, 3)

    @pytest.mark.parametrize("blocks, size", [(0, 4), (4, 0)])
    def test_empty_pool_is_refused(self, blocks: int, size: int) -> None:
        with pytest.raises(ValueError, match=f'"blocks" and "block_size" must be >= 1, '
                                             f"got {blocks}, {size}"):
            BlockPool(blocks, size)


SMALL = spec_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2,
                          "intermediate_size": 128, "vocab_size": 100,
                          "max_position_embeddings": 256}, "small")
TINY = load_config("tiny")


class TestCacheBudget:
    """The KV pool of SMALL on one chip, worked out by hand: hidden 64, 2 layers, 4
    heads of 16 (2 K/V heads), gated MLP of 128, vocabulary 100, untied embeddings."""

    par, shard = Parallelism(), Shard(heads=4, kv_heads=2, intermediate=128, vocab=100)

    @staticmethod
    def weights(item: int) -> int:
        # a layer's matmuls 64 x (2 x 64 + 2 x 32) + 3 x 64 x 128 = 36,864, its two
        # norms 128; the embedding 100 x 64, the head 100 x 64 and the final norm 64
        return item * (2 * (36_864 + 128) + 6_400 + 6_400 + 64)

    @staticmethod
    def activations(tokens: int, item: int) -> int:
        # 2 x tokens x (2 x 64 + 64 + 2 x 32 + 2 x 128) at the activations' size
        return 2 * tokens * 512 * item

    def budget(self, **kw):
        args = dict(dtype="bf16", kv_dtype="bf16", block_size=16, max_batched_tokens=256)
        args.update(kw)
        return cache_budget(SMALL, self.par, self.shard, TINY, **args)

    def test_blocks_are_what_is_left_of_90_percent(self) -> None:
        budget = self.budget()
        # 16 tokens x 2 layers x (K, V) x 2 heads x 16 x 2 bytes
        assert budget.block_bytes == 4_096 and budget.block_size == 16
        assert budget.weights_bytes == self.weights(2) == 173_696
        assert budget.activations_bytes == self.activations(256, 2) == 524_288
        usable = int(TINY.dram.capacity_bytes * 0.9)
        assert budget.usable_bytes == usable
        assert budget.blocks == (usable - 173_696 - 524_288) // 4_096
        assert budget.tokens == 16 * budget.blocks

    def test_the_prefill_chunk_and_dtypes_set_the_memory_taken(self) -> None:
        f32 = self.budget(dtype="f32", kv_dtype="f32", max_batched_tokens=64)
        assert f32.weights_bytes == self.weights(4)
        assert f32.activations_bytes == self.activations(64, 4)
        assert f32.block_bytes == 8_192
        int8 = self.budget(weights="int8")
        # int8 matmul weights (one byte) with a bf16 scale per output row: a layer's
        # rows 64 + 2 x 32 + 64 + 2 x 128 + 64 = 512, the head's 100; the embedding and
        # the norms stay bf16
        layer = 36_864 + 2 * 512 + 2 * 128
        assert int8.weights_bytes == 2 * layer + 2 * 6_400 + (6_400 + 2 * 100) + 2 * 64

    def test_exactly_one_block_fits(self) -> None:
        taken = self.weights(2) + self.activations(256, 2)
        capacity = TINY.dram.capacity_bytes
        one = (taken + 4_096 + 100) / capacity
        assert self.budget(utilization=one).blocks == 1
        with pytest.raises(DeviceMemoryError, match=r"small leaves no room for a KV cache "
                                                    r"on tiny: weights .* of .* usable "
                                                    r"\(\d+% of a chip\)"):
            self.budget(utilization=(taken + 4_000) / capacity)
        assert self.budget(blocks=3).blocks == 3  # an override is taken as it is


class TestSummaryEdges:
    def test_slo_bounds_are_inclusive(self) -> None:
        # 1.5 s and 0.25 s are exact in binary: the SLO's own value meets it
        slo = Slo(ttft_ms=1500, tpot_ms=250)
        assert slo.met_by(1.5, 0.25)
        assert not slo.met_by(1.5009765625, 0.25) and not slo.met_by(1.5, 0.2509765625)
        assert Slo().met_by(1e9, 1e9)  # no SLO: everything meets it

    def test_one_token_requests_have_no_tpot_and_meet_any_tpot_slo(self) -> None:
        # the pair above plus C (2, 1) at 0.5, which joins B's prefill:
        # it 1 0 -> 1.04 A prefill; it 2 1.04 -> 2.18 A decode, B and C prefill 4 tokens
        # (1 + 0.04 + 0.1), C done; it 3 2.18 -> 3.38 A and B decode
        arrivals = [Arrival(0, 0.0, 4, 3), Arrival(1, 0.5, 2, 2), Arrival(2, 0.5, 2, 1)]
        result = run_engine(arrivals, fake, Limits(8, 64), blocks=100, block_size=4)
        # TPOT: A (3.38 - 1.04) / 2 = 1.17, B 1.2; C has none and is left out
        assert summarize(result).latency_s["tpot"]["mean"] == pytest.approx(1.185)
        # C meets a 900 ms TPOT SLO (no second token to wait for), A and B do not
        assert summarize(result, Slo(tpot_ms=900)).goodput_requests == 1
        alone = run_engine([Arrival(0, 0.0, 2, 1)], fake, Limits(8, 64), 10, 4)
        assert summarize(alone, Slo(tpot_ms=500)).slo_attained is True

    def test_the_span_starts_at_the_first_arrival(self) -> None:
        result = run_engine([Arrival(0, 1.0, 2, 1)], fake, Limits(8, 64), 10, 4)
        s = summarize(result)
        assert s.span_s == pytest.approx(1.02)  # 1.0 -> 2.02
        assert s.throughput_tokens_per_s == pytest.approx(1 / 1.02)
        assert s.busy_fraction == pytest.approx(1.0)

    def test_instant_iterations_give_zero_averages_not_nans(self) -> None:
        # hardware that takes no time: nothing to average over
        result = run_engine([Arrival(0, 0.0, 2, 2)], lambda p, s, c, k: 0.0, Limits(8, 64),
                            10, 4)
        s = summarize(result)
        assert s.span_s == 0.0
        assert (s.mean_in_system, s.mean_batch, s.mean_slots_idle, s.mean_padded,
                s.mean_kv_use, s.busy_fraction) == (0.0,) * 6
        assert s.peak_kv_use == pytest.approx(0.1)
        assert (s.throughput_tokens_per_s, s.throughput_requests_per_s,
                s.goodput_requests_per_s, s.arrival_rate) == (0.0,) * 4


class TestContinuousBudget:
    def test_running_sequences_first_then_admissions_within_the_budget(self) -> None:
        # 2 tokens an iteration; A, B, C (1-token prompts, 2 tokens each) at 0.
        # it 1 A and B prefill 1 each (the budget is spent, C waits): 1.02
        # it 2 A and B decode: 1.2, both done at 2.22
        # it 3 C prefill: 1.01; it 4 C decodes: 1.1, done at 4.33
        arrivals = [Arrival(i, 0.0, 1, 2) for i in range(3)]
        timing = Recorder()
        result = run_engine(arrivals, timing, Limits(8, 2), blocks=100, block_size=4)
        assert timing.calls == [(2, 0, 0.0), (0, 2, 2.0), (1, 0, 0.0), (0, 1, 2.0)]
        assert list(result.iterations.seqs) == [2, 2, 1, 1]
        assert list(result.iterations.waiting) == [1, 1, 0, 0]
        assert result.records[2].finish_s == pytest.approx(4.33)

    def test_every_running_sequence_decodes_when_the_budget_holds_them(self) -> None:
        # 3 tokens an iteration, three 1-token prompts: it 2 decodes all three
        arrivals = [Arrival(i, 0.0, 1, 2) for i in range(3)]
        timing = Recorder()
        run_engine(arrivals, timing, Limits(8, 3), blocks=100, block_size=4)
        assert timing.calls == [(3, 0, 0.0), (0, 3, 2.0)]

    def test_the_newest_running_sequence_is_preempted(self) -> None:
        # 5 blocks of 2 tokens; A, B, C (2-token prompts, 3 tokens each) at 0 take one
        # block each for their prompts. Their first decode needs a block each: A and B
        # take the last two, C (the newest) finds none and is preempted, not B. A and B
        # finish in it 3; C recomputes its 3 tokens in it 4 and decodes in it 5.
        arrivals = [Arrival(i, 0.0, 2, 3) for i in range(3)]
        timing = Recorder()
        result = run_engine(arrivals, timing, Limits(8, 64), blocks=5, block_size=2)
        assert [r.preemptions for r in result.records] == [0, 0, 1]
        assert timing.calls == [(6, 0, 0.0), (0, 2, 3.0), (0, 2, 4.0), (3, 0, 0.0),
                                (0, 1, 4.0)]
        # C's recompute reads no cache: its blocks were freed with it
        assert timing.chunks == [((2, 0), (2, 0), (2, 0)), (), (), ((3, 0),), ()]

    def test_a_long_prompt_s_chunks_read_what_the_earlier_ones_cached(self) -> None:
        # 4 tokens an iteration, A's 10-token prompt in chunks of 4, 4 and 2 (cached
        # before each: 0, 4, 8); its first token ends it 3, its second (context 11) it 4
        timing = Recorder()
        result = run_engine([Arrival(0, 0.0, 10, 2)], timing, Limits(8, 4), blocks=100,
                            block_size=4)
        assert timing.calls == [(4, 0, 0.0), (4, 0, 0.0), (2, 0, 0.0), (0, 1, 11.0)]
        assert timing.chunks == [((4, 0),), ((4, 4),), ((2, 8),), ()]
        assert result.records[0].first_token_s == pytest.approx(3 + 0.1)
