"""A norm after a residual add is one vector pass over the scratchpad (issue 32): the
scaling by ``rsqrt(mean)`` reads the reduction's result in the reduction's own kernel
(SinkViewsPass sinks a view below it when its other view input only adds leading unit
dims), and a norm after a matmul's residual add starts its own pass from the residual
sum (FusionPass keeps the norm's cast and square out of the matmul's epilogue), with
torch's numbers."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import compiler
from archsim.app.models import RMSNorm
from archsim.config import load_config
from compiler.ir.ops import Store
from serving.layers import GemmaRMSNorm

TINY = load_config("tiny")


class AddNorm(nn.Module):
    """A residual add viewed with a leading batch dim (as a layer's [B, T, H] stream),
    then normalized: the norm's views are what split it before."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm = RMSNorm(hidden)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = (x + r).view(1, *x.shape)
        return h, self.norm(h)


class OutputNorm(nn.Module):
    """Attention's output projection, the residual add, the MLP's norm and its first
    projection (a decode layer's middle); the residual sum is read again later (here:
    an output)."""

    def __init__(self, hidden: int, norm: Callable[[int], nn.Module]) -> None:
        super().__init__()
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.norm = norm(hidden)
        self.gate = nn.Linear(hidden, 2 * hidden, bias=False)

    def forward(self, attn: torch.Tensor, x: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        h = x + self.o(attn)
        return h, self.gate(self.norm(h))


class BertOutput(nn.Module):
    """BERT's dense, bias, residual add and LayerNorm: the sum is read only by the
    norm."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, attn: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.dense(attn))


def _compile(model: nn.Module, args: tuple[torch.Tensor, ...]):
    exported = torch.export.export(model.eval(), args).run_decompositions()
    return compiler.compile_graph(exported, TINY)


def test_a_residual_add_and_rmsnorm_are_one_kernel_with_hand_derived_cycles() -> None:
    torch.manual_seed(0)
    model = AddNorm(8)
    with torch.no_grad():
        model.norm.weight.copy_(torch.randn(8))
    x, r = torch.randn(2, 8), torch.randn(2, 8)
    compiled = _compile(model, (x, r))
    outs, result = compiled.run(x, r)
    for got, want in zip(outs, model(x, r)):
        assert torch.equal(got, want)
    assert compiled.kernels == ("add",)  # was 2: the scaling by rsqrt a kernel of its own
    # tiny: a transfer's fixed cost is 35 cycles (10 DMA setup + 20 DRAM + 5 NoC), DRAM
    # one 16 B/cycle channel, 2 DMA engines; the vector unit does 4 lanes a cycle after
    # a 2-cycle pipeline latency, a transcendental 4 cycles a lane, a reduction log2(n)
    # more. x (dma0) and r (dma1), 64 B each, share the channel: 35 + 128 / 16 = 43;
    # the weight (32 B) queues behind x: 43 + 35 + 2 = 80. The add (2 + 16 / 4 = 6, ends
    # 49), square (55), mean (2 + 4 + 3 = 9: 64), + eps on two values (2 + 1 = 3: 67),
    # rsqrt (2 + 4 = 6: 73), * rsqrt (79); * weight waits for the weight (80 + 6 = 86),
    # then its store on dma0 (35 + 64 / 16 = 39): 125 cycles (209 in two kernels). The
    # sum's store goes on dma1 at 49 (done by 88).
    assert result.total_cycles == 125
    assert result.engine_busy_cycles["core0.vpu"] == 6 + 6 + 9 + 3 + 6 + 6 + 6
    assert result.engine_busy_cycles["core0.dma1"] == 43 + 39


@pytest.mark.parametrize("tokens", [1, 5], ids=["decode", "prefill"])
@pytest.mark.parametrize("norm", [RMSNorm, GemmaRMSNorm, nn.LayerNorm],
                         ids=["rms", "gemma", "layer"])
def test_the_mlp_norm_after_the_output_projection_is_one_kernel(
        norm: Callable[[int], nn.Module], tokens: int) -> None:
    torch.manual_seed(0)
    model = OutputNorm(16, norm).to(torch.bfloat16)
    with torch.no_grad():
        model.norm.weight.copy_(torch.randn(16))
    attn, x = (torch.randn(1, tokens, 16).to(torch.bfloat16) for _ in range(2))
    compiled = _compile(model, (attn, x))
    outs, _ = compiled.run(attn, x)
    for got, want in zip(outs, model(attn, x)):
        assert torch.equal(got, want)
    # the projections and the norm between (was split in two at the scaling): the
    # residual add is the output projection's epilogue, the norm's float32 cast and
    # square are not (they start the norm's pass, reading the sum). Weight preparation
    # comes first: Gemma's 1 + weight, LayerNorm's weight and bias cast to float32 (one
    # kernel: nodes that read only weights join each other, plan.Group.weights_only).
    first = "norm:native_layer_norm" if norm is nn.LayerNorm else "norm:_to_copy"
    assert compiled.kernels[-3:] == ("o:mm", first, "gate:mm_1")
    assert len(compiled.kernels) == 3 + {RMSNorm: 0, GemmaRMSNorm: 1, nn.LayerNorm: 1}[norm]

def test_a_sum_read_only_by_its_norm_stays_in_the_matmuls_epilogue() -> None:
    """BERT: moving the bias and residual adds into the norm's pass would store the
    matmul's result instead of the sum, saving nothing, so they stay in the epilogue."""
    torch.manual_seed(0)
    model = BertOutput(16)
    attn, x = torch.randn(1, 5, 16), torch.randn(1, 5, 16)
    compiled = _compile(model, (attn, x))
    (out,), _ = compiled.run(attn, x)
    torch.testing.assert_close(out, model(attn, x), rtol=1e-5, atol=1e-5)  # f32 matmul
    assert compiled.kernels == ("dense:addmm", "norm:native_layer_norm")
    stores = {(c.source, c.op.dst.tensor) for c in compiled.program.commands
              if isinstance(c.op, Store)}
    assert stores == {("dense:addmm", "add_add6_s"),  # the sum, from the epilogue
                      ("norm:native_layer_norm", "norm_native_layer_norm_add15_s")}
