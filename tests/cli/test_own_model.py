"""``archsim run my_model.py`` and ``archsim.estimate`` on a user's own Hugging Face
models, built from small configs (no downloads) with their default settings: decoders
return a KV cache object (``use_cache=True``), encoders a ``ModelOutput``, Llama's
rotary embedding runs in a no-grad region (a higher-order op in the exported graph)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from archsim.cli.main import main

transformers = pytest.importorskip("transformers")

MODELS = {
    "gpt2": "GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, "
            "vocab_size=500, n_positions=64))",
    "llama": "LlamaForCausalLM(transformers.LlamaConfig(num_hidden_layers=2, "
             "num_attention_heads=4, num_key_value_heads=2, hidden_size=64, "
             "intermediate_size=128, vocab_size=500))",
    "bert": "BertModel(transformers.BertConfig(num_hidden_layers=2, num_attention_heads=4, "
            "hidden_size=64, intermediate_size=128, vocab_size=500))",
}


def _model_file(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}_model.py"
    path.write_text("import torch, transformers\n"
                    "torch.manual_seed(0)\n"
                    f"model = transformers.{MODELS[name]}.eval()\n"
                    "example_inputs = (torch.randint(0, 500, (1, 12)),)\n")
    return path


@pytest.mark.parametrize("name", sorted(MODELS))
def test_run_a_model_file_with_default_settings(name: str, tmp_path: Path, capsys) -> None:
    assert main(["run", str(_model_file(tmp_path, name)), "--config", "tiny"]) == 0
    err = capsys.readouterr().err
    worst = float(re.search(r"max \|npu - torch cpu\| = (\S+)", err).group(1))
    assert worst < 1e-3, err


def test_estimate_a_decoder_with_its_cache_default() -> None:
    import archsim
    from torch_bridge.model_outputs import Forward

    torch.manual_seed(0)
    config = transformers.LlamaConfig(num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, hidden_size=64,
                                      intermediate_size=128, vocab_size=500)
    model = transformers.LlamaForCausalLM(config).eval()
    assert model.config.use_cache  # the default a user gets
    ids = torch.randint(0, 500, (1, 12))
    result = archsim.estimate(model, ids, config="tiny")
    assert result.total_cycles > 0 and result.matmul_flops > 0
    logits, = Forward(model)(ids)  # what was timed: one forward pass, logits only
    assert logits.shape == (1, 12, 500)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_run_and_estimate_give_the_same_cycles(name: str, tmp_path: Path, capsys) -> None:
    """One export pipeline (compiler.export_model) behind both paths: the functional run
    of the file and the shapes-only estimate time the same graph."""
    import archsim
    from reports.json_report import read_json

    path = _model_file(tmp_path, name)
    assert main(["run", str(path), "--config", "tiny", "-q",
                 "--json", str(tmp_path / "r.json")]) == 0
    namespace: dict = {}
    exec(path.read_text(), namespace)
    estimated = archsim.estimate(namespace["model"], namespace["example_inputs"],
                                 config="tiny")
    assert read_json(tmp_path / "r.json").total_cycles == estimated.total_cycles
