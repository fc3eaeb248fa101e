"""Mixture-of-experts models and SegFormer through ``archsim run`` and ``archsim.estimate``
(issue 11), with tiny random-weight configs: no host work on either door (the meta
export takes transformers' non-CPU branches: integer histc), CPU's numbers, and the
shapes-only estimate within 2% of the run (SegFormer exactly: one graph whatever the
strides). Plus the MoE pieces one at a time: the grouped matmul (uneven groups, an
empty expert, dense FLOPs reported as such), index_put, integer histc, bitwise_not."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import archsim
import compiler
from archsim.cli.main import main
from reports.critical_path import critical_path
from torch_bridge.shapes import meta_like as _meta_like
from torch_bridge.shapes import on_meta
from torch_bridge.model_outputs import Forward

T = pytest.importorskip("transformers")
import transformers.integrations.moe  # noqa: E402,F401  (registers grouped_mm_fallback)

PRESET = "tiny"
_LM = dict(num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
           vocab_size=500)
MODELS = {
    "mixtral": lambda: T.MixtralForCausalLM(T.MixtralConfig(
        **_LM, intermediate_size=128, num_local_experts=4, num_experts_per_tok=2)),
    "qwen2_moe": lambda: T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(
        **_LM, intermediate_size=128, moe_intermediate_size=32,
        shared_expert_intermediate_size=64, num_experts=4, num_experts_per_tok=2)),
    "qwen3_moe": lambda: T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(
        **_LM, intermediate_size=128, moe_intermediate_size=32, num_experts=4,
        num_experts_per_tok=2)),
    "olmoe": lambda: T.OlmoeForCausalLM(T.OlmoeConfig(
        **_LM, intermediate_size=32, num_experts=4, num_experts_per_tok=2)),
    # biased, stored transposed, interleaved gate/up (gate_up[..., ::2])
    "gpt_oss": lambda: T.GptOssForCausalLM(T.GptOssConfig(
        **_LM, intermediate_size=128, num_local_experts=4, num_experts_per_tok=2,
        head_dim=16)),
    # group-limited routing (~mask)
    "glm4_moe": lambda: T.Glm4MoeForCausalLM(T.Glm4MoeConfig(
        **_LM, intermediate_size=128, moe_intermediate_size=32, n_routed_experts=4,
        num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=0,
        head_dim=16)),
    "segformer": lambda: T.SegformerForSemanticSegmentation(T.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
        num_attention_heads=[1, 2], decoder_hidden_size=32, image_size=32)),
}


def _inputs(name: str) -> tuple[torch.Tensor]:
    if name == "segformer":
        return (torch.randn(1, 3, 32, 32),)
    return (torch.randint(0, 500, (1, 12)),)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_run_on_the_device_and_estimate_from_meta_agree(name: str) -> None:
    torch.manual_seed(0)
    model, inputs = MODELS[name]().eval(), _inputs(name)
    forward = Forward(model)
    with torch.no_grad():
        expected = forward(*inputs)
    config = archsim.load_config(PRESET)
    compiled = compiler.compile_graph(compiler.export_model(forward, inputs), config)
    outputs, run = compiled.run(*inputs)
    assert compiled.fallbacks == ()
    assert max(float((o - e).abs().max()) for o, e in zip(outputs, expected)) < 1e-4
    estimated = archsim.estimate(model, tuple(_meta_like(x) for x in inputs), config=PRESET)
    assert estimated.host_cycles == 0
    assert abs(estimated.total_cycles / run.total_cycles - 1) <= 0.02
    if name == "segformer":  # the same graph from both doors, but for one output's
        # memory format: exported from data, torch records the classifier's result
        # channels-last (its input is a permute of a channels-last map; eager CPU
        # happens to return it contiguous), from meta contiguous; archsim returns it
        # as the graph records it (compiler.layout)
        plain = compiler.CompileOptions(channels_last=False)
        from_meta = compiler.compile_graph(compiler.export_model(
            Forward(on_meta(model)), tuple(_meta_like(x) for x in inputs)), config, plain)
        from_data = compiler.compile_graph(compiler.export_model(forward, inputs), config,
                                           plain)
        assert from_meta.simulate().total_cycles == from_data.simulate().total_cycles
        assert compiled.outputs[0].perm == (0, 2, 3, 1) and outputs[0].is_contiguous(
            memory_format=torch.channels_last)


def test_archsim_run_of_a_mixtral_file_has_no_host_work(tmp_path: Path, capsys) -> None:
    path = tmp_path / "mixtral_model.py"
    path.write_text("import torch, transformers\n"
                    "torch.manual_seed(0)\n"
                    "model = transformers.MixtralForCausalLM(transformers.MixtralConfig("
                    "num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, "
                    "hidden_size=64, intermediate_size=128, vocab_size=500, "
                    "num_local_experts=4, num_experts_per_tok=2)).eval()\n"
                    "example_inputs = (torch.randint(0, 500, (1, 12)),)\n")
    assert main(["run", str(path), "--config", PRESET]) == 0
    out, err = capsys.readouterr()
    assert "Host work: none" in out
    assert "Traceback" not in err


class GroupedMM(torch.nn.Module):
    def __init__(self, experts: int, k: int, n: int, transposed: bool) -> None:
        super().__init__()
        shape = (experts, n, k) if transposed else (experts, k, n)
        self.weight = torch.nn.Parameter(torch.randn(shape))
        self.transposed = transposed

    def forward(self, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        weight = self.weight.transpose(-2, -1) if self.transposed else self.weight
        return torch.ops.transformers.grouped_mm_fallback(x, weight, offs)


@pytest.mark.parametrize("transposed", [False, True])
def test_grouped_mm_matches_cpu_with_dense_flops(transposed: bool) -> None:
    torch.manual_seed(0)
    experts, rows, k, n = 4, 10, 8, 6
    module = GroupedMM(experts, k, n, transposed).eval()
    x = torch.randn(rows, k)
    offs = torch.tensor([3, 3, 7, 9], dtype=torch.int32)  # expert 1 empty, row 9 unowned
    with torch.no_grad():
        expected = module(x, offs)
    compiled = compiler.compile_graph(compiler.export_model(module, (x, offs)),
                                      archsim.load_config(PRESET))
    (out,), result = compiled.run(x, offs)
    assert compiled.fallbacks == ()
    assert torch.allclose(out, expected, atol=1e-5)
    assert float(out[9].abs().max()) == 0.0
    assert result.matmul_flops == 2 * experts * rows * k * n  # every expert, every row


class InversePermutation(torch.nn.Module):
    def forward(self, perm: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.shape[0])
        added = torch.zeros(4, 3)
        added.index_put_((perm[:5] % 4,), rows, accumulate=True)
        return inverse, added


def test_index_put_matches_cpu() -> None:
    perm, rows = torch.randperm(7), torch.randn(5, 3)
    module = InversePermutation()
    expected = module(perm, rows)
    compiled = compiler.compile_graph(compiler.export_model(module, (perm, rows)),
                                      archsim.load_config(PRESET))
    outputs, _ = compiled.run(perm, rows)
    assert compiled.fallbacks == ()
    assert torch.equal(outputs[0], expected[0])
    assert torch.allclose(outputs[1], expected[1], atol=1e-6)


class IntegerHistogram(torch.nn.Module):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.histc(ids.int(), bins=4, min=0, max=3)


def test_integer_histc_on_meta_lowers() -> None:
    ids = torch.empty(24, dtype=torch.int64, device="meta")
    exported = compiler.export_model(IntegerHistogram(), (ids,))
    compiled = compiler.compile_graph(exported, archsim.load_config(PRESET))
    assert compiled.fallbacks == ()
    # the lowering runs several stages (the int cast, the bin compares, the count), handed
    # from one to the next through shared SRAM; each DRAM transfer on tiny pays DMA setup 10 + DRAM latency 20 + NoC
    # latency 5 before its bytes, so every one on the critical path takes 35 or more
    # (but one streamed behind the transfer before it, which counts from that one's
    # end), and the run at least one load-compute-store chain
    result = compiled.simulate()
    assert result.total_cycles >= (10 + 20 + 5) + 2 + (10 + 20 + 5)
    transfers = [s for s in critical_path(result).steps  # copies: through shared SRAM
                 if ".dma" in s.engine and s.via != "stream" and s.op != "copy"]
    assert transfers and all(s.cycles >= 10 + 20 + 5 for s in transfers), transfers


class BitwiseNot(torch.nn.Module):
    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return ~ids, ~mask


def test_bitwise_not_matches_cpu() -> None:
    ids, mask = torch.randint(-100, 100, (5, 7)), torch.rand(5, 7) > 0.5
    compiled = compiler.compile_graph(compiler.export_model(BitwiseNot(), (ids, mask)),
                                      archsim.load_config(PRESET))
    (inverted, flipped), _ = compiled.run(ids, mask)
    assert compiled.fallbacks == ()
    assert torch.equal(inverted, ~ids) and torch.equal(flipped, ~mask)
