"""Typed ``--kwarg NAME=VALUE`` for a model file's forward call, and ``use_cache=true``
on a Hugging Face decoder: the KV cache it writes is an output (timed as DRAM writes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archsim.cli.kwargs import kwarg, parse_value
from archsim.cli.main import main


@pytest.mark.parametrize("text, value", [
    ("true", True), ("False", False), ("none", None), ("null", None), ("3", 3),
    ("-2", -2), ("0.5", 0.5), ("1e-3", 1e-3), ("[1, 2]", [1, 2]), ('{"a": 1}', {"a": 1}),
    ('"true"', "true"), ("eager", "eager"), ("", ""),
])
def test_values_are_typed(text: str, value: object) -> None:
    parsed = parse_value(text)
    assert parsed == value and type(parsed) is type(value)


def test_bad_kwargs_are_usage_errors(capsys) -> None:
    for bad, message in [("use_cache", "expected NAME=VALUE"), ("1x=2", "expected NAME=VALUE"),
                         ("x=[1,", "'[1,' is not valid JSON")]:
        with pytest.raises(SystemExit) as exit_info:
            main(["run", "model.py", "--kwarg", bad])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
    assert kwarg(" use_cache =True") == ("use_cache", True)


def test_kwarg_is_for_model_files_only(capsys) -> None:
    assert main(["run", "gemm", "--kwarg", "use_cache=false"]) == 1
    assert capsys.readouterr().err.strip() == (
        "archsim: error: --kwarg applies to a model file (.py), not to 'gemm'")


def test_use_cache_true_writes_the_cache(tmp_path: Path, capsys) -> None:
    pytest.importorskip("transformers")
    model = tmp_path / "gpt2_model.py"
    model.write_text("import torch, transformers\ntorch.manual_seed(0)\n"
                     "model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, "
                     "n_head=4, n_embd=64, vocab_size=500, n_positions=64)).eval()\n"
                     "example_inputs = (torch.randint(0, 500, (1, 12)),)\n")
    written = {}
    for cache in ("false", "true"):
        out = tmp_path / f"{cache}.json"
        argv = ["run", str(model), "-c", "tiny", "--kwarg", f"use_cache={cache}", "--json",
                str(out)]
        assert main(argv) == 0
        err = capsys.readouterr().err
        outputs = 5 if cache == "true" else 1  # logits (+ keys and values of 2 layers)
        assert f"over {outputs} output(s)" in err
        assert float(err.split("max |npu - torch cpu| = ")[1].split()[0]) < 1e-4
        written[cache] = json.loads(out.read_text())["run"]["dram_bytes_written"]
    # the cache: 2 layers x (keys, values) x batch 1 x 4 heads x 12 positions x 16 x f32
    assert written["true"] - written["false"] == 2 * 2 * 4 * 12 * 16 * 4
