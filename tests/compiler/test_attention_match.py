"""Written-out attention (``softmax(q @ k^T / c [+ mask]) @ v``) runs as the
flash-attention kernel: same numbers as torch, and the scores never reach DRAM."""

from __future__ import annotations

import math

import pytest
import torch

from compiler import compile_graph
from compiler.options import CompileOptions
from compiler_helpers import config


class Core(torch.nn.Module):
    def __init__(self, scale: str = "div", return_probs: bool = False) -> None:
        super().__init__()
        self.scale, self.return_probs = scale, return_probs

    def forward(self, q, k, v, mask=None):
        d = q.shape[-1]
        s = q @ k.transpose(-1, -2)
        s = s / math.sqrt(d) if self.scale == "div" else s * (1 / math.sqrt(d))
        if mask is not None:
            s = s + mask
        p = torch.softmax(s, dim=-1)
        return (p @ v, p) if self.return_probs else p @ v


def _compile(model: torch.nn.Module, *args: torch.Tensor, fusion: bool = True):
    program = torch.export.export(model.eval(), args).run_decompositions()
    return compile_graph(program, config("tiny"), CompileOptions(attention_fusion=fusion))


@pytest.mark.parametrize("scale", ["div", "mul"])
def test_fused_equals_torch_and_keeps_scores_on_chip(scale: str) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 40, 16) for _ in range(3))
    model = Core(scale)
    fused = _compile(model, q, k, v)
    (out,), result = fused.run(q, k, v)
    torch.testing.assert_close(out, model(q, k, v), rtol=1e-4, atol=1e-4)
    assert len(fused.kernels) == 1  # one flash-attention kernel
    assert result.dram_bytes_written == out.numel() * 4  # only the output is stored
    (_,), unfused = _compile(model, q, k, v, fusion=False).run(q, k, v)
    assert unfused.dram_bytes_written >= 3 * 40 * 40 * 4  # the scores were stored


def test_heads_from_projections_with_a_padding_mask() -> None:
    torch.manual_seed(0)
    b, s, h, d = 2, 24, 4, 8
    q, k, v = (torch.randn(b, s, h, d).transpose(1, 2) for _ in range(3))
    mask = torch.zeros(b, 1, 1, s)
    mask[1, ..., -5:] = -1e4  # the second sequence is padded
    model = Core()
    fused = _compile(model, q, k, v, mask)
    (out,), _ = fused.run(q, k, v, mask)
    torch.testing.assert_close(out, model(q, k, v, mask), rtol=1e-4, atol=1e-4)
    assert len(fused.kernels) == 1


def test_probabilities_read_elsewhere_are_not_fused() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 16, 8) for _ in range(3))
    model = Core(return_probs=True)
    compiled = _compile(model, q, k, v)
    outs, result = compiled.run(q, k, v)
    for got, want in zip(outs, model(q, k, v)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert len(compiled.kernels) > 1
    assert result.dram_bytes_written >= (2 * 16 * 8 + 2 * 16 * 16) * 4


def test_matmuls_split_over_the_arrays_and_overlap_the_softmax() -> None:
    """Eight heads on tpu-v3 (two arrays): every matmul is split by query rows over both
    arrays, and the next head's Q @ K^T is issued before this head's P @ V, so it runs
    during this head's softmax: the run is shorter than the vector and matrix work
    back to back."""
    from archsim.simulator import Simulator
    from compiler.ir.ops import MatMul

    q, k, v = (torch.empty(8, 256, 64, device="meta") for _ in range(3))
    program = torch.export.export(Core().eval(), (q, k, v)).run_decompositions()
    compiled = compile_graph(program, config("tpu-v3"))
    matmuls = [c for c in compiled.program.commands if isinstance(c.op, MatMul)]
    assert [c.engine for c in matmuls[:2]] == ["core0.mxu0", "core0.mxu1"]
    assert [c.op.a.shape for c in matmuls[:2]] == [(128, 64), (128, 64)]  # QK^T, head 0
    assert matmuls[2].op.b.shape == (64, 256) and matmuls[4].op.b.shape == (256, 64)
    # head 1's QK^T (b: K^T [64, 256]) comes before head 0's PV (b: V [256, 64])
    result = Simulator(config("tpu-v3")).run(compiled.program)
    busy = result.engine_busy_cycles
    serial = busy["core0.vpu"] + max(busy["core0.mxu0"], busy["core0.mxu1"])
    assert result.total_cycles < 0.85 * serial


class HeadSplit(torch.nn.Module):
    """Transformer-style heads: project, view as [B, S, H, D], permute to [B, H, S, D]."""

    def __init__(self, hidden: int = 32, heads: int = 4, sdpa: bool = False) -> None:
        super().__init__()
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(3))
        self.heads, self.sdpa = heads, sdpa

    def forward(self, x):
        b, s, hidden = x.shape
        q, k, v = (p(x).view(b, s, self.heads, hidden // self.heads).permute(0, 2, 1, 3)
                   for p in self.qkv)
        if self.sdpa:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return Core()(q, k, v)


@pytest.mark.parametrize("sdpa", [False, True])
def test_heads_are_read_in_place_without_permute_kernels(sdpa: bool) -> None:
    from compiler import export_decompositions

    torch.manual_seed(0)
    model, x = HeadSplit(sdpa=sdpa).eval(), torch.randn(2, 24, 32)
    program = torch.export.export(model, (x,)).run_decompositions(
        export_decompositions() if sdpa else None)
    compiled = compile_graph(program, config("tiny"))
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert not [k for k in compiled.kernels if k.rpartition(":")[2].startswith("permute")]
    assert len(compiled.kernels) == 4  # three projections and the attention


class _MergeHeads(torch.nn.Module):
    """BERT-era attention: heads split by view + permute, written-out attention, heads
    merged back by permute + reshape for the output projection."""

    def __init__(self, hidden: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.out = torch.nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = (t.view(b, s, self.heads, h // self.heads).permute(0, 2, 1, 3)
                   for t in self.qkv(x).split(h, dim=-1))
        ctx = Core()(q, k, v)
        return self.out(ctx.permute(0, 2, 1, 3).contiguous().view(b, s, h))


def test_heads_merged_back_are_written_in_place() -> None:
    """The kernel stores each head where the permute back to [B, S, H, D] would put it
    (the permute is not a kernel of its own, the output is stored once) and the numbers
    are torch's."""
    torch.manual_seed(0)
    x = torch.randn(2, 24, 32)
    model = _MergeHeads().eval()
    fused = _compile(model, x)
    (out,), result = fused.run(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert "bmm_1" in fused.kernels  # the attention kernel
    assert not any(name.startswith(("permute", "clone")) for name in fused.kernels), \
        fused.kernels
    # stored: the qkv projection, its three splits, attention's output once, the result
    assert result.dram_bytes_written == (3 + 3 + 1 + 1) * x.numel() * 4
