"""The runtime model (``NpuConfig.runtime``): kernel launches, the fixed latency of
collectives and the host's work per step, each on a hand-computed case, and all of it
set to zero giving back the hardware's figures."""

from __future__ import annotations

import pytest

from archsim.cluster import Collective, Compute, Host, run_cluster
from archsim.config import load_config
from serving.compose import BlockTime, Composer
from serving.plan import Parallelism, Request, check
from torch_bridge.layer_stack import stacked_kernel_count
from serving.spec import spec_from_config

# tiny: 1 GHz (1 us = 1000 cycles), a ring of 8 GB/s links (8 B/cycle), 100 cycles a hop
TINY = load_config("tiny")
SMALL = spec_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2,
                          "intermediate_size": 128, "vocab_size": 100,
                          "max_position_embeddings": 64}, "small")


def runtime(launch: float = 0.0, collective: float = 0.0, host: float = 0.0):
    return TINY.with_overrides({"runtime.kernel_launch_us": launch,
                                "runtime.collective_latency_us": collective,
                                "runtime.host_step_us": host})


class KernelTimer:
    """Attention and MLP blocks: 1000 cycles and 5 kernels each; embedding and head: no
    time, 2 kernels each; a stage on one chip: 2000 cycles and 11 kernels a layer."""

    simulated: list = []

    def block(self, kind: str, tokens: int, context: int = 0) -> BlockTime:
        if kind in ("attention", "mlp"):
            return BlockTime(1000, 0, 0, 5)
        return BlockTime(0, 0, 0, 2)

    def layer_block(self, kind: str, tokens: int, context: int, layer: int) -> BlockTime:
        return self.block(kind, tokens, context)

    def stage(self, first: int, count: int, embed: bool, head: bool, tokens: int,
              context: int = 0) -> BlockTime:
        return BlockTime(2000 * count, 0, 0, 11 * count)


def pipeline(config, request: Request, par: Parallelism | None = None):
    par = par or Parallelism()
    check(SMALL, request, par)
    return Composer(SMALL, request, par, config, KernelTimer(), "ring").pipeline()


class TestKernelLaunch:
    def test_a_step_of_n_kernels_adds_n_launches_when_nothing_overlaps(self) -> None:
        # one chip: the stage is 2 layers, 4000 cycles and 22 kernels; 0.5 us a launch
        request = Request(batch=1, prefill=8, decode=0)
        assert pipeline(runtime(), request).ttft_cycles == 4000
        launched = pipeline(runtime(launch=0.5), request)
        assert launched.ttft_cycles == 4000 + 22 * 500
        segment = launched.prefill[0]
        assert (segment.kernels, segment.launch_cycles) == (22, 22 * 500)
        assert segment.parts[0] == ("runtime: 22 kernel launches", 0, 11000, False)

    def test_with_tensor_parallelism_each_block_launches_before_it_runs(self) -> None:
        # tp 2 on a 2-chip ring, ring all-reduce of 1024 B: 2 x (100 + 512 / 8) = 328;
        # the head's all-gather of 200 B: 100 + 13; launches 0.1 us = 100 cycles each
        all_reduce, gather, launch = 2 * (100 + 512 // 8), 100 + 13, 100
        layer = 2 * (5 * launch + 1000 + all_reduce)
        expected = 2 * launch + all_reduce + 2 * layer + 2 * launch + gather
        result = pipeline(runtime(launch=0.1), Request(batch=1, prefill=8, decode=0),
                          Parallelism(tp=2))
        assert result.ttft_cycles == expected
        segment = result.prefill[0]
        assert segment.kernels == 2 + 2 * 10 + 2
        assert segment.launch_cycles == segment.kernels * launch


class TestCollectiveLatency:
    def test_paid_once_per_collective_not_per_step(self) -> None:
        # 4 chips, 4096 B ring all-reduce: 6 steps of 100 + 1024 / 8 = 1368 cycles
        config = runtime(collective=0.3)
        group = (0, 1, 2, 3)
        one = run_cluster([Collective("ar", "all_reduce", group, 4096)], config, 4)
        assert one.total_cycles == 300 + 1368
        two = run_cluster([Collective("a", "all_reduce", group, 4096),
                           Collective("b", "all_reduce", group, 4096, (0,))], config, 4)
        assert two.total_cycles == 2 * (300 + 1368)
        assert [s.end - s.start for s in two.spans] == [1668, 1668]

    def test_in_a_layer_each_all_reduce_pays_it(self) -> None:
        all_reduce, gather, fixed = 2 * (100 + 512 // 8), 100 + 13, 2000
        result = pipeline(runtime(collective=2), Request(batch=1, prefill=8, decode=0),
                          Parallelism(tp=2))
        collectives = 1 + 2 * 2 + 1  # embedding, two per layer, the head's all-gather
        plain = all_reduce + 2 * (2000 + 2 * all_reduce) + gather
        assert result.ttft_cycles == plain + collectives * fixed
        segment = result.prefill[0]
        assert (segment.collectives, segment.fixed_cycles) == (collectives,
                                                               collectives * fixed)


class TestHostWork:
    def test_the_host_works_before_every_step(self) -> None:
        # one chip, prefill and 3 decode steps of one 4000-cycle stage pass; 1.5 us of
        # host work before each (the token stays on chip 0: no transfer)
        result = pipeline(runtime(host=1.5), Request(batch=1, prefill=8, decode=3))
        assert result.ttft_cycles == 1500 + 4000
        assert result.result.total_cycles == 4 * (1500 + 4000)
        hosts = [s for s in result.result.spans if isinstance(s.task, Host)]
        assert [(s.start, s.end) for s in hosts] == [(i * 5500, i * 5500 + 1500)
                                                   for i in range(4)]
        assert result.result.busy_cycles(0, Compute) == 4 * 4000  # not on the chip

    def test_the_host_runs_one_task_at_a_time(self) -> None:
        tasks = [Host("a", 10), Host("b", 10), Compute("c", 0, 5)]
        result = run_cluster(tasks, TINY, 1)
        assert [(s.start, s.end) for s in result.spans] == [(0, 10), (10, 20), (0, 5)]


def test_kernels_of_a_layer_stack_kept_in_part() -> None:
    names = ("embed:embedding", "layers.0.a:mm", "layers.0.b:add", "layers.1.a:mm",
             "layers.1.b:add", "layers.1.c:mul", "layers.2.a:mm", "layers.2.b:add",
             "head:mm")
    # 3 of 80 layers kept; each of the 77 others has layer 1's 3 kernels
    assert stacked_kernel_count(names, "layers", 80) == 9 + 77 * 3
    assert stacked_kernel_count(names, "layers", 3) == 9


@pytest.fixture(scope="module")
def plain():
    from serving.run import serve

    return serve(SMALL, TINY, Request(batch=1, prefill=16, decode=2), Parallelism(tp=2))


def test_launches_on_a_compiled_step_add_exactly_kernels_times_cost(plain) -> None:
    from serving.run import serve

    launched = serve(SMALL, runtime(launch=1), Request(batch=1, prefill=16, decode=2),
                     Parallelism(tp=2))
    prefill = launched.pipeline.prefill[0]
    assert prefill.kernels > 10  # the compiler's fused groups: norm, q/k/v, rotary...
    assert launched.pipeline.ttft_cycles == plain.pipeline.ttft_cycles + prefill.kernels * 1000


def test_runtime_set_to_zero_gives_the_hardware_figures(plain) -> None:
    from serving.run import serve

    zeroed = runtime(launch=3, collective=5, host=70).with_overrides(
        {"runtime.kernel_launch_us": 0, "runtime.collective_latency_us": 0,
         "runtime.host_step_us": 0})
    again = serve(SMALL, zeroed, Request(batch=1, prefill=16, decode=2), Parallelism(tp=2))
    assert again.pipeline.result.total_cycles == plain.pipeline.result.total_cycles
    assert again.pipeline.ttft_cycles == plain.pipeline.ttft_cycles
    assert [s.cycles for s in again.pipeline.decode[-1]] == \
        [s.cycles for s in plain.pipeline.decode[-1]]


def test_the_report_json_and_trace_show_the_runtime_as_its_own_category() -> None:
    from reports.llm import llm_json, llm_table, llm_trace
    from serving.run import serve

    result = serve(SMALL, runtime(launch=1, collective=2, host=30),
                   Request(batch=1, prefill=16, decode=2), Parallelism(tp=2))
    table = llm_table(result)
    assert "runtime overhead" in table and "of a decode step" in table
    data = llm_json(result)["runtime"]
    assert data["config"] == {"kernel_order": "overlapped", "conv_taps": "packed",
                              "kernel_launch_us": 1.0, "collective_latency_us": 2.0,
                              "host_step_us": 30.0, "op_dispatch_us": 0.0}
    decode = data["breakdown_s"]["decode"]
    step = decode.pop("step")
    assert sum(decode.values()) == pytest.approx(step)
    assert decode["host"] == pytest.approx(30e-6)
    counts = data["per_decode_step"]
    assert decode["runtime overhead"] == pytest.approx(
        (counts["kernels"] * 1000 + counts["collectives"] * 2000) / 1e9, rel=1e-6)
    events = llm_trace(result)["traceEvents"]
    assert any(e.get("cat") == "runtime" for e in events)
    assert sum(e.get("cat") == "host" for e in events) == 3  # prefill and 2 decode steps


def test_the_table_keeps_sub_millisecond_times_readable() -> None:
    # A small model on atom: its rooflines are a few us, and read "0.00 ms" beside a
    # ratio of 20x; "1 micro-batches" on two chips.
    import re

    from reports.llm import llm_table
    from serving.run import serve

    result = serve(SMALL, load_config("atom"), Request(batch=1, prefill=16, decode=2),
                   Parallelism(tp=2))
    table = llm_table(result)
    assert "(tp 2, pp 1, 1 micro-batch)" in table
    scale = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    for label, simulated, roofline in (("TTFT", result.ttft_s, result.roofline.prefill_s),
                                       ("TPOT", result.tpot_s, result.roofline.tpot_s)):
        assert roofline < 1e-3  # the case this is about
        row = next(line for line in table.splitlines() if line.strip().startswith(label))
        cells = re.findall(r"([\d.]+) (ms|us|ns)", row)
        shown = [float(v) * scale[unit] for v, unit in cells]
        assert shown == pytest.approx([simulated, roofline], rel=0.01)
