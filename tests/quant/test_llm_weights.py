"""``archsim llm --weights int8`` (issue 30): weight-only int8 matmul weights in memory,
rooflines and the simulated blocks; activations and the KV cache keep their dtype."""

from __future__ import annotations

import json

import pytest

from archsim.cli import main
from archsim.config import load_config
from archsim.errors import ModelConfigError
from serving.plan import Parallelism, Request, check, memory_per_chip
from serving.roofline import weight_bytes
from serving.run import serve
from serving.spec import spec_from_config

TINY = load_config("tiny")
SMALL = spec_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2,
                          "intermediate_size": 128, "vocab_size": 100,
                          "max_position_embeddings": 64}, "small")
# a layer's matmul weights: q 64x64, k and v 64x32, o 64x64, gate/up/down 3 x 64x128
MATMUL = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128  # 36,864
NORMS = 2 * 64  # two RMSNorms a layer
HEAD = 100 * 64  # untied LM head
BF16 = Request(batch=1, prefill=8, decode=2)
INT8 = Request(batch=1, prefill=8, decode=2, weights="int8")


def test_roofline_weights_are_read_at_one_byte_each() -> None:
    assert weight_bytes(SMALL, BF16) == (2 * (MATMUL + NORMS) + HEAD + 64) * 2
    # matmul weights and the head at 1 byte; the norms (and final norm) in bf16
    assert weight_bytes(SMALL, INT8) == (2 * MATMUL + HEAD) + (2 * NORMS + 64) * 2


def test_memory_counts_packed_weights_and_their_scales() -> None:
    par = Parallelism()
    shard = check(SMALL, INT8, par)
    scales = 64 + 2 * 32 + 64 + 2 * 128 + 64  # one per output row: q, k, v, o, gate/up, down
    layer = MATMUL + NORMS * 2 + scales * 2
    embed = 100 * 64 * 2
    head = HEAD + 100 * 2  # the LM head is quantized too: a scale per vocabulary row
    assert memory_per_chip(SMALL, INT8, par, shard).weights == \
        2 * layer + embed + head + 64 * 2
    assert memory_per_chip(SMALL, BF16, par, shard).weights == \
        (2 * (MATMUL + NORMS) + HEAD + 64) * 2 + embed


@pytest.fixture(scope="module")
def pair():
    return serve(SMALL, TINY, BF16), serve(SMALL, TINY, INT8)


def test_int8_weights_never_below_the_packed_roofline(pair) -> None:
    bf16, int8 = pair
    assert int8.tpot_s >= int8.roofline.tpot_s
    assert int8.ttft_s >= int8.roofline.prefill_s
    weights = weight_bytes(SMALL, INT8)
    assert int8.roofline.decode_bytes[0] - weights == bf16.roofline.decode_bytes[0] - \
        weight_bytes(SMALL, BF16)  # the KV cache is read as before


def test_a_bandwidth_bound_decode_mlp_streams_half_the_bytes_faster() -> None:
    """One token through a 1024 -> 4096 -> 1024 MLP on tpu-v4: the weights dominate, so
    int8 halves the bytes; the arrays still shift in a 128x128 weight tile in 128
    cycles whatever its dtype, so time drops by less than the bytes (measured 0.82x)."""
    import torch

    from archsim.app.pipeline import run
    from archsim.app.workload import Workload
    from serving.quant import quantize_weights

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(1024, 4096, bias=False)
            self.down = torch.nn.Linear(4096, 1024, bias=False)

        def forward(self, x):
            return self.down(torch.relu(self.up(x)))

    x = torch.empty(1, 1, 1024, dtype=torch.bfloat16, device="meta")
    bf16_module = Mlp().to(device="meta", dtype=torch.bfloat16)
    int8_module = quantize_weights(Mlp().to(device="meta", dtype=torch.bfloat16), "int8",
                                   torch.bfloat16)
    bf16 = run(Workload.of_module(bf16_module, (x,)), "tpu-v4", mode="performance")
    int8 = run(Workload.of_module(int8_module, (x,)), "tpu-v4", mode="performance")
    weights = 2 * 1024 * 4096
    assert bf16.dram_bytes_read >= 2 * weights and int8.dram_bytes_read < 1.1 * weights
    assert int8.total_cycles < 0.9 * bf16.total_cycles


def test_cli_states_each_parts_precision(tmp_path, capsys) -> None:
    out = tmp_path / "llm.json"
    code = main(["llm", str(_config_file(tmp_path)), "--config", "tiny", "--prefill", "8",
                 "--decode", "2", "--weights", "int8", "--json", str(out)])
    assert code == 0
    assert "int8 weights, bf16 activations, bf16 KV cache" in capsys.readouterr().out
    assert json.loads(out.read_text())["weights"] == "int8"


def test_weight_only_needs_16_bit_activations() -> None:
    with pytest.raises(ModelConfigError, match="int8 weights take 16-bit activations"):
        check(SMALL, Request(dtype="f32", kv_dtype="f32", weights="int8"), Parallelism())


def _config_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64,
                                "num_hidden_layers": 2, "num_attention_heads": 4,
                                "num_key_value_heads": 2, "intermediate_size": 128,
                                "vocab_size": 100, "max_position_embeddings": 64}))
    return path
