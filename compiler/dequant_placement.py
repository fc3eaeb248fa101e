"""Where weight-only quantized weights are dequantized: the one place that reads the
preset's ``core.matrix.dequant``.

The lowerings express every weight-only matmul (torch's CPU int4 op on whole blocks,
``_weight_int8pack_mm``, torchao's int8 and float8 weight-only layers) as a matmul that
reads its weights at their stored size and dequantizes them in the arrays' input path
(:meth:`GraphBuilder.matmul_dequant`, or :meth:`GraphBuilder.matmul` with
``weight_only``). That is the ``input_path`` placement, and this pass leaves it alone.
With ``vector``, it rewrites each such matmul into the vector unit's dequantization
(:func:`compiler.lowerings.dequant_vector.vector_matmul`: the weights still read at
their packed size, written out in the activations' dtype) and a plain matmul that
reads them, as chips whose arrays take only their native inputs do it (Ascend's Cube
behind its vector cores). The matmul's result keeps its value, so its users and its
epilogue are untouched, and the numbers are the same in both placements.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import graph as g
from archsim.errors import LoweringError
from compiler.graph import Graph, Node, Value
from compiler.graph_builder import GraphBuilder
from compiler.lowerings.dequant_vector import narrow_weights, vector_matmul


@dataclass(frozen=True)
class DequantPlacementPass:
    """Move weight-only dequantization to the vector unit when ``placement`` is
    ``vector`` (``core.matrix.dequant``; ``input_path``: the graph as lowered)."""

    placement: str
    name: str = "dequant-placement"

    def apply(self, graph: Graph) -> Graph:
        if self.placement != "vector":
            return graph
        nodes, graph.nodes = graph.nodes, []
        builder = GraphBuilder(graph)
        for node in nodes:
            if not narrow_weights(node):
                graph.nodes.append(node)
                continue
            builder.source = node.source
            _adopt(graph, vector_matmul(builder, node), node)
        return graph


def _adopt(graph: Graph, result: Value, node: Node) -> None:
    """Make the last node (which computed ``result``) produce ``node``'s output value
    instead, so ``node``'s users read it unchanged."""
    last = graph.nodes[-1]
    if last.out is not result or result.shape != node.out.shape \
            or result.dtype is not node.out.dtype:
        raise LoweringError(f"{node.source}: the vector unit's dequantization made "
                            f"{result!r}, not {node.out!r}")
    graph.nodes[-1] = g.Node(last.spec, last.inputs, node.outputs, last.source)
    node.out.producer = graph.nodes[-1]
