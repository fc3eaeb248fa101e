"""One question, one answer: the same Llama-shaped prefill through every front door
(the built-in model, a model file, archsim.estimate, torch.compile, a transformers
config, archsim llm's prefill and a sweep point) gives one latency within 3% and one
count of matmul FLOPs.

The shape is the built-in ``llama-small`` (hidden 512, 8 query / 2 KV heads, SwiGLU
1376, vocabulary 1024) with 4 layers, so that performance-only doors simulate 3 and
extend the fourth while functional doors simulate all four."""

from __future__ import annotations

import json

import pytest
import torch

import archsim
import torch_bridge
from archsim.app import Workload, run
from archsim.app.models import Llama
from archsim.config import load_config
from archsim.sweep import sweep

PRESET, LAYERS, SEQ, DTYPE = "atom", 4, 64, "f16"
SHAPE = dict(hidden=512, heads=8, kv_heads=2, intermediate=1376, vocab=1024)
TOLERANCE = 0.03

MODEL_FILE = f"""
import torch
from archsim.app.models import Llama
torch.manual_seed(0)
model = Llama(layers={LAYERS}, **{SHAPE!r}).eval()
example_inputs = (torch.randint(0, {SHAPE['vocab']}, (1, {SEQ})),)
"""


def _hf_config() -> dict:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=SHAPE["hidden"], num_attention_heads=SHAPE["heads"],
        num_key_value_heads=SHAPE["kv_heads"], intermediate_size=SHAPE["intermediate"],
        vocab_size=SHAPE["vocab"], num_hidden_layers=LAYERS, rms_norm_eps=1e-5,
        max_position_embeddings=4 * SEQ, tie_word_embeddings=False)
    return config.to_dict()


@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, int]]:
    """(cycles, matmul FLOPs) of the prefill by each door."""
    tmp = tmp_path_factory.mktemp("doors")
    config = load_config(PRESET)
    found: dict[str, tuple[int, int]] = {}

    builtin = run(Workload.builtin("llama-small", layers=LAYERS, seq=SEQ, dtype=DTYPE), config,
                  mode="performance")
    assert builtin.layers is not None  # extended: 3 simulated, 1 extended
    found["built-in"] = (builtin.total_cycles, builtin.matmul_flops)

    path = tmp / "llama_file.py"
    path.write_text(MODEL_FILE)
    functional = run(Workload.file(path, dtype=DTYPE), config)  # numbers checked too
    assert functional.layers is None  # every layer simulated
    found["model file"] = (functional.total_cycles, functional.matmul_flops)

    torch.manual_seed(0)
    model = Llama(layers=LAYERS, **SHAPE).to(torch.float16).eval()
    ids = torch.randint(0, SHAPE["vocab"], (1, SEQ))
    estimated = archsim.estimate(model, ids, PRESET)
    found["estimate"] = (estimated.total_cycles, estimated.matmul_flops)

    torch._dynamo.reset()
    with torch_bridge.runtime.use_config(PRESET), torch.no_grad(), \
            torch_bridge.profile() as prof:
        logits = torch.compile(model, backend="archsim")(ids)
    torch._dynamo.reset()
    with torch.no_grad():  # the f16 attention runs as the device's kernel, not the
        expected = model(ids)  # host's f32 math path, and gives torch's numbers
    torch.testing.assert_close(logits, expected, rtol=2e-2, atol=2e-2)
    assert prof.result.host_cycles == 0
    found["torch.compile"] = (prof.result.device_cycles, functional.matmul_flops)

    config_json = tmp / "llama" / "config.json"
    config_json.parent.mkdir()
    config_json.write_text(json.dumps(_hf_config()))
    from serving.plan import Request
    from serving.run import serve

    served = serve(str(config_json), config, Request(1, SEQ, 1, "f16", "f16"))
    found["archsim llm prefill"] = (served.pipeline.ttft_cycles,
                                    served.pipeline.prefill[0].matmul_flops)

    hf = run(Workload.transformers(config_json, seq=SEQ, dtype=DTYPE), config)
    found["transformers config"] = (hf.total_cycles, hf.matmul_flops)

    point, = sweep("llama-small", config, {"dram.efficiency": [1.0]}, backend="serial",
                   seq=SEQ, layers=LAYERS, dtype=DTYPE)
    found["sweep point"] = (point.report.total_cycles, point.report.matmul_flops)
    return found


def test_every_door_gives_one_latency(doors: dict[str, tuple[int, int]]) -> None:
    reference = doors["built-in"][0]
    off = {door: f"{cycles / reference - 1:+.2%}" for door, (cycles, _) in doors.items()
           if abs(cycles / reference - 1) > TOLERANCE}
    assert not off, f"doors off the built-in model's {reference} cycles by more than 3%: {off}"


def test_one_pipeline_gives_identical_runs(doors: dict[str, tuple[int, int]]) -> None:
    # built-in, estimate and sweep point are the same performance-only pipeline
    assert doors["estimate"] == doors["built-in"] == doors["sweep point"]


def test_every_door_counts_the_same_matmul_work(doors: dict[str, tuple[int, int]]) -> None:
    flops = doors["built-in"][1]
    assert flops > 0
    for door in ("model file", "estimate", "archsim llm prefill", "sweep point"):
        assert doors[door][1] == flops, door
    # a plain transformers forward computes every token's logits, the others only the
    # last one's (what generation samples from): exactly the LM head on seq - 1 more rows
    head = 2 * (SEQ - 1) * SHAPE["hidden"] * SHAPE["vocab"]
    assert doors["transformers config"][1] == flops + head
