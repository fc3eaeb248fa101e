"""A Hugging Face static KV cache (issue 11: caches exported, their tensors outputs): a
decoder called with a ``StaticCache`` runs on the device with no host work — the
cache update ``k.index_copy_(2, cache_position, new)`` is an index_put on the sequence
dim — with CPU's numbers, and ``archsim.estimate`` from meta agrees with the run."""

from __future__ import annotations

import pytest
import torch

import archsim
import compiler
from torch_bridge.shapes import meta_like as _meta_like
from torch_bridge.model_outputs import Forward

T = pytest.importorskip("transformers")

CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=100, max_position_embeddings=64)


class WithStaticCache(torch.nn.Module):
    """What a user's model file writes to run a decoder on a static cache."""

    def __init__(self) -> None:
        super().__init__()
        self.config = T.LlamaConfig(**CONFIG)
        self.lm = T.LlamaForCausalLM(self.config).eval()

    def forward(self, ids: torch.Tensor):
        cache = T.StaticCache(config=self.config, max_cache_len=32)
        return self.lm(ids, past_key_values=cache, use_cache=True)


def test_a_static_cache_runs_on_the_device_and_the_estimate_agrees() -> None:
    torch.manual_seed(0)
    model, ids = WithStaticCache().eval(), torch.randint(0, 100, (1, 8))
    forward = Forward(model)
    with torch.no_grad():
        expected = forward(ids)
    compiled = compiler.compile_graph(compiler.export_model(forward, (ids,)),
                                      archsim.load_config("tiny"))
    outputs, run = compiled.run(ids)
    assert compiled.fallbacks == ()
    assert len(outputs) == len(expected) == 1 + 2 * 2  # logits, keys and values per layer
    for out, want in zip(outputs, expected):
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
    estimated = archsim.estimate(model, (_meta_like(ids),), config="tiny")
    assert estimated.host_cycles == 0
    assert abs(estimated.total_cycles / run.total_cycles - 1) <= 0.02


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_put_on_one_dim_is_index_copy(dim: int) -> None:
    class IndexCopy(torch.nn.Module):
        def forward(self, x: torch.Tensor, index: torch.Tensor, new: torch.Tensor):
            return x.index_copy(dim, index, new)

    torch.manual_seed(0)
    x = torch.randn(3, 5, 6)
    index = torch.tensor([4, 1])
    new_shape = list(x.shape)
    new_shape[dim] = 2
    if dim == 0:
        index = torch.tensor([2, 0])
    new = torch.randn(new_shape)
    module = IndexCopy()
    compiled = compiler.compile_graph(compiler.export_model(module, (x, index, new)),
                                      archsim.load_config("tiny"))
    (out,), _ = compiled.run(x, index, new)
    assert compiled.fallbacks == ()
    torch.testing.assert_close(out, module(x, index, new))
