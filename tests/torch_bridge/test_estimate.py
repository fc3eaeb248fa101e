"""``archsim.estimate``: performance-only latency from shapes, equal to simulating the
compiled program; runs on meta Llama-shaped models without allocating weights."""

from __future__ import annotations

import torch
from torch import nn

import archsim
import compiler
from archsim.app.models import Llama
from archsim.config import load_config


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))


class TestEstimate:
    def test_equals_simulating_the_compiled_program(self) -> None:
        model, x = mlp(), torch.randn(4, 16)
        got = archsim.estimate(model, x, config="tpu-v3")
        with torch.device("meta"):
            meta_model, meta_x = mlp(), torch.empty(4, 16)
        exported = torch.export.export(meta_model, (meta_x,)).run_decompositions(
            compiler.export_decompositions())
        want = compiler.compile_graph(exported, load_config("tpu-v3")).simulate()
        assert not got.functional
        assert got.total_cycles == want.total_cycles > 0
        assert dict(got.engine_busy_cycles) == dict(want.engine_busy_cycles)
        assert got.matmul_flops == 2 * 4 * (16 * 32 + 32 * 8)

    def test_cycles_equal_a_functional_run(self) -> None:
        model, x = mlp(), torch.randn(4, 16)
        estimate = archsim.estimate(model, x)
        exported = torch.export.export(model, (x,)).run_decompositions()
        state = exported.state_dict
        inputs = [state[s.target] if s.target in state else x
                  for s in exported.graph_signature.input_specs]
        outputs, result = compiler.compile_graph(exported, load_config("atom")).run(*inputs)
        assert estimate.total_cycles == result.total_cycles
        torch.testing.assert_close(outputs[0], model(x).detach())

    def test_model_is_left_untouched(self) -> None:
        model = mlp()
        before = [p.detach().clone() for p in model.parameters()]
        archsim.estimate(model, torch.randn(2, 16))
        assert all(p.device.type == "cpu" for p in model.parameters())
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))

    def test_llama_7b_shaped_layers_on_meta(self) -> None:
        with torch.device("meta"):  # 7B shapes (hidden 4096, SwiGLU 11008), 2 of 32 layers
            model = Llama(layers=2, all_logits=True).to(torch.float16)
            ids = torch.zeros(1, 32, dtype=torch.long)
        result = archsim.estimate(model, ids, config="atom")
        # every weight but the embedding table (gathered) and the 5 norms is a matmul's
        weights = sum(p.numel() for p in model.parameters()) - model.embed.weight.numel()
        # 32 tokens against 536M f16 weights is memory-bound: every weight (2 B) crosses
        # atom's DRAM once, 8 channels x 32 GB/s at 1 GHz = 256 B/cycle (1.07 GB: 4.19M
        # cycles; the matmuls' 34 GFLOP at 32768 FLOP/cycle are only 1.05M). That floor
        # and twice it bound the estimate.
        floor = weights * 2 / 256
        assert floor <= result.total_cycles < 2 * floor
        assert result.matmul_flops >= 2 * 32 * (weights - 4096 * 5)  # every weight is used
        assert result.dram_bytes_read >= 2 * (weights - 4096 * 5)  # f16 weights read once
