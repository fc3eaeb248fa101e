"""Channels-last images without rearranging them: a graph pass.

torch holds a channels-last image NHWC; the frontend stores such a user input (and a
channels-last graph output) NHWC too, as a permute of the stored tensor
(:data:`compiler.frontend.CHANNELS_FIRST`) on the way in and one
(:data:`~compiler.frontend.CHANNELS_LAST`) on the way out. A convolution reading that
permute reads the stored image instead, and one whose only reader is the outgoing
permute writes NHWC itself: the implicit-GEMM convolution works channels last inside
(:mod:`compiler.kernels.conv`), so both the input window's rearrangement and the
output's transpose back to NCHW disappear, as on an NPU whose activations stay NHWC
between layers. What is not folded stays a permute kernel: numbers are unchanged
either way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from compiler import graph as g
from compiler.graph import Graph, Node, Value

CHANNELS_LAST = (0, 2, 3, 1)
"""NCHW -> NHWC: the dim order a channels-last image is stored in."""
CHANNELS_FIRST = (0, 3, 1, 2)
"""NHWC -> NCHW, its inverse."""


def channels_last(val: Any) -> bool:
    """A 4-D tensor whose strides are channels-last and not also contiguous (with one
    channel, or 1x1 images, the two orders are the same bytes)."""
    import torch  # this module loads without torch (compiler.compile imports it)

    return isinstance(val, torch.Tensor) and val.dim() == 4 and not val.is_contiguous() \
        and val.is_contiguous(memory_format=torch.channels_last)


def _permute_of(value: Value, perm: tuple[int, ...]) -> Value | None:
    """The stored tensor ``value`` permutes by ``perm``, if a Permute node computes it
    from one (not from a reshaped view: the convolution kernels address their image by
    its own dims, as SegFormer's ``x.reshape(b, h, w, c).permute(0, 3, 1, 2)`` is not)."""
    node = value.producer
    if node is None or not isinstance(node.spec, g.Permute) or node.spec.perm != perm:
        return None
    source = node.inputs[0]
    if source.producer is not None and isinstance(source.producer.spec, g.View):
        return None
    return source


@dataclass(frozen=True)
class ChannelsLastConvPass:
    """Fold the permutes around convolutions into the convolutions (see the module).
    A convolution that takes its outgoing permute's place leaves its old node dead: run
    :class:`compiler.passes.DeadCodePass` after it."""

    name: str = "channels-last-conv"

    def apply(self, graph: Graph) -> Graph:
        _sink_outgoing(graph)
        users = graph.users()
        outputs = {v.id for v in graph.outputs}
        folded_out: dict[int, Node] = {}  # permute output id -> the conv writing it
        nodes: list[Node] = []
        for node in graph.nodes:
            spec = node.spec
            if isinstance(spec, g.Conv2d) and not spec.channels_last_in:
                stored = _permute_of(node.inputs[0], CHANNELS_FIRST)
                if stored is not None:
                    node = rebuilt_node(node, replace(spec, channels_last_in=True),
                                    (stored, *node.inputs[1:]), node.outputs)
            if isinstance(node.spec, g.Permute) and node.spec.perm == CHANNELS_LAST:
                conv = node.inputs[0].producer
                if conv is not None and conv.out.id not in outputs and \
                        isinstance(conv.spec, g.Conv2d) and \
                        not conv.spec.channels_last_out and \
                        [n.out.id for n in users.get(conv.out.id, [])] == [node.out.id]:
                    folded_out[node.out.id] = conv
            nodes.append(node)
        # a folded conv is rebuilt in its permute's place (nothing between reads its
        # result), writing the permute's value, NHWC; the original is left dead for
        # DeadCodePass
        graph.nodes = [
            rebuilt_node(conv, replace(conv.spec, channels_last_out=True), None,
                         node.outputs) if (conv := folded_out.get(node.out.id)) else node
            for node in nodes]
        return graph


def per_channel_shape(shape: tuple[int, ...], channels: int) -> tuple[int, ...] | None:
    """The NHWC shape of an operand broadcast along an NCHW image's channels (a bias or
    a batch norm's ``[C, 1, 1]``) or along nothing; None for any other shape."""
    if len(shape) > 4:
        return None
    n, c, h, w = (1,) * (4 - len(shape)) + tuple(shape)
    if (n, h, w) != (1, 1, 1) or c not in (1, channels):
        return None
    return (1, 1, 1, c)


def _from_conv(value: Value, users: dict[int, list[Node]]) -> bool:
    """``value`` is a convolution's result, directly or through elementwise ops each
    read only by the next."""
    node = value.producer
    while node is not None and isinstance(node.spec, g.ELEMENTWISE):
        images = [x for x in node.value_inputs() if x.shape == node.out.shape]
        if len(images) != 1 or len(users.get(images[0].id, [])) != 1:
            return False
        node = images[0].producer
    return node is not None and isinstance(node.spec, g.Conv2d) and \
        len(users.get(node.out.id, [])) == 1


def _sink_outgoing(graph: Graph) -> None:
    """Move an outgoing permute above the elementwise ops between it and a convolution
    (a bias, a batch norm, an activation: ``permute(relu(conv + b))`` becomes
    ``relu(permute(conv) + b')``, ``b'`` the bias viewed ``[1, 1, 1, C]``), so that it
    reaches the convolution, which then writes NHWC with those ops as its epilogue."""
    outputs = {v.id for v in graph.outputs}
    moved = True
    while moved:
        moved = False
        users = graph.users()
        for p in graph.nodes:
            if not isinstance(p.spec, g.Permute) or p.spec.perm != CHANNELS_LAST:
                continue
            e = p.inputs[0].producer
            if e is None or not isinstance(e.spec, g.ELEMENTWISE) or \
                    e.out.id in outputs or len(users.get(e.out.id, [])) != 1:
                continue
            images = [x for x in e.value_inputs() if x.shape == e.out.shape]
            if len(images) != 1 or not _from_conv(images[0], users):
                continue
            image = images[0]
            operands = [x for x in e.value_inputs() if x is not image]
            shapes = [per_channel_shape(x.shape, image.shape[1]) for x in operands]
            if None in shapes:
                continue
            _move_above(graph, p, e, image, dict(zip((x.id for x in operands), shapes)))
            moved = True
            break


def _move_above(graph: Graph, p: Node, e: Node, image: Value,
                shapes: dict[int, tuple[int, ...]]) -> None:
    """``p`` (the permute of ``e``'s result) moved above ``e``: ``e`` rebuilt on the
    permuted image and its other operands viewed as ``shapes`` says, writing ``p``'s
    value."""
    added = [nhwc_node(g.Permute(CHANNELS_LAST), image,
                       tuple(image.shape[d] for d in CHANNELS_LAST), p.source)]
    inputs = []
    for x in e.inputs:
        if x is image:
            inputs.append(added[0].out)
        elif isinstance(x, Value) and x.shape != shapes[x.id]:
            added.append(nhwc_node(g.View(), x, shapes[x.id], e.source))
            inputs.append(added[-1].out)
        else:
            inputs.append(x)
    rebuilt = rebuilt_node(e, e.spec, tuple(inputs), p.outputs)
    nodes: list[Node] = []
    for node in graph.nodes:
        if node is e:
            nodes += [*added, rebuilt]
        elif node is not p:
            nodes.append(node)
    graph.nodes = nodes


def nhwc_node(spec: g.Spec, x: Value, shape: tuple[int, ...], source: str) -> Node:
    """A node ``spec`` of ``x`` writing a new value of ``shape``, ``x``'s NHWC form (a
    permute of an image, a view of a per-channel operand)."""
    out = Value(shape, x.dtype, f"{x.name}.nhwc")
    node = Node(spec, (x,), (out,), source)
    out.producer = node
    return node


def rebuilt_node(node: Node, spec: g.Spec, inputs: tuple | None,
             outputs: tuple[Value, ...]) -> Node:
    """``node`` with another spec (and inputs), writing ``outputs``."""
    new = Node(spec, node.inputs if inputs is None else inputs, outputs, node.source)
    for v in outputs:
        v.producer = new
    return new
