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
    # rotary over every dim: an empty pass-through slice concatenated
    "phi3": "Phi3ForCausalLM(transformers.Phi3Config(num_hidden_layers=2, "
            "num_attention_heads=4, num_key_value_heads=2, hidden_size=64, "
            "intermediate_size=128, vocab_size=500, pad_token_id=0))",
    # fused QKV split by index lists written in the model (qkv[..., [-2], :])
    "falcon": "FalconForCausalLM(transformers.FalconConfig(num_hidden_layers=2, "
              "num_attention_heads=4, hidden_size=64, vocab_size=500))",
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
    out, err = capsys.readouterr()
    assert "Host work: none" in out
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
    # matmuls with 12 tokens: 2 layers of q, o (64x64), k, v (64x32), gate, up, down
    # (64x128) and the 64x500 head: 2 x 12 x 105728 weights; attention QK^T and PV:
    # 2 x 12 x 12 x 16 each, per head (4) and layer (2)
    assert result.matmul_flops == 2 * 12 * 105728 + 2 * 2 * 4 * (2 * 12 * 12 * 16)
    # tiny's 4x4 ws arrays: every matmul streams T = 12 tokens, so a fold (4x4 weights,
    # 192 MACs) takes 2R + C + T - 2 = 22 cycles, and every dimension here is a multiple
    # of 4 (no partial folds): the two arrays are busy 22 cycles per 192 MACs in all
    mxu_busy = sum(v for k, v in result.engine_busy_cycles.items() if ".mxu" in k)
    assert mxu_busy == result.matmul_flops // 2 // 192 * 22
    # the run is no shorter than its busier array is busy, and the loads, stores and
    # vector work around the matmuls take less than that again
    floor = mxu_busy / 2
    assert floor <= result.total_cycles < 2 * floor
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


def _cycles(out: str) -> int:
    return int(re.search(r"latency\s+([\d,]+) cycles", out).group(1).replace(",", ""))


def test_a_performance_run_simulates_three_layers_of_a_stack_and_says_so(capsys) -> None:
    argv = ["run", "gpt2", "--layers", "6", "--seq", "32", "--perf-only", "--config", "tiny"]
    assert main(argv) == 0
    part = capsys.readouterr().out
    assert "gpt2 b1 s32 f32, 6 of 12 layers (3 simulated, 3 extended) on tiny" in part
    assert re.search(r"\n  layers +3 of 6 simulated, 3 extended at [\d,]+ cycles each\n", part)
    assert main([*argv, "--all-layers"]) == 0
    whole = capsys.readouterr().out
    assert "gpt2 b1 s32 f32, 6 of 12 layers simulated on tiny" in whole
    assert _cycles(part) == pytest.approx(_cycles(whole), rel=0.01)


def test_a_model_file_run_performance_only_agrees_with_estimate(tmp_path: Path,
                                                                 capsys) -> None:
    import archsim

    path = tmp_path / "deep.py"
    path.write_text("import torch, transformers\n"
                    "config = transformers.GPT2Config(n_layer=6, n_head=4, n_embd=64,\n"
                    "    vocab_size=500, n_positions=64, bos_token_id=0, eos_token_id=0)\n"
                    "with torch.device('meta'):\n"
                    "    model = transformers.GPT2LMHeadModel(config).eval()\n"
                    "example_inputs = (torch.zeros(1, 16, dtype=torch.long, "
                    "device='meta'),)\n")
    assert main(["run", str(path), "--config", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "(3 simulated, 3 extended)" in out
    namespace: dict = {}
    exec(path.read_text(), namespace)
    estimate = archsim.estimate(namespace["model"], namespace["example_inputs"], "tiny")
    assert estimate.layers is not None and estimate.layers.simulated == 3
    assert _cycles(out) == estimate.total_cycles
