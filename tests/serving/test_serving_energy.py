"""Energy of an LLM serving run: each phase's simulated blocks' dynamic energy plus the
chips' static power over the phase, per generated token."""

from __future__ import annotations

import pytest

from archsim.area import static_power_w
from archsim.config import load_config
from serving.plan import Request
from serving.run import serve
from serving.spec import spec_from_config

TINY = load_config("tiny")
SMALL = spec_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2,
                          "intermediate_size": 128, "vocab_size": 100,
                          "max_position_embeddings": 64}, "small")


@pytest.fixture(scope="module")
def served():
    return serve(SMALL, TINY, Request(batch=2, prefill=16, decode=3))


def test_phase_energy_is_its_blocks_plus_static_power_over_its_time(served):
    static_w = sum(static_power_w(TINY).values())
    prefill = served.energy("prefill")
    stage = served.pipeline.prefill[0]
    assert prefill["dynamic_j"] == pytest.approx(stage.energy_j, rel=1e-12)
    assert prefill["static_j"] == pytest.approx(static_w * served.ttft_s, rel=1e-12)
    assert prefill["energy_per_token_j"] == pytest.approx(prefill["energy_j"] / (2 * 16))
    decode = served.energy("decode")
    steps = [s[0].energy_j for s in served.pipeline.decode]
    assert steps[1] == pytest.approx((steps[0] + steps[2]) / 2)  # interpolated step
    assert decode["dynamic_j"] == pytest.approx(sum(steps), rel=1e-12)
    assert decode["energy_per_token_j"] == pytest.approx(decode["energy_j"] / (2 * 3))
    assert decode["average_power_w"] == pytest.approx(decode["energy_j"] / served.decode_s)


def test_the_table_and_json_report_each_phase(served):
    from reports.llm import llm_json, llm_table

    decode = served.energy("decode")
    line = next(x for x in llm_table(served).splitlines() if "energy, decode" in x)
    assert line == (f"  energy, decode    {decode['energy_per_token_j'] * 1e3:.3f} mJ per token, "
                    f"{decode['average_power_w']:.1f} W per chip on average")
    assert llm_json(served)["energy"]["prefill"] == served.energy("prefill")
