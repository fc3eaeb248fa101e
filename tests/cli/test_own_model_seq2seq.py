"""A user's encoder-decoder model file: the inputs are positional with ``None`` for an
argument left at its default (``(input_ids, None, decoder_input_ids)``: no attention
mask), as a user writes them for ``model(*example_inputs)``. The ``None`` is bound into
the forward pass, not made a graph input (it crashed the compiler: "placeholder
args_1: needs a tensor")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from archsim.cli.main import main
from torch_bridge.model_outputs import bind_arguments

transformers = pytest.importorskip("transformers")

MODELS = {
    "t5": "T5ForConditionalGeneration(transformers.T5Config(num_layers=1, num_heads=2, "
          "d_model=32, d_kv=16, d_ff=64, vocab_size=100))",
    "whisper": "WhisperModel(transformers.WhisperConfig(encoder_layers=1, decoder_layers=1, "
               "encoder_attention_heads=2, decoder_attention_heads=2, d_model=32, "
               "encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8, "
               "max_source_positions=8, max_target_positions=16, vocab_size=100, "
               "pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1))",
}
INPUTS = {
    "t5": "(torch.randint(0, 100, (1, 10)), None, torch.randint(0, 100, (1, 6)))",
    "whisper": "(torch.randn(1, 8, 16), None, torch.randint(0, 100, (1, 6)))",
}


def _model_file(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}_model.py"
    path.write_text("import torch, transformers\n"
                    "torch.manual_seed(0)\n"
                    f"model = transformers.{MODELS[name]}.eval()\n"
                    f"example_inputs = {INPUTS[name]}\n")
    return path


@pytest.mark.parametrize("name", sorted(MODELS))
def test_an_encoder_decoder_file_with_a_skipped_argument_runs_and_estimates(
        name: str, tmp_path: Path, capsys) -> None:
    import archsim
    from reports.json_report import read_json

    path = _model_file(tmp_path, name)
    assert main(["run", str(path), "--config", "tiny", "--json", str(tmp_path / "r.json")]) == 0
    out, err = capsys.readouterr()
    assert "Host work: none" in out
    worst = float(re.search(r"max \|npu - torch cpu\| = (\S+)", err).group(1))
    assert worst < 1e-4, err
    namespace: dict = {}
    exec(path.read_text(), namespace)
    meta = tuple(x.to("meta") if isinstance(x, torch.Tensor) else x
                 for x in namespace["example_inputs"])
    estimated = archsim.estimate(namespace["model"], meta, config="tiny")
    run = read_json(tmp_path / "r.json").total_cycles
    assert abs(estimated.total_cycles / run - 1) <= 0.02


def test_bound_arguments_go_back_in_their_places() -> None:
    class Echo(torch.nn.Module):
        def forward(self, a, b=None, c=None, d=None):
            return a, b, c, d

    a, c = torch.ones(1), torch.zeros(1)
    forward, tensors = bind_arguments(Echo(), (a, None, c, 3))
    assert tensors == (a, c)
    assert forward.bound == {1: None, 3: 3}
    assert forward(*tensors) == (a, c)  # the tensors of (a, None, c, 3), in order
