"""Planning: the graph becomes a list of kernels (the unit the scheduler tiles).

:class:`FusionPass` groups vector nodes into one :class:`Group` (one pass over SRAM per
tile) and attaches elementwise groups that consume a matmul/conv/pool result to it as an
epilogue. A vector node joins the current group when it reads one of the group's values
or a value the group already loads (siblings: a rotary's ``x * cos`` and
``rotate_half(x)``, Q's and K's rotaries sharing cos and sin), else the vector group that
made its latest input, past kernels that came between; that group then runs after the
anchored kernels between (:func:`_sink`). With fusion off, every vector node is its own
group.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler import graph as g
from compiler.graph import Graph, Node, Shape, base_of
from compiler.options import CompileOptions

VECTOR_SPECS: tuple[type[g.Spec], ...] = (g.Unary, g.Binary, g.Select, g.Cast, g.Broadcast,
                                          g.Reduce, g.RotateHalf, g.Permute, g.Slice)
LEAF_ONLY: tuple[type[g.Spec], ...] = (g.Permute, g.Slice)
WHOLE_ROWS: tuple[type[g.Spec], ...] = (g.Reduce, g.RotateHalf)
"""Specs that need axes of their tile whole (a reduction's, a rotate-half's last): never a
matmul's epilogue, whose tiles split the output's columns."""
ANCHORS: tuple[type[g.Spec], ...] = (g.MatMul, g.Conv2d, g.Pool2d)
NO_CODE: tuple[type[g.Spec], ...] = (g.View, g.Splat, g.Constant, g.Input)


@dataclass(eq=False)
class Group:
    """Vector nodes computed tile by tile over one iteration space ``shape``."""

    nodes: list[Node] = field(default_factory=list)
    shape: Shape = ()
    members: set[int] = field(default_factory=set)
    whole_axes: set[int] = field(default_factory=set)
    """Axes of ``shape`` a tile must not split (reduced axes)."""
    reads: set[int] = field(default_factory=set)
    """Ids of the values its nodes read."""
    weights_only: bool = False
    """Every node computes from parameters, buffers and constants only (a batch norm's
    per-channel scale and shift): nodes like that over the same space join it although
    they read none of its values, so the parameters' small preparations are one kernel,
    not one DRAM round trip each."""


@dataclass(eq=False)
class Kernel:
    """One schedulable unit: an anchor node (matmul/conv/pool/cat/pad/gather/host) with an
    optional epilogue group, or a vector group alone."""

    anchor: Node | None
    group: Group | None

    @property
    def nodes(self) -> list[Node]:
        return ([self.anchor] if self.anchor else []) + (self.group.nodes if self.group else [])

    @property
    def name(self) -> str:
        first = self.anchor or (self.group.nodes[0] if self.group else None)
        return first.source if first else "kernel"


def aligned(shape: Shape, rank: int) -> Shape:
    return (1,) * (rank - len(shape)) + tuple(shape)


def _fits(shape: Shape, space: Shape) -> Shape | None:
    """The iteration space grown to cover ``shape``, or None if incompatible."""
    if len(shape) > len(space):
        if any(n != 1 for n in shape[:len(shape) - len(space)]) or space:
            return None
    rank = max(len(shape), len(space))
    a, b = aligned(shape, rank), aligned(space, rank)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(out)


@dataclass(frozen=True)
class FusionPass:
    name: str = "fusion"

    def apply(self, graph: Graph, options: CompileOptions) -> list[Kernel]:
        deferred = _reduction_inputs(graph) if options.fusion else set()
        kernels: list[Kernel] = []
        current: Kernel | None = None
        owner: dict[int, Kernel] = {}
        position: dict[int, int] = {}  # id(kernel) -> its index in ``kernels``
        prep = weight_prep(graph)
        for node in graph.nodes:
            spec = node.spec
            from_weights = id(node) in prep
            if isinstance(spec, NO_CODE):
                continue
            if isinstance(spec, VECTOR_SPECS):
                target = _join(node, current, owner, position, id(node) in deferred,
                               from_weights) if options.fusion else None
                if target is None:
                    current = target = Kernel(None, _new_group(node, from_weights))
                    position[id(current)] = len(kernels)
                    kernels.append(current)
                elif target is not current:
                    _sink(kernels, position, target)
                for v in node.outputs:
                    owner[v.id] = target
                if not options.fusion:
                    current = None
                continue
            current = Kernel(node, None)
            position[id(current)] = len(kernels)
            kernels.append(current)
            for v in node.outputs:
                owner[v.id] = current
            if not isinstance(spec, ANCHORS):
                current = None
        return kernels


def _reads(kernel: Kernel) -> set[int]:
    """Ids of the stored values ``kernel``'s nodes read (a view's base)."""
    return {base_of(v).id for node in kernel.nodes for v in node.value_inputs()}


def _sink(kernels: list[Kernel], position: dict[int, int], kernel: Kernel) -> None:
    """Move ``kernel``, a vector group a node has just joined past kernels that came
    between, to just after the last of those with an anchor (a matmul, conv or pool,
    or a copy, gather or host kernel), unless one of the kernels between reads what it
    makes. A vector group then runs after the projections that came before its last
    node, so the program does not depend on where the source happened to compute its
    first: Q's permute right after Q's projection, its rotary after K's and V's, would
    put the rotary's vector work ahead of K's projection on in-order queues. Vector
    groups already after that anchor stay after it, so a group sunk later runs ahead of
    one sunk earlier (the built-in Llama's K rotary runs before Q's)."""
    at = position[id(kernel)]
    made = kernel.group.members if kernel.group is not None else set()
    later = kernels[at + 1:]
    if any(_reads(k) & made for k in later):
        return
    anchors = [i for i, k in enumerate(later) if k.anchor is not None]
    if not anchors:
        return
    to = at + anchors[-1] + 1
    del kernels[at]
    kernels.insert(to, kernel)
    for i in range(at, to + 1):
        position[id(kernels[i])] = i


def weight_prep(graph: Graph) -> set[int]:
    """Ids (``id(node)``) of the nodes that compute from parameters, buffers, constants
    and each other only (a batch norm's ``rsqrt(var + eps) * weight``): work a deployed
    model's weights need, not its inputs."""
    weights = set(graph.weights)
    found: set[int] = set()
    for node in graph.nodes:
        sources = node.value_inputs()
        if isinstance(node.spec, (g.Constant, g.Splat)) or \
                sources and all(v.id in weights for v in sources):
            found.add(id(node))
            weights.update(v.id for v in node.outputs)
    return found


def _reduction_inputs(graph: Graph) -> set[int]:
    """Ids (``id(node)``) of vector nodes that stay out of a matmul's epilogue and start
    the pass of the reduction they feed: nodes whose results serve only reductions,
    directly or through each other (a norm's square before its mean, its cast to float32
    read by that square and by the scaling that waits for the mean), whose inputs are
    stored anyway (read by others, or made in that pass). In an epilogue, whose tiles
    split the rows a reduction needs whole, they would write values the reduction only
    reads back; Llama's MLP norm then reads the residual sum, which the next residual
    add reads too, in one pass. A node that would make the matmul store a value no one
    else reads (BERT's bias and residual adds before its LayerNorm) stays in the
    epilogue: moving it would move vector work, not save traffic."""
    users = graph.users()
    outputs = {v.id for v in graph.outputs}
    waits: dict[int, frozenset[int]] = {}  # node -> reductions it waits on, through vector nodes
    for node in graph.nodes:
        if isinstance(node.spec, VECTOR_SPECS + (g.View,)):
            above = {r for v in node.value_inputs() if v.producer is not None
                     for r in waits.get(id(v.producer), ())}
            if isinstance(node.spec, g.Reduce):
                above.add(id(node))
            waits[id(node)] = frozenset(above)
    feeds: dict[int, set[int]] = {}  # node -> reductions reading it, through vector nodes
    serving: set[int] = set()
    for node in reversed(graph.nodes):
        if id(node) not in waits or any(v.id in outputs for v in node.outputs):
            continue
        readers = [r for v in node.outputs for r in users.get(v.id, ())]
        below = {r for reader in readers for r in feeds.get(id(reader), ())}
        below |= {id(r) for r in readers if isinstance(r.spec, g.Reduce)}
        feeds[id(node)] = below
        if (readers or isinstance(node.spec, g.View)) and all(
                isinstance(r.spec, g.Reduce) or id(r) in serving or
                waits.get(id(r), frozenset()) & below for r in readers):
            serving.add(id(node))

    def stored(value: g.Value) -> bool:
        made = value.producer
        return made is None or isinstance(made.spec, NO_CODE) or id(made) in found or \
            value.id in outputs or \
            any(id(r) not in serving for r in users.get(value.id, ()))

    found: set[int] = set()
    for node in graph.nodes:
        if id(node) in serving and not isinstance(node.spec, g.View) and \
                all(stored(base_of(v)) for v in node.value_inputs()):
            found.add(id(node))
    return found


def _join(node: Node, current: Kernel | None, owner: dict[int, Kernel],
          position: dict[int, int], deferred: bool = False, from_weights: bool = False
          ) -> Kernel | None:
    """The kernel ``node`` joins: the current one, or else the vector group that
    produced its latest input, if the node can join it there (every other input was
    made before it). The second case keeps a group whole when the program interleaves
    independent work: transformers' attention permutes Q, K and V before it rotates Q
    and K, and each rotary joins the group of its own permute. A ``deferred`` node
    (see :func:`_reduction_inputs`) joins no matmul's epilogue; a node computed
    ``from_weights`` only may join a current group of such nodes (:attr:`Group.weights_only`)."""
    if current is not None and not (deferred and current.anchor is not None) and \
            _made_before(node, current, owner, position) and \
            _try_join(current, node, owner, from_weights):
        return current
    producers = [owner[base_of(v).id] for v in node.value_inputs() if base_of(v).id in owner]
    if not producers:
        return None
    latest = max(producers, key=lambda k: position[id(k)])
    if latest is current or latest.anchor is not None or \
            not _try_join(latest, node, owner, from_weights):
        return None
    return latest


def _made_before(node: Node, kernel: Kernel, owner: dict[int, Kernel],
                 position: dict[int, int]) -> bool:
    """Whether every input of ``node`` is made by ``kernel`` or a kernel before it: not
    so for a value of a vector group that :func:`_sink` moved past ``kernel``."""
    at = position[id(kernel)]
    return all(position[id(owner[base_of(v).id])] <= at for v in node.value_inputs()
               if base_of(v).id in owner)


def _new_group(node: Node, from_weights: bool = False) -> Group:
    group = Group(weights_only=from_weights)
    _add(group, node, _space_of(node))
    return group


def _space_of(node: Node) -> Shape:
    if isinstance(node.spec, g.Reduce):
        return node.inputs[0].shape
    return node.out.shape


def _add(group: Group, node: Node, space: Shape) -> None:
    shift = len(space) - len(group.shape)
    group.whole_axes = {a + shift for a in group.whole_axes}
    group.shape = space
    if isinstance(node.spec, g.Reduce):
        src = node.inputs[0]
        off = len(space) - len(src.shape)
        group.whole_axes |= {a + off for a in node.spec.axes if src.shape[a] != 1}
    if isinstance(node.spec, g.RotateHalf):
        group.whole_axes.add(len(space) - 1)  # it swaps the halves of the last axis
    group.nodes.append(node)
    group.members |= {v.id for v in node.outputs}
    group.reads |= {v.id for v in node.value_inputs()}


def _try_join(kernel: Kernel, node: Node, owner: dict[int, Kernel],
              from_weights: bool = False) -> bool:
    group = kernel.group
    anchor = kernel.anchor
    inputs = node.value_inputs()
    internal = [v for v in inputs if group is not None and v.id in group.members
                or anchor is not None and v.producer is anchor]
    shared = anchor is None and group is not None and any(v.id in group.reads for v in inputs)
    sibling = anchor is None and group is not None and group.weights_only and from_weights \
        and _fits(_space_of(node), group.shape) == group.shape
    if not internal and not shared and not sibling:
        return False
    for v in inputs:
        base = base_of(v)
        if base is not v and owner.get(base.id) is kernel:
            return False  # a view of a value this kernel is still producing
    if isinstance(node.spec, LEAF_ONLY):
        return False
    if anchor is not None:
        if isinstance(node.spec, WHOLE_ROWS + LEAF_ONLY):
            return False
        if anchor.out.dtype.value == "bool":
            return False
        space = anchor.out.shape
        if _fits(_space_of(node), space) != space:
            return False
        if group is None:
            kernel.group = Group(shape=space)
            group = kernel.group
        _add(group, node, space)  # an epilogue: never weights_only
        return True
    if group is None:
        return False
    space = _fits(_space_of(node), group.shape)
    if space is None or len(space) != len(group.shape) and group.whole_axes:
        return False
    if isinstance(node.spec, g.Reduce) and space != node.inputs[0].shape:
        if aligned(node.inputs[0].shape, len(space)) != space:
            return False
    group.weights_only = group.weights_only and from_weights
    _add(group, node, space)
    return True
