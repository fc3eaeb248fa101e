"""Request-level serving with iteration times from the simulator, on a small model and
the tiny preset: alone, a request's TTFT and TPOT are ``archsim llm``'s; the grid's
interpolation stays within 2% of direct simulation off the grid; the KV cache's size
follows from memory."""

from __future__ import annotations

import pytest

from archsim.config import load_config
from serving.plan import Parallelism, Request, check
from serving.run import serve
from serving.spec import spec_from_config
from serving.traffic import ServeOptions, Server, find_max_rate
from serving.workload import Arrival, synthetic
from serving.metrics import Slo

TINY = load_config("tiny")
SMALL = spec_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2,
                          "intermediate_size": 128, "vocab_size": 100,
                          "max_position_embeddings": 256}, "small")


@pytest.fixture(scope="module")
def server() -> Server:
    return Server.build(SMALL, TINY, options=ServeOptions(max_num_seqs=8,
                                                          max_num_batched_tokens=256))


def test_a_lone_request_has_archsim_llms_ttft_and_tpot(server) -> None:
    # requests 1000 s apart never overlap
    arrivals = [Arrival(0, 0.0, 16, 6), Arrival(1, 1000.0, 40, 4)]
    records = server.run(arrivals).engine.records
    for record in records:
        llm = serve(SMALL, TINY, Request(1, record.prompt_tokens, record.output_tokens - 1))
        assert record.ttft_s == pytest.approx(llm.ttft_s, rel=0.05)
        assert record.tpot_s == pytest.approx(llm.tpot_s, rel=0.10)


@pytest.mark.parametrize("prefill, seqs, context, tolerance", [
    (0, 3, 20.0, 0.02), (0, 6, 90.0, 0.02), (0, 5, 150.0, 0.02), (0, 12, 60.0, 0.02),
    (20, 0, 0.0, 0.02), (40, 0, 0.0, 0.02), (36, 5, 33.0, 0.02),
    # tiny's prefill times step up every ~20 tokens (the toy model's matmuls quantize
    # on tiny's small matrix unit: 216.7 us at 44 tokens, 186.2 at 40); a line between
    # grid points misses the steps by up to 8.1% (45 tokens: 204.0 us for 221.9)
    (45, 0, 0.0, 0.09), (160, 0, 0.0, 0.08), (200, 0, 0.0, 0.08)])
def test_interpolation_against_direct_simulation_off_the_grid(
        server, prefill, seqs, context, tolerance) -> None:
    timer = server.timing
    assert timer(prefill, seqs, context) == pytest.approx(
        timer.direct_s(prefill, seqs, context), rel=tolerance)


def test_kv_blocks_are_the_memory_left_after_weights_and_activations(server) -> None:
    budget = server.budget
    # 2 layers x (K and V) x 2 kv heads x 16 dims x 2 bytes, 16 tokens a block
    assert budget.block_bytes == 16 * 2 * 2 * 2 * 16 * 2
    left = int(TINY.dram.capacity_bytes * 0.9) - budget.weights_bytes - budget.activations_bytes
    assert budget.blocks == left // budget.block_bytes
    small = Server.build(SMALL, TINY, options=ServeOptions(kv_blocks=5))
    assert small.budget.blocks == 5


def test_int8_weights_leave_more_room_for_the_kv_cache(server) -> None:
    int8 = Server.build(SMALL, TINY, options=ServeOptions(
        max_num_seqs=8, max_num_batched_tokens=256, weights="int8"))
    from serving.plan import Parallelism, Request, check, memory_per_chip

    request = Request(1, 256, 0, "bf16", "bf16", "int8")  # memory as cache_budget counts
    weights = memory_per_chip(SMALL, request, Parallelism(),
                              check(SMALL, request, Parallelism())).weights
    assert int8.budget.weights_bytes == weights < server.budget.weights_bytes
    left = int8.budget.usable_bytes - weights - int8.budget.activations_bytes
    assert int8.budget.blocks == left // int8.budget.block_bytes > server.budget.blocks
    assert int8.timing.weights == "int8"  # its iterations are timed with int8 weights


def test_capacity_search_brackets_the_slo(server) -> None:
    def workload(rate: float):
        return synthetic(rate, 40, "uniform:8:32", "uniform:2:12", 0)
    slo = Slo(ttft_ms=None, tpot_ms=None)
    with pytest.raises(Exception, match="needs an SLO"):
        find_max_rate(server, workload, slo)
    alone = server.run(workload(1e-3)).summary.latency_s
    slo = Slo(ttft_ms=alone["ttft"]["p90"] * 1e3 * 3, percentile=90)
    found = find_max_rate(server, workload, slo, start=1.0)
    met = [p.rate for p in found.probes if p.sustained]
    failed = [p.rate for p in found.probes if not p.sustained]
    assert failed and min(failed) > max(met)
    assert min(failed) - max(met) <= 0.02 * max(met) + 1e-12
    # a probe meeting the SLOs while completing its requests slower than they came is a
    # miss (40 requests end before a growing queue breaks the SLOs), and no rate is
    # above the fastest pace a probe completed its requests at
    served = max(p.served_rate for p in found.probes)
    assert found.served == served
    assert found.rate == min(max(met), served)
    above = [p for p in found.probes if p.met and p.rate > found.rate]
    assert found.capped == bool(above)


def test_tensor_parallel_server_builds_on_its_shard() -> None:
    par = Parallelism(tp=2)
    shard = check(SMALL, Request(), par)
    two = Server.build(SMALL, TINY, par, ServeOptions(max_num_batched_tokens=64))
    assert shard.kv_heads == 1
    assert two.budget.block_bytes == 16 * 2 * 2 * 1 * 16 * 2


def test_pipeline_parallel_iterations_are_archsim_llms_passes() -> None:
    # two stages, one sequence: the prefill and a decode step go through both stages
    # with the activations sent between them, as archsim llm --pp 2 runs them
    par = Parallelism(pp=2)
    server = Server.build(SMALL, TINY, par, ServeOptions(max_num_batched_tokens=64))
    record, = server.run([Arrival(0, 0.0, 16, 4)]).engine.records
    llm = serve(SMALL, TINY, Request(1, 16, 3), Parallelism(pp=2, micro_batches=1))
    assert record.ttft_s == pytest.approx(llm.ttft_s, rel=0.05)
    assert record.tpot_s == pytest.approx(llm.tpot_s, rel=0.10)


def test_no_room_for_a_kv_cache_is_a_named_error() -> None:
    from archsim.errors import DeviceMemoryError

    # Llama-2-7B's 12.6 GiB of bf16 weights on one tiny chip (no simulation needed)
    with pytest.raises(DeviceMemoryError, match="llama-2-7b leaves no room for a KV cache "
                                                "on tiny: weights 12.6 GiB"):
        Server.build("llama-2-7b", TINY)


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8"])
def test_a_one_byte_kv_cache_counts_its_scales_in_each_block(kv_dtype: str) -> None:
    one_byte = Server.build(SMALL, TINY, options=ServeOptions(
        max_num_batched_tokens=64, kv_dtype=kv_dtype, kv_blocks=4))
    # 16 tokens x 2 layers x (K and V) x 2 kv heads x (16 one-byte values + a bf16 scale)
    assert one_byte.budget.block_bytes == 16 * 2 * 2 * 2 * (16 * 1 + 2)
    assert one_byte.timing.kv_dtype == kv_dtype  # its iterations read the cache as stored


def test_the_summary_states_the_weight_and_kv_formats() -> None:
    from reports.serve import serve_table

    server = Server.build(SMALL, TINY, options=ServeOptions(
        max_num_batched_tokens=64, kv_dtype="int8", weights="int8", kv_blocks=40))
    lines = serve_table(server.run([Arrival(0, 0.0, 16, 3)])).splitlines()
    assert lines[0].endswith("64 tokens an iteration), bf16, int8 weights")
    assert lines[1] == (f"  KV cache (int8): 40 blocks of 16 tokens (640 tokens, "
                        f"{40 * 16 * 2 * 2 * 2 * 18 / 2**30:.2f} GiB)")


def test_the_latency_table_keeps_sub_millisecond_latencies() -> None:
    # The small model on atom: every latency under 1 ms, and every cell read "0.0".
    from reports.serve import serve_table

    server = Server.build(SMALL, load_config("atom"),
                          options=ServeOptions(max_num_batched_tokens=64))
    result = server.run([Arrival(0, 0.0, 16, 3)])
    ttft = result.summary.latency_s["ttft"]
    assert ttft["p50"] < 1e-3  # the case this is about
    row = next(line for line in serve_table(result).splitlines()
               if line.strip().startswith("TTFT"))
    shown = [float(cell) * 1e-3 for cell in row.split()[1:]]
    assert shown == pytest.approx([ttft[k] for k in ("mean", "p50", "p90", "p99")], rel=0.01)
