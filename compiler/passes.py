"""Graph passes: small frozen objects with a ``name`` and ``apply``."""

from __future__ import annotations

from dataclasses import dataclass

from compiler import graph as g
from compiler.graph import Graph, base_of


@dataclass(frozen=True)
class DeadCodePass:
    """Drop nodes none of whose outputs reach a graph output."""

    name: str = "dead-code"

    def apply(self, graph: Graph) -> Graph:
        live = {v.id for v in graph.outputs}
        kept = []
        for node in reversed(graph.nodes):
            if any(v.id in live for v in node.outputs):
                kept.append(node)
                live |= {v.id for v in node.value_inputs()}
        graph.nodes = list(reversed(kept))
        return graph


@dataclass(frozen=True)
class SplatPass:
    """Splat values read only as operands of binary/select nodes become scalars;
    returns value id -> scalar. Other splats stay tensors (materialized as fills)."""

    name: str = "splat-to-scalar"

    def apply(self, graph: Graph) -> dict[int, float]:
        users = graph.users()
        outputs = {base_of(v).id for v in graph.outputs}
        scalars: dict[int, float] = {}
        for node in graph.nodes:
            if not isinstance(node.spec, g.Splat):
                continue
            v = node.out
            readers = users.get(v.id, [])
            if v.id in outputs or not readers:
                continue
            if all(isinstance(r.spec, (g.Binary, g.Select)) and
                   _operand_only(r, v) for r in readers):
                scalars[v.id] = node.spec.value
        return scalars


def _operand_only(node: g.Node, value: g.Value) -> bool:
    if isinstance(node.spec, g.Select):
        return node.inputs[0] is not value
    return True
