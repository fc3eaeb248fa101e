"""Commands are attributed to the module they came from, as a path inside the user's
model, next to the FX node: the same names through torch.export (with or without
archsim's Forward wrapper) and through dynamo."""

from __future__ import annotations

import torch

import compiler
from archsim.config import load_config
from compiler.frontend import node_source
from torch_bridge.model_outputs import Forward


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.q_proj(x))


class Inner(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer(), Layer()])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class CausalLM(torch.nn.Module):
    """Hugging Face's shape: the decoder is a child called ``model``."""

    def __init__(self) -> None:
        super().__init__()
        self.model = Inner()

    def forward(self, x):
        return self.model(x)


X = torch.randn(2, 8)
WANT = {"model.layers.0.q_proj", "model.layers.1.q_proj"}


def _paths(kernels) -> set[str]:
    return {k.rpartition(":")[0] for k in kernels if "addmm" in k or "linear" in k}


def test_export_paths_are_inside_the_model_with_or_without_the_wrapper() -> None:
    for module in (CausalLM(), Forward(CausalLM(), {})):
        compiled = compiler.compile_graph(compiler.export_model(module, (X,)),
                                          load_config("tiny"))
        assert _paths(compiled.kernels) == WANT, compiled.kernels


def test_dynamo_paths_match_exports() -> None:
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(CausalLM(), backend=backend)(X)  # dynamo lists no root entry here
    sources = {node_source(n) for n in graphs[0].graph.nodes if n.op == "call_function"}
    assert {s.rpartition(":")[0] for s in sources if "linear" in s} == WANT, sources


def test_a_node_outside_any_submodule_keeps_its_fx_name() -> None:
    class Top(torch.nn.Module):
        def forward(self, x):
            return x * 2

    ep = compiler.export_model(Top(), (X,))
    names = [node_source(n) for n in ep.graph.nodes if n.op == "call_function"]
    assert names == [n.name for n in ep.graph.nodes if n.op == "call_function"]
