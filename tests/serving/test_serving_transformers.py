"""The same decode step through PyTorch: a transformers Llama with a KV cache
(``DynamicCache``), one generated token, through ``archsim.estimate``, agrees with
what ``archsim llm`` composes for the same shapes."""

from __future__ import annotations

import pytest
import torch

import archsim
from archsim.config import load_config
from compiler.ir.ops import HostOp
from serving.compose import Composer
from serving.plan import Parallelism, Request, check
from serving.spec import spec_from_config
from serving.timing import Timer

transformers = pytest.importorskip("transformers")

CONTEXT = 64


class DecodeStep(torch.nn.Module):
    """One token through the model with ``CONTEXT`` cached tokens per layer."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, keys: list[torch.Tensor],
                values: list[torch.Tensor]) -> torch.Tensor:
        cache = transformers.DynamicCache(config=self.model.config)
        for layer, (k, v) in enumerate(zip(keys, values)):
            cache.update(k, v, layer)
        return self.model(input_ids=ids, past_key_values=cache, use_cache=True).logits


def test_transformers_decode_step_agrees_with_archsim_llm() -> None:
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=1000,
                                      max_position_embeddings=256)
    config._attn_implementation = "sdpa"
    npu = load_config("tiny")
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
        ids = torch.zeros(1, 1, dtype=torch.long)
        cached = [torch.empty(1, 2, CONTEXT, 64, dtype=torch.bfloat16) for _ in range(2)]
    through_torch = archsim.estimate(DecodeStep(model), (ids, cached, cached), npu)
    assert not any(isinstance(c.op, HostOp) for c in through_torch.program.commands)

    spec = spec_from_config(config.to_dict(), "llama-small")
    request = Request(batch=1, prefill=CONTEXT, decode=1)
    shard = check(spec, request, Parallelism())
    composer = Composer(spec, request, Parallelism(), npu, Timer(spec, shard, request, 1, npu))
    step = composer.stage(0, 1, CONTEXT + 1)
    # same matmuls (the cache concatenation and mask building are vector work);
    # transformers also copies the cache into a concatenated one, so it is slower
    assert through_torch.matmul_flops == pytest.approx(step.matmul_flops, rel=0.02)
    assert step.cycles <= through_torch.total_cycles <= 1.15 * step.cycles
