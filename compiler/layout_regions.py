"""Activations kept channels-last between convolutions: a graph pass.

A convolution works channels last inside (:mod:`compiler.kernels.conv`); between two
convolutions of a CNN its result goes to DRAM as NCHW (a transpose on the vector unit)
and the next one rearranges it back. This pass finds the *regions* of values that only
convolutions and elementwise ops touch: each value a convolution's result or an
elementwise op's (a batch norm, an activation, a residual add) whose image operands
are all in the region and whose other operands are per channel; every reader of a
region value is an elementwise op of the region, the image input of a convolution, or
a mean over the image (a global average pool). Such a region is stored NHWC: its
convolutions write NHWC (``channels_last_out``), its readers read NHWC
(``channels_last_in``), its elementwise ops run on NHWC values (their per-channel
operands viewed ``[1, 1, 1, C]``), and a mean over the image reduces the NHWC axes and
is viewed back. No permute is added anywhere, so a region is always cheaper: the
transposes it drops were inside the convolution kernels. A region with any other
reader (a pooling window, a matmul, a graph output) stays NCHW, as XLA's layout
assignment keeps an op's preferred layout only where no copy is needed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from compiler import graph as g
from compiler.graph import Graph, Node, Value
from compiler.layout import nhwc_node, per_channel_shape, rebuilt_node
from compiler.passes import read_as_stored

def _images(node: Node) -> list[Value]:
    """A node's operands of its own (4-D) shape."""
    return [x for x in node.value_inputs() if x.shape == node.out.shape]


def _flexible(node: Node) -> bool:
    """An elementwise op on images whose other operands are per channel."""
    if not isinstance(node.spec, g.ELEMENTWISE) or len(node.out.shape) != 4:
        return False
    channels = node.out.shape[1]
    return all(per_channel_shape(x.shape, channels) is not None
               for x in node.value_inputs() if x.shape != node.out.shape)


@dataclass(frozen=True)
class ChannelsLastActivationsPass:
    """Store the regions between convolutions NHWC (see the module)."""

    name: str = "channels-last-activations"

    def apply(self, graph: Graph) -> Graph:
        regions = _regions(graph)
        if regions:
            _rewrite(graph, regions)
        return graph


def _regions(graph: Graph) -> set[int]:
    """Ids of the values of every region that can be stored NHWC."""
    parent: dict[int, int] = {}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    stored = read_as_stored(graph)
    bad: set[int] = set()
    for node in graph.nodes:
        spec = node.spec
        joins = False
        images = _images(node)
        if isinstance(spec, g.Conv2d) and not spec.channels_last_out:
            parent[node.out.id] = node.out.id
        elif _flexible(node) and images and all(x.id in parent for x in images):
            joins = True
            roots = {find(x.id) for x in node.value_inputs() if x.id in parent}
            root = roots.pop()
            for other in roots:
                parent[other] = root
            parent[node.out.id] = root
        # a region value read any other way keeps its region NCHW (an op of the region
        # may read one per channel: a squeeze-and-excitation scale)
        bad.update(x.id for x in node.value_inputs() if x.id in parent and not joins
                   and not _fine_reader(node, x, stored))
    bad.update(v.id for v in graph.outputs if v.id in parent)
    bad_roots = {find(i) for i in bad}
    return {i for i in parent if find(i) not in bad_roots}


def _fine_reader(node: Node, value: Value, stored: set[int]) -> bool:
    """``node`` can read region value ``value`` stored NHWC: as a convolution's image
    (not its weights) where a group has more than one input channel (a depthwise
    convolution's implicit GEMM would read one channel of each pixel, runs of 2 bytes:
    MobileNetV2's 112x112 depthwise 3x3 on atom took 191k cycles instead of 60k, on an
    estimate of 55k blind to it), or reduced over the image's height and width (a global
    average pool) for readers that take the result as a view (the NHWC mean is viewed
    back as ``[N, C, 1, 1]``; a squeeze-and-excitation's 1x1 convolution would need it
    stored)."""
    spec = node.spec
    if isinstance(spec, g.Conv2d):
        return node.inputs[0] is value and value is not node.inputs[1] and \
            not spec.channels_last_in and node.inputs[1].shape[1] > 1
    return isinstance(spec, g.Reduce) and tuple(sorted(spec.axes)) == (2, 3) and \
        node.out.id not in stored


def _nhwc(value: Value) -> tuple[int, ...]:
    n, c, h, w = value.shape
    return (n, h, w, c)


def _rewrite(graph: Graph, region: set[int]) -> None:
    stored: dict[int, Value] = {}  # NCHW value id -> its NHWC value

    def nhwc(value: Value) -> Value:
        if value.id not in stored:
            stored[value.id] = Value(_nhwc(value), value.dtype, f"{value.name}.nhwc")
        return stored[value.id]

    nodes: list[Node] = []
    for node in graph.nodes:
        spec = node.spec
        out_in_region = node.out.id in region
        reads = [x for x in node.value_inputs() if x.id in region]
        if not out_in_region and not reads:
            nodes.append(node)
            continue
        if isinstance(spec, g.Conv2d):
            inputs = (nhwc(node.inputs[0]) if reads else node.inputs[0], *node.inputs[1:])
            new_spec = replace(spec, channels_last_in=spec.channels_last_in or bool(reads),
                               channels_last_out=out_in_region)
            outputs = (nhwc(node.out),) if out_in_region else node.outputs
            nodes.append(rebuilt_node(node, new_spec, inputs, outputs))
        elif isinstance(spec, g.Reduce):  # a mean over H, W: over the NHWC axes, viewed
            (source,) = reads
            mean = Value((source.shape[0], 1, 1, source.shape[1]), node.out.dtype,
                         f"{node.out.name}.nhwc")
            nodes.append(rebuilt_node(node, g.Reduce(spec.kind, (1, 2)), (nhwc(source),),
                                      (mean,)))
            nodes.append(rebuilt_node(node, g.View(), (mean,), node.outputs))
        else:  # an elementwise op of the region
            channels = node.out.shape[1]
            inputs = []
            for x in node.inputs:
                if isinstance(x, Value) and x.id in region:
                    inputs.append(nhwc(x))
                elif isinstance(x, Value) and x.shape != per_channel_shape(x.shape, channels):
                    nodes.append(nhwc_node(g.View(), x, per_channel_shape(x.shape, channels),
                                           node.source))
                    inputs.append(nodes[-1].out)
                else:
                    inputs.append(x)
            nodes.append(rebuilt_node(node, spec, tuple(inputs), (nhwc(node.out),)))
    graph.nodes = nodes
