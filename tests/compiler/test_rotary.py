"""Rotary position embeddings (rotate-half form, transformers' Llama) are one vector pass
over the scratchpad: ``cat((-x[..., h:], x[..., :h]), -1)`` lowers to a rotate-half that
fuses with ``x * cos`` and ``* sin``, so x, cos and sin are loaded once and the result
stored once, with torch's numbers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import compiler
from archsim.app.models import rotate
from archsim.config import load_config
from compiler_models import Projected
from archsim.errors import LoweringError
from compiler import graph as g
from compiler.compile import build_program
from compiler.ir.dtypes import DType
from compiler.ir.ops import Unary, UnaryKind, VCopy
from compiler.options import CompileOptions

TINY = load_config("tiny")


class Rotary(nn.Module):
    """Heads split from [batch, tokens, heads, dim] and rotated, as Llama's attention."""

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return rotate(x.transpose(1, 2), cos, sin)


class PartialRotary(nn.Module):
    """The leading ``cos.shape[-1]`` dims of each head rotated, the rest passed through
    (GPT-NeoX, Phi)."""

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        r = cos.shape[-1]
        return torch.cat((rotate(x[..., :r], cos, sin), x[..., r:]), dim=-1)


def _compile(model: nn.Module, args: tuple[torch.Tensor, ...], preset: str = "tiny"):
    exported = torch.export.export(model.eval(), args).run_decompositions()
    return compiler.compile_graph(exported, load_config(preset))


def _tables(tokens: int, dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(tokens, dim).to(dtype), torch.randn(tokens, dim).to(dtype)


@pytest.mark.parametrize("tokens", [1, 5], ids=["decode", "prefill"])
@pytest.mark.parametrize("dim, dtype", [(64, torch.float32), (128, torch.bfloat16)])
def test_rotary_is_one_kernel_with_torchs_numbers(tokens: int, dim: int,
                                                  dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randn(1, tokens, 3, dim).to(dtype)
    cos, sin = _tables(tokens, dim, dtype)
    compiled = _compile(Rotary(), (x, cos, sin))
    (out,), _ = compiled.run(x, cos, sin)
    assert torch.equal(out, Rotary()(x, cos, sin))
    assert len(compiled.kernels) == 1  # was 5: mul, slice + neg, slice, cat, mul + add


def test_partial_rotary_rotates_in_one_kernel_and_passes_the_rest_through() -> None:
    torch.manual_seed(0)
    x = torch.randn(1, 3, 4, 64)
    cos, sin = _tables(4, 32, torch.float32)
    compiled = _compile(PartialRotary(), (x, cos, sin))
    (out,), _ = compiled.run(x, cos, sin)
    assert torch.equal(out, PartialRotary()(x, cos, sin))
    # the rotated part (a slice of x, rotated in place), the pass-through slice and the
    # cat of the two; was 8 (each slice, the rotate's cat and each multiply apart)
    assert len(compiled.kernels) == 3


def test_a_decode_steps_q_and_k_rotate_in_one_kernel_after_their_projections() -> None:
    torch.manual_seed(0)
    model = Projected(64, 2).eval()
    x = torch.randn(1, 1, 64)
    cos, sin = _tables(1, 32, torch.float32)
    compiled = _compile(model, (x, cos, sin))
    outs, _ = compiled.run(x, cos, sin)
    for got, want in zip(outs, model(x, cos, sin)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # matmuls in f32
    # the two projections, then both rotaries in one pass: they share cos and sin
    assert len(compiled.kernels) == 3


def test_rotate_half_is_a_negated_and_a_copied_half_on_strided_views() -> None:
    torch.manual_seed(0)
    x, cos, sin = torch.randn(2, 8), torch.randn(2, 8), torch.randn(2, 8)

    class Plain(nn.Module):
        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                    ) -> torch.Tensor:
            return rotate(x, cos, sin)

    compiled = _compile(Plain(), (x, cos, sin))
    (out,), result = compiled.run(x, cos, sin)
    assert torch.equal(out, Plain()(x, cos, sin))
    ops = [c.op for c in compiled.program.commands]
    neg = next(op for op in ops if isinstance(op, Unary) and op.kind is UnaryKind.neg)
    copy = next(op for op in ops if isinstance(op, VCopy))
    # x at sram0 0x0: rows of 8 f32; the high half (+16 B) negated into the low half of
    # the output, the low half copied into its high half
    assert (neg.src.offset - copy.src.offset, neg.src.shape, neg.src.strides) == (16, (2, 4),
                                                                                (8, 1))
    assert copy.dst.offset - neg.dst.offset == 16 and copy.dst.strides == (8, 1)
    # tiny: 2 cores, 2 DMA engines each at 16 B/cycle of one 16 B/cycle DRAM channel; a
    # transfer's fixed cost is 35 cycles (10 DMA setup + 20 DRAM + 5 NoC); the vector
    # unit does 4 lanes a cycle after a 2-cycle pipeline latency. One tile on core 0:
    # x (dma0) and cos (dma1), 64 B each, share the channel: 35 + 128 / 16 = 43.
    # sin queues behind x on dma0: 43 + 35 + 64 / 16 = 82. Meanwhile x * cos (2 + 16/4
    # = 6, ends 49), the negated half and the copied half (2 + 8/4 = 4 each, end 57).
    # Then * sin and + (6 each: 94) and the store (35 + 4): 133 cycles (186 when the
    # halves went through DRAM, in a second kernel).
    assert result.total_cycles == 133
    assert result.engine_busy_cycles["core0.vpu"] == 6 + 4 + 4 + 6 + 6


def test_a_rotate_half_over_an_odd_axis_is_refused() -> None:
    graph = g.Graph()
    x = g.Value((2, 7), DType.f32, "x")
    graph.inputs.append(x)
    out = graph.add(g.RotateHalf(), (x,), [((2, 7), DType.f32)], "rotated").out
    graph.outputs.append(out)
    with pytest.raises(LoweringError, match=r"^rotated: rotate-half of f32\[2,7\] needs its "
                                            r"last axis whole and even$"):
        build_program(graph, TINY, CompileOptions(), "odd")


class Interleaved(nn.Module):
    """transformers' order: Q, K and V heads split and moved ahead of the tokens first,
    then Q and K rotated."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        return rotate(q, cos, sin), rotate(k, cos, sin), v


def test_each_rotary_joins_its_permute_when_the_permutes_come_first() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 5, 2, 16) for _ in range(3))
    cos, sin = _tables(5, 16, torch.float32)
    compiled = _compile(Interleaved(), (q, k, v, cos, sin))
    outs, _ = compiled.run(q, k, v, cos, sin)
    for got, want in zip(outs, Interleaved()(q, k, v, cos, sin)):
        assert torch.equal(got, want)
    # a permute starts a group; Q's rotary joins Q's permute (not the latest kernel, V's)
    assert compiled.kernels == ("permute", "permute_1", "permute_2")
