"""Where a vector group runs does not depend on where the source computed its first node
(issue 26's one answer per model): a group that a later node joins past matmuls that
came between (Q's permute right after Q's projection, its rotary after K's projection)
runs after those matmuls, so the projections reach the arrays back to back and the two
source orders give one program; a group that a kernel between reads stays where it is."""

from __future__ import annotations

import re

import torch
from torch import nn

import compiler
from archsim.app.models import rotate
from archsim.config import load_config
from compiler_models import Projected

HIDDEN, HEADS, TOKENS = 64, 4, 16


class Attention(Projected):
    """Q and K projected, heads split and rotated: ``early`` transposes each head split
    right after its projection (the built-in Llama), else after both (``archsim llm``)."""

    def __init__(self, early: bool) -> None:
        super().__init__(HIDDEN, HEADS)
        self.early = early

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.early:
            return super().forward(x, cos, sin)
        b, t, _ = x.shape
        shape = (b, t, HEADS, HIDDEN // HEADS)
        q, k = self.q(x).view(shape), self.k(x).view(shape)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        return rotate(q, cos, sin), rotate(k, cos, sin)


class Layer(Attention):
    """Q, K and V projected and heads split, Q and K rotated, then attention (the
    built-in Llama's order when ``early``)."""

    def __init__(self, early: bool) -> None:
        super().__init__(early)
        self.v = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                ) -> tuple[torch.Tensor]:
        b, t, _ = x.shape
        shape = (b, t, HEADS, HIDDEN // HEADS)
        q, k = super().forward(x, cos, sin)
        v = self.v(x).view(shape).transpose(1, 2)
        return (nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),)


class TwoBetween(nn.Module):
    """Q's heads split right after its projection (``early``) or after K's and V's, then
    scaled (attention's 1 / sqrt(d)) after both: one node joins the split's group past
    two projections at once (a rotary's nodes join it one by one, each moving it on)."""

    def __init__(self, early: bool) -> None:
        super().__init__()
        self.early = early
        self.q = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.v = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        shape = (b, t, HEADS, HIDDEN // HEADS)
        q = self.q(x)
        if self.early:
            q = q.view(shape).transpose(1, 2)
        k, v = self.k(x), self.v(x)
        if not self.early:
            q = q.view(shape).transpose(1, 2)
        return q * 0.25, k, v


class ReadByEpilogue(nn.Module):
    """Q's square starts a group (it feeds only a reduction); K's projection comes
    between it and the mean that joins it, and K's epilogue then adds the mean: the
    group moves after K's projection, and the add must not fuse into K's epilogue,
    which would read the mean before it is made."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.q(x)
        square = q * q
        k = self.k(x)
        return k + square.mean(-1, keepdim=True), q


class ReadBetween(nn.Module):
    """Q's heads split, then read by a matmul, then rotated: the matmul needs the
    permuted Q, so Q's group cannot move past it."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        q = self.q(x).view(b, t, HEADS, HIDDEN // HEADS).transpose(1, 2)
        scores = q @ q.transpose(-1, -2)
        return scores, rotate(q, cos, sin)


def _inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    x = torch.randn(1, TOKENS, HIDDEN).to(torch.bfloat16)
    cos, sin = (torch.randn(TOKENS, HIDDEN // HEADS).to(torch.bfloat16) for _ in range(2))
    return x, cos, sin


def _kinds(kernels: tuple[str, ...]) -> tuple[str, ...]:
    """Kernel names without the exporter's numbering (the two sources number apart)."""
    return tuple(re.sub(r"_\d+$", "", name) for name in kernels)


def _compiled(model: nn.Module, args: tuple[torch.Tensor, ...], tolerance: float | None = None):
    torch.manual_seed(1)
    model = model.to(torch.bfloat16).eval()
    exported = torch.export.export(model, args).run_decompositions()
    compiled = compiler.compile_graph(exported, load_config("atom"))
    outs, result = compiled.run(*args)
    for got, want in zip(outs, model(*args)):
        torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)
    return compiled, result


def test_a_rotary_joined_past_the_next_projection_runs_after_it() -> None:
    args = _inputs()
    early, early_run = _compiled(Attention(early=True), args)
    late, late_run = _compiled(Attention(early=False), args)
    # the early source order made Q's permute + rotary a kernel between the projections
    assert early.kernels[:2] == ("q:mm", "k:mm_1")
    assert _kinds(early.kernels) == _kinds(late.kernels) == ("q:mm", "k:mm", "permute", "permute")
    assert early_run.total_cycles == late_run.total_cycles


def test_every_projection_runs_before_the_rotaries_whatever_the_source_order() -> None:
    args = _inputs()
    # (bf16 attention: the device's kernel rounds where torch's CPU math path does not)
    early, early_run = _compiled(Layer(early=True), args, 2e-2)
    late, late_run = _compiled(Layer(early=False), args, 2e-2)
    for compiled in (early, late):
        kinds = _kinds(compiled.kernels)
        assert kinds[:3] == ("q:mm", "k:mm", "v:mm")
    assert _kinds(early.kernels) == _kinds(late.kernels)
    assert early_run.total_cycles == late_run.total_cycles


def test_a_group_joined_past_two_projections_runs_after_the_last() -> None:
    # Q's permute sits between Q's and K's projections until its scaling joins it, after
    # V's: it moves after V's projection, not only after K's (the first matmul between)
    args = _inputs()
    early, early_run = _compiled(TwoBetween(early=True), args)
    late, late_run = _compiled(TwoBetween(early=False), args)
    assert early.kernels[:3] == ("q:mm", "k:mm_1", "v:mm_2")
    assert _kinds(early.kernels) == _kinds(late.kernels) == ("q:mm", "k:mm", "v:mm", "permute")
    assert early_run.total_cycles == late_run.total_cycles


def test_a_node_after_a_moved_group_joins_it_not_the_matmul_it_passed() -> None:
    # the mean joins the square's group past K's projection; the add reads K and the
    # mean, so it comes after that group, not in K's epilogue (where it read the mean
    # before the mean was made: the program failed verification), with torch's numbers
    compiled, _ = _compiled(ReadByEpilogue(), _inputs())
    assert _kinds(compiled.kernels)[:3] == ("q:mm", "k:mm", "mul")


def test_a_group_read_by_a_kernel_between_keeps_its_place() -> None:
    compiled, _ = _compiled(ReadBetween(), _inputs())
    # Q's permute (joined later by its rotary) is read by the scores' matmul after it
    permute = next(i for i, name in enumerate(compiled.kernels) if "permute" in name)
    scores = next(i for i, name in enumerate(compiled.kernels)
                  if name.endswith(("matmul", "bmm", "mm_1")))
    assert compiled.kernels[0] == "q:mm" and permute < scores
