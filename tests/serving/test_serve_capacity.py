"""``archsim serve --cheapest`` (issue 31): candidates tried from the cheapest up with
the same arrivals, the first meeting the SLOs wins, the rest are not tried; what cannot
be split or does not fit is listed with its reason. Iteration times are injected (a
chip count divides a step's time), so every outcome is derived by hand."""

from __future__ import annotations

import json

import pytest

from archsim.cli import main
from archsim.config import load_config
from archsim.errors import ModelConfigError
from serving.capacity import cheapest
from serving.metrics import Slo
from serving.spec import spec_from_config
from serving.workload import Arrival

SMALL_CONFIG = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2,
                "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256}
SMALL = spec_from_config(SMALL_CONFIG, "small")
TINY, EDGE = load_config("tiny"), load_config("edge")
ONE = [Arrival(0, 0.0, 4, 3)]  # one request: a 4-token prompt, 3 tokens out


def step_time(config, chips: int):
    """A decode step takes 40 ms on one tiny chip, split evenly over chips; edge is
    twice as slow. Prefill: 10 ms."""
    slow = 2.0 if config.name == "edge" else 1.0

    def timing(prefill: int, seqs: int, context: float, chunks: tuple = ()) -> float:
        return slow * (0.01 if prefill else 0.04) / chips
    return timing


def test_the_first_candidate_meeting_the_slo_wins_the_rest_are_not_tried() -> None:
    # TPOT on n tiny chips = 40/n ms (edge: 80/n); SLO 15 ms: tiny needs 4 chips
    found, tried = cheapest(SMALL, [TINY, EDGE], (1, 2, 4), ONE,
                            Slo(ttft_ms=None, tpot_ms=15.0), timing=step_time)
    assert [(c.config.name, c.chips, c.status) for c in tried] == [
        ("tiny", 1, "misses"), ("edge", 1, "misses"), ("tiny", 2, "misses"),
        ("edge", 2, "misses"), ("tiny", 4, "meets"), ("edge", 4, "not tried")]
    assert (found.config.name, found.chips, found.cost) == ("tiny", 4, 4.0)


def test_area_cost_orders_by_silicon() -> None:
    from archsim.area import area_mm2

    found, tried = cheapest(SMALL, [TINY, EDGE], (1, 2), ONE, Slo(None, 100.0),
                            cost="area", timing=step_time)
    areas = {c.name: sum(area_mm2(c).values()) for c in (TINY, EDGE)}
    assert [c.cost for c in tried] == sorted(c.cost for c in tried)
    assert tried[0].cost == min(areas.values()) and found is tried[0]


def test_chip_counts_the_model_cannot_split_are_listed_with_why() -> None:
    found, tried = cheapest(SMALL, [TINY], (3, 2), ONE, Slo(None, 100.0), timing=step_time)
    assert tried[0].chips == 2 and tried[0].met  # cost order: 2 before 3
    assert tried[1].status == "not tried"
    found, tried = cheapest(SMALL, [TINY], (3,), ONE, Slo(None, 100.0), timing=step_time)
    assert found is None
    assert tried[0].status == "small: --tp 3 does not divide its 4 attention heads"


def test_it_needs_an_slo_and_a_known_cost() -> None:
    with pytest.raises(ModelConfigError, match="--cheapest needs an SLO"):
        cheapest(SMALL, [TINY], (1,), ONE, Slo(None, None))
    with pytest.raises(ModelConfigError, match="unknown cost 'gold': expected one of chips"):
        cheapest(SMALL, [TINY], (1,), ONE, Slo(None, 1.0), cost="gold")


def test_cli_prints_the_search_and_writes_json(tmp_path, capsys) -> None:
    model = tmp_path / "small"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(SMALL_CONFIG))
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,12,3\n")
    out = tmp_path / "cheapest.json"
    code = main(["serve", str(model), "--config", "tiny", "--trace", str(trace),
                 "--max-num-batched-tokens", "64", "--slo-tpot", "1000", "--cheapest",
                 "--search-chips", "1", "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "cheapest: tiny x 1 (1.0 chips)" in text
    data = json.loads(out.read_text())
    assert data["cheapest"]["config"] == "tiny" and data["candidates"][0]["status"] == "meets"


def test_cli_with_no_candidate_simulated_says_so(tmp_path, capsys) -> None:
    # Only a chip count the model cannot split: the table named the percentile "p?"
    # (taken from a simulated candidate) and ended "no candidate meets the SLOs".
    model = tmp_path / "small"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(SMALL_CONFIG))
    code = main(["serve", str(model), "--config", "tiny", "--requests", "2",
                 "--prompt-tokens", "8", "--output-tokens", "2", "--slo-tpot", "1000",
                 "--cheapest", "--search-chips", "3"])
    assert code == 1
    text = capsys.readouterr().out
    assert "p?" not in text and "meeting the SLOs at p90" in text and "TPOT p90 ms" in text
    assert text.rstrip().endswith("no candidate meets the SLOs: none could serve the "
                                  "model, so none was simulated (each one's reason above)")
