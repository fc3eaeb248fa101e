"""LLM serving end to end on small shapes: blocks compiled and simulated, composed
exactly, never below the rooflines; the CLI's table, JSON, trace and errors."""

from __future__ import annotations

import json

import pytest

from archsim.cli import main
from archsim.config import load_config
from serving.plan import Parallelism, Request
from serving.run import serve
from serving.spec import spec_from_config

TINY = load_config("tiny")
SMALL = spec_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2,
                          "intermediate_size": 128, "vocab_size": 100,
                          "max_position_embeddings": 64}, "small")


@pytest.fixture(scope="module")
def one_chip():
    return serve(SMALL, TINY, Request(batch=2, prefill=16, decode=3))


def test_one_chip_is_the_sum_of_its_simulated_stages(one_chip) -> None:
    import archsim  # noqa: F401  (the stages were simulated through archsim.estimate)

    # one chip: the stage (embedding, both layers, head) is one program per shape
    assert one_chip.simulated == (("embed+2 layers+head", 16, 0),
                                  ("embed+2 layers+head", 1, 17),
                                  ("embed+2 layers+head", 1, 19))
    prefill = one_chip.pipeline.prefill[0]
    spans = one_chip.pipeline.result.spans
    assert one_chip.pipeline.ttft_cycles == spans[0].end == prefill.cycles
    # the middle decode step is interpolated halfway between the first and the last
    first, middle, last = (s[0].cycles for s in one_chip.pipeline.decode)
    assert middle == round((first + last) / 2)
    assert one_chip.pipeline.result.total_cycles == prefill.cycles + first + middle + last


def test_never_below_the_rooflines(one_chip) -> None:
    assert one_chip.ttft_s >= one_chip.roofline.prefill_s
    assert one_chip.tpot_s >= one_chip.roofline.tpot_s
    assert one_chip.tokens_per_s == pytest.approx(2 * 3 / one_chip.decode_s)
    util = one_chip.utilization()
    assert 0 < util["hbm_decode"] <= 1 and 0 < util["matrix_prefill"] <= 1


def test_tensor_parallel_decode_is_faster_and_spends_time_in_collectives(one_chip) -> None:
    two = serve(SMALL, TINY, Request(batch=2, prefill=16, decode=3), Parallelism(tp=2))
    assert two.memory.weights < one_chip.memory.weights
    assert two.tpot_s < one_chip.tpot_s and two.ttft_s < one_chip.ttft_s
    assert two.utilization()["collectives"] > 0
    assert two.link_bytes > 0


def test_cli_table_json_and_trace(tmp_path, capsys) -> None:
    config = tmp_path / "small"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 100, "max_position_embeddings": 64}))
    out, trace = tmp_path / "r.json", tmp_path / "t.json"
    code = main(["llm", str(config), "--config", "tiny", "--prefill", "16", "--decode", "2",
                 "--pp", "2", "--batch", "2", "--json", str(out), "--trace", str(trace)])
    assert code == 0
    table = capsys.readouterr().out
    assert "small on tiny x 2 chips (tp 1, pp 2, 2 micro-batches)" in table
    assert "TTFT (prefill)" in table and "TPOT (mean decode step)" in table
    data = json.loads(out.read_text())
    assert {"ttft_s", "tpot_s", "tokens_per_s", "memory_bytes"} <= set(data)
    assert data["ttft_s"] >= data["roofline"]["ttft_s"] > 0
    names = {e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"]
             if e["name"] == "process_name"}
    assert names == {"chip 0", "chip 1"}
    passes = [e["name"] for e in json.loads(trace.read_text())["traceEvents"]
              if e.get("cat") == "compute" and e["pid"] == 2]
    assert passes[:2] == ["prefill, micro-batch 0, stage 1", "prefill, micro-batch 1, stage 1"]
    assert passes[-1] == "decode step 1, micro-batch 1, stage 1"


def test_cli_errors_are_one_line(capsys) -> None:
    assert main(["llm", "llama-2-70b", "--config", "tpu-v4", "--prefill", "2048"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("archsim: error: llama-2-70b needs 129.") and "\n" not in err
    assert err.endswith("split it over more chips, e.g. --tp 8 (--chips 8)")
    assert main(["llm", "llama-2-7b", "--chips", "4", "--tp", "2", "--pp", "3"]) == 1
    assert capsys.readouterr().err.strip() == \
        "archsim: error: --chips 4 is not --tp 2 x --pp 3 = 6"
    with pytest.raises(SystemExit):  # argparse's one line, as for run's sizes
        main(["llm", "llama-2-7b", "--tp", "0"])
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "archsim llm: error: argument --tp: expected a positive integer, got 0"


@pytest.mark.parametrize("flags, split", [
    (["--chips", "8"], (8, 1, 1)), (["--chips", "8", "--pp", "2"], (4, 2, 2)),
    (["--chips", "8", "--tp", "2"], (2, 4, 4)), (["--pp", "2", "--micro-batches", "8"], (1, 2, 8)),
])
def test_chips_fill_in_the_missing_split(flags: list[str], split: tuple) -> None:
    from archsim.cli.llm import parallelism
    from archsim.cli.main import build_parser

    args = build_parser().parse_args(["llm", "llama-2-7b", "--batch", "8", *flags])
    par = parallelism(args)
    assert (par.tp, par.pp, par.micro_batches) == split


def test_a_kv_cache_in_another_dtype_is_read_as_stored() -> None:
    # an f32 cache under bf16 compute: twice the cache bytes, and attention reads it as
    # f32 (the query is cast, not the cache), so decode is never faster than with bf16
    half = serve(SMALL, TINY, Request(batch=2, prefill=8, decode=1))
    full = serve(SMALL, TINY, Request(batch=2, prefill=8, decode=1, kv_dtype="f32"))
    assert full.memory.kv_cache == 2 * half.memory.kv_cache
    assert full.roofline.decode_bytes[0] - half.roofline.decode_bytes[0] == \
        2 * 2 * 9 * 64 * 2  # batch x layers x context x (K+V of 2 heads x 16) x 2 more bytes
    assert full.tpot_s >= half.tpot_s >= half.roofline.tpot_s


def test_interpolated_decode_steps_match_a_simulated_one() -> None:
    from serving.compose import Composer
    from serving.plan import check
    from serving.timing import Timer

    request = Request(batch=1, prefill=32, decode=16)  # contexts 33 ... 48
    shard = check(SMALL, request, Parallelism())
    composer = Composer(SMALL, request, Parallelism(), TINY,
                        Timer(SMALL, shard, request, 1, TINY))
    steps = composer.decode_stages()
    exact = composer.stage(0, 1, 40)  # step 7, interpolated above
    assert steps[7][0].cycles == pytest.approx(exact.cycles, rel=0.01)
    assert steps[7][0].cycles != exact.cycles  # it was interpolated, not simulated


def test_the_note_counts_the_layers_really_simulated(one_chip) -> None:
    # Two layers are simulated whole; it read "of 2 identical layers the first 3
    # simulated". A stack of 4 or more is simulated in its first 3 and extended.
    import dataclasses

    notes = " ".join(one_chip.notes())
    assert "its 2 layers all simulated (a stack of fewer than 4 is not extended)" in notes
    assert "first 3" not in notes
    deep = dataclasses.replace(one_chip, spec=dataclasses.replace(SMALL, layers=8))
    assert "of 8 identical layers the first 3 simulated, the others extended" in " ".join(
        deep.notes())


def test_without_a_decode_step_tpot_is_not_applicable(tmp_path) -> None:
    # --decode 0 read "TPOT 0 ns 0 ns 0.00x" and tokens/s 0.0: there is no decode step.
    from reports.llm import llm_json, llm_table

    result = serve(SMALL, TINY, Request(batch=1, prefill=16, decode=0))
    table = llm_table(result)
    tpot = next(line for line in table.splitlines() if "TPOT" in line)
    assert tpot.count("n/a") == 3 and tpot.endswith("(no decode step)")
    assert "0.00x" not in tpot
    assert "energy, decode" not in table and "no decode" in table
    data = llm_json(result)
    assert data["tpot_s"] is None and data["tokens_per_s"] is None
