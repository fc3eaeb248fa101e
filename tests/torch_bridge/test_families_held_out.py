"""Families from the second held-out sweep that needed fixes, tiny random configs (no
downloads): Wav2Vec2 (group norm, 1-D convolutions through reshapes), Funnel (ceil-mode
pooling of a reshape), PoolFormer (GroupNorm(1, C)). Each compiles with no host work,
matches torch on CPU, and ``archsim.estimate`` on meta tensors agrees with the run."""

from __future__ import annotations

import pytest
import torch

import archsim
import compiler
from torch_bridge.model_outputs import bind_arguments

T = pytest.importorskip("transformers")

FAMILIES = {
    "wav2vec2": lambda: (T.Wav2Vec2Model(T.Wav2Vec2Config(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)),
        (torch.randn(1, 400),)),
    "funnel": lambda: (T.FunnelModel(T.FunnelConfig(
        d_model=32, d_inner=64, n_head=2, d_head=16, block_sizes=[1, 1], vocab_size=100)),
        (torch.randint(0, 100, (1, 7)),)),
    "poolformer": lambda: (T.PoolFormerModel(T.PoolFormerConfig(
        hidden_sizes=[16, 32], depths=[1, 1], num_encoder_blocks=2, patch_sizes=[7, 3],
        strides=[4, 2], padding=[2, 1], num_attention_heads=[1, 2])),
        (torch.randn(1, 3, 32, 32),)),
}
PRESET = "tiny"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_runs_on_the_device_matches_cpu_and_the_estimate(name: str) -> None:
    torch.manual_seed(0)
    model, inputs = FAMILIES[name]()
    forward, tensors = bind_arguments(model.eval(), inputs)
    compiled = compiler.compile_graph(compiler.export_model(forward, tensors),
                                      archsim.load_config(PRESET))
    assert compiled.fallbacks == ()
    outputs, run = compiled.run(*tensors)
    with torch.no_grad():
        expected = forward(*tensors)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    meta = tuple(x.to("meta") for x in inputs)
    estimated = archsim.estimate(model, meta, config=PRESET)
    assert abs(estimated.total_cycles / run.total_cycles - 1) <= 0.02
