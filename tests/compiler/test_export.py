"""compiler.export_model traces once (torch's ATen-level export with the decomposition
table) where torch's public path traces twice (export, then run_decompositions): the
two must give the same program, node for node."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from compiler.export import _export_decomposed, export_decompositions, export_model
from compiler_models import GPT2Block, LlamaLayer, ResNetBlock, rotary


class _NoGradInside(nn.Module):
    """Switches grad mode inside forward (the training IR wraps it in a HOP that
    decomposition inlines) and calls SDPA (kept whole by the table)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            scale = x.abs().amax()
        q = self.proj(x).view(1, 8, 2, 8).transpose(1, 2)
        return nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True) / scale


def _public(module: nn.Module, args: tuple) -> torch.export.ExportedProgram:
    return torch.export.export(module, args).run_decompositions(
        export_decompositions(), decompose_custom_triton_ops=True)


def _summary(program: torch.export.ExportedProgram) -> list[tuple]:
    return [(n.op, n.name, str(n.target), tuple((n.meta.get("nn_module_stack") or {}).keys()),
             tuple(n.meta["val"].shape) if isinstance(n.meta.get("val"), torch.Tensor) else None)
            for n in program.graph.nodes]


@pytest.mark.parametrize("build", [
    lambda: (GPT2Block(64, 4), (torch.randn(1, 8, 64),)),
    lambda: (LlamaLayer(64, 4, 128), (torch.randn(1, 8, 64), *rotary(8, 16))),
    lambda: (ResNetBlock(8), (torch.randn(1, 8, 8, 8),)),
    lambda: (_NoGradInside(), (torch.randn(1, 8, 16),)),
], ids=["gpt2-block", "llama-layer", "resnet-block", "no-grad-and-sdpa"])
def test_one_trace_gives_the_public_paths_program(build) -> None:
    torch.manual_seed(0)
    module, args = build()
    module.eval()
    fast = _export_decomposed(module, args, {}, export_decompositions())
    public = _public(module, args)
    assert _summary(fast) == _summary(public)
    assert fast.graph_signature == public.graph_signature
    assert torch.allclose(fast.module()(*args), module(*args), atol=1e-5)


def test_export_falls_back_to_the_public_path(monkeypatch) -> None:
    import compiler.export

    def moved() -> None:  # as if torch changed its internals
        raise ImportError("cannot import name '_export_to_aten_ir' from 'torch.export._trace'")

    monkeypatch.setattr(compiler.export, "_private_export_api", moved)
    module, args = GPT2Block(64, 4).eval(), (torch.randn(1, 8, 64),)
    assert _summary(export_model(module, args)) == _summary(_public(module, args))


class _LeavesTorch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(x.numpy() * 2)  # torch.export cannot trace through numpy


def test_an_export_torch_refuses_is_one_export_error() -> None:
    from archsim.errors import ExportError

    with pytest.raises(ExportError, match=r"^torch.export cannot trace _LeavesTorch into one "
                                          r"graph: \w+: .+") as caught:
        export_model(_LeavesTorch(), (torch.randn(2, 3),))
    assert "\n" not in str(caught.value)
    assert caught.value.__cause__ is not None  # torch's own error kept


def test_the_trace_records_no_stack_per_node_and_restores_torchs_switch() -> None:
    """Stack traces cost a sixth of an export and nothing reads them; torch's own
    setting is left as it was, also when the export fails."""
    import torch.fx.config

    assert torch.fx.config.do_not_emit_stack_traces is False
    exported = export_model(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), (torch.randn(2, 8),))
    calls = [n for n in exported.graph.nodes if n.op == "call_function"]
    assert calls and all(not n.meta.get("stack_trace") for n in calls)
    assert torch.fx.config.do_not_emit_stack_traces is False
    with pytest.raises(Exception):
        export_model(nn.Linear(8, 8), (torch.randn(2, 5),))  # wrong width
    assert torch.fx.config.do_not_emit_stack_traces is False
