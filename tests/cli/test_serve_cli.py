"""``archsim serve`` end to end on a small model and the tiny preset: a trace in, the
table, JSON (per-request records consistent with the throughput), Perfetto trace and
figures out; a capacity search; bad input as one-line errors."""

from __future__ import annotations

import json

import pytest

from archsim.cli import main

SMALL = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
         "vocab_size": 100, "max_position_embeddings": 256}


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "small"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(SMALL))
    return str(path)


def test_trace_in_table_json_perfetto_and_figures_out(tmp_path, model, capsys) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,20,5\n0.0001,40,8\n"
                     "0.0002,12,3\n")
    out, perf, figs = tmp_path / "r.json", tmp_path / "p.json", tmp_path / "figs"
    code = main(["serve", model, "--config", "tiny", "--trace", str(trace),
                 "--max-num-batched-tokens", "64", "--slo-ttft", "10", "--slo-tpot", "10",
                 "--json", str(out), "--perfetto", str(perf), "--figures", str(figs)])
    assert code == 0
    table = capsys.readouterr().out
    assert "small on tiny x 1 chip: 3 requests, continuous batching" in table
    assert "TTFT" in table and "goodput" in table and "KV cache use" in table
    data = json.loads(out.read_text())
    recs = data["requests"]
    assert [(r["prompt_tokens"], r["output_tokens"]) for r in recs] == [(20, 5), (40, 8),
                                                                        (12, 3)]
    span = max(r["finish_s"] for r in recs) - min(r["arrival_s"] for r in recs)
    assert data["throughput_tokens_per_s"] == pytest.approx(16 / span)
    assert all(r["arrival_s"] < r["first_token_s"] <= r["finish_s"] for r in recs)
    assert {"mean", "p50", "p90", "p99"} <= set(data["ttft_s"])
    # queue length, batch size and KV-cache use over time, one entry per iteration
    steps = data["iterations"]
    assert sum(steps["tokens_out"]) == 16
    assert max(steps["kv_blocks"]) <= data["kv_blocks"]
    assert len(steps["waiting"]) == len(steps["time_s"])
    events = json.loads(perf.read_text())["traceEvents"]
    iterations = [e for e in events if e["ph"] == "X"]
    # 3 + 7 + 2 tokens after each first one: at least 7 decode iterations, plus prefill
    assert len(iterations) >= 8
    assert sum(e["args"]["tokens_out"] for e in iterations) == 16
    assert sorted(p.name for p in figs.iterdir()) == ["serve_latency_cdf.png",
                                                      "serve_over_time.png"]


def test_find_max_rate_prints_probes_and_the_rate(tmp_path, model, capsys) -> None:
    out = tmp_path / "r.json"
    code = main(["serve", model, "--config", "tiny", "--requests", "30",
                 "--prompt-tokens", "uniform:8:24", "--output-tokens", "4",
                 "--slo-ttft", "0.5", "--find-max-rate", "--rate", "1000",
                 "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "capacity search" in text and "max rate meeting the SLOs at p90" in text
    data = json.loads(out.read_text())
    met = [p["rate"] for p in data["probes"] if p["met"]]
    sustained = [p["rate"] for p in data["probes"] if p["met"] and p["kept_up"]]
    served = data["max_rate_served"]
    top = max(sustained)
    assert data["max_rate"] == (top if served is None else min(top, served))
    assert data["max_rate_capped"] == (data["max_rate"] < max(met))
    assert all(p["ttft_ms"] <= 0.5 for p in data["probes"] if p["met"])


def test_find_max_rate_with_slos_out_of_reach_says_so_at_once(tmp_path, model,
                                                             capsys) -> None:
    # A TTFT no request alone reaches: the search stops after the first probe and the
    # lowest load, naming the SLO and the best TTFT (was: halving to "0.000" req/s rows
    # and a last probe over years as the headline).
    out = tmp_path / "r.json"
    code = main(["serve", model, "--config", "tiny", "--requests", "5",
                 "--prompt-tokens", "16", "--output-tokens", "4", "--slo-ttft", "0.0001",
                 "--find-max-rate", "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    line = text.strip().splitlines()[-1]
    assert line.startswith("no rate meets the SLOs: TTFT p90 ")
    assert line.endswith("> --slo-ttft 0.0001 ms at the lowest load (each of 5 requests "
                         "alone)")
    data = json.loads(out.read_text())
    assert [p["rate"] for p in data["probes"]] == [1.0] and data["max_rate"] == 0.0
    assert not data["lowest_load"]["met"]
    assert f"TTFT p90 {data['lowest_load']['ttft_ms']:.3g} ms" in line


@pytest.mark.parametrize("extra, message", [
    (["--prompt-tokens", "zipf:1"], "length 'zipf:1' is not one of"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization must be in (0, 1]"),
    (["--find-max-rate"], "--find-max-rate needs an SLO"),
    # were taken: no request met a negative target, 0 ms met by none either
    (["--slo-ttft", "-5"], "--slo-ttft must be > 0 milliseconds, got -5.0"),
    (["--slo-tpot", "0"], "--slo-tpot must be > 0 milliseconds, got 0.0"),
    (["--slo-ttft", "nan"], "--slo-ttft must be > 0 milliseconds, got nan"),
    (["--slo-percentile", "0"], "--slo-percentile must be in (0, 100], got 0.0"),
    (["--rate", "0"], "--rate must be > 0 requests per second, got 0.0"),
    (["--prompt-tokens", "250", "--output-tokens", "10"],
     "request 0: 250 + 10 tokens exceed small's 256 positions"),
])
def test_bad_input_is_one_line(model, capsys, extra, message) -> None:
    code = main(["serve", model, "--config", "tiny", "--requests", "2", *extra])
    assert code != 0
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_synthetic_options_with_a_trace_are_refused(tmp_path, capsys) -> None:
    # --rate with --trace was ignored without a word (the trace gives the arrivals).
    from archsim.cli.main import main

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,16,4\n")
    assert main(["serve", "llama-2-7b", "--trace", str(trace), "--rate", "2"]) != 0
    err = capsys.readouterr().err
    assert err.strip() == (f"archsim: error: --rate shapes synthetic arrivals; --trace "
                           f"{trace} gives the requests (use one or the other)")


@pytest.mark.parametrize("command", [["llm", "--prefill", "8", "--decode", "2"],
                                     ["serve", "--requests", "2"]])
@pytest.mark.parametrize("split", [["--tp", "2"], ["--pp", "2"]])
def test_several_chips_of_a_config_without_links_is_one_line(tmp_path, model, capsys,
                                                              command, split) -> None:
    # was: AttributeError 'NoneType' object has no attribute 'latency_cycles' (compose.py)
    import yaml

    from archsim.config import config_to_dict, load_config

    data = config_to_dict(load_config("tiny"))
    del data["interconnect"]
    solo = tmp_path / "solo.yaml"
    solo.write_text(yaml.safe_dump(data))
    code = main([command[0], model, "--config", str(solo), *command[1:], *split])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("archsim: error: tiny has no chip-to-chip links (no interconnect: "
                          "section), so it cannot run on 2 chips")
    assert "add an interconnect: section" in err and len(err.strip().splitlines()) == 1


def test_find_max_rate_of_a_burst_says_the_rate_is_not_determined(tmp_path, model,
                                                                  capsys) -> None:
    # 2 requests meeting a generous SLO even arriving together: the search printed a
    # rate of 2**23 requests/s (doubling to its 24th probe) over a 2-request throughput.
    out = tmp_path / "r.json"
    code = main(["serve", model, "--config", "tiny", "--requests", "2", "--prompt-tokens",
                 "8", "--output-tokens", "2", "--slo-ttft", "1000", "--find-max-rate",
                 "--json", str(out)])
    assert code == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("max rate not determined: all 2 requests meet the SLOs at p90 "
                           "even arriving at once (probed up to ")
    data = json.loads(out.read_text())
    assert data["max_rate"] is None and data["max_rate_text"] == last
    assert len(data["probes"]) < 24


def test_one_output_token_has_no_tpot_or_inter_token_latency(tmp_path, model,
                                                             capsys) -> None:
    # --output-tokens 1: TPOT and inter-token percentiles read 0 (no decode step).
    out = tmp_path / "r.json"
    assert main(["serve", model, "--config", "tiny", "--requests", "3", "--prompt-tokens",
                 "8", "--output-tokens", "1", "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in ("TPOT", "inter-token"):
        row = next(line for line in lines if line.strip().startswith(name))
        assert row.count("n/a") == 4, row
        assert "(no decode step" in row
    data = json.loads(out.read_text())
    assert data["tpot_s"] is None and data["itl_s"] is None
    assert data["ttft_s"]["p50"] > 0
