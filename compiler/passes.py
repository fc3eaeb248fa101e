"""Graph passes: small frozen objects with a ``name`` and ``apply``."""

from __future__ import annotations

from dataclasses import dataclass, replace

from compiler import graph as g
from compiler.graph import Graph, base_of
from compiler.plan import ANCHORS, aligned, weight_prep


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


_SINKABLE = (g.Unary, g.Binary, g.Select, g.Cast, g.Reduce)
_COMPUTED = (g.MatMul, g.Conv2d, g.Pool2d, g.Unary, g.Binary, g.Select, g.Cast, g.Reduce,
             g.Broadcast, g.Attention)


@dataclass(frozen=True)
class SinkViewsPass:
    """Move reshapes below elementwise ops and trailing-axis reductions when the
    reshape keeps the trailing dims, so ``addmm -> view -> gelu`` becomes
    ``addmm -> gelu -> view`` and fuses into the matmul epilogue (no DRAM round trip).
    The original output value becomes the view, so consumers need no rewiring. A value
    read as a gather's table or by a strided slice stays where it is: those address it
    by its own dims, so it must not become a view (MoE's ``(out * weights)[inv_perm]``
    and GPT-OSS's interleaved ``gate_up[..., ::2]`` after a reduction)."""

    name: str = "sink-views"

    def apply(self, graph: Graph) -> Graph:
        stored = read_as_stored(graph)
        nodes: list[g.Node] = []
        for node in graph.nodes:
            sunk = None if node.out.id in stored else _sink(node)
            nodes += sunk or [node]
        graph.nodes = nodes
        return graph


def read_as_stored(graph: Graph) -> set[int]:
    """Values read by kernels that address their operands by their own dims (convolution
    inputs and weights, pooling windows, strided slices, gather tables): sinking a
    reshape below the op that computes one would leave it a reshaped view, which those
    kernels cannot read (Wav2Vec2's group-normed features into its next 1-D
    convolution, its weight-normed positional convolution's weights, both read through
    a view adding a unit dim; Mixtral's
    ``weighted_out[inv_perm]``; GPT-OSS's interleaved ``gate_up[..., ::2]``)."""
    found: set[int] = set()
    for node in graph.nodes:
        spec = node.spec
        if isinstance(spec, g.Conv2d):
            # and what a view of them views: a 1-D convolution reads its input and
            # weights as views adding a unit dim, which only the stored tensor allows
            for x in node.value_inputs():
                while True:
                    found.add(x.id)
                    if x.producer is None or not isinstance(x.producer.spec, g.View):
                        break
                    x = x.producer.inputs[0]
        elif isinstance(spec, (g.Pool2d, g.Gather)) or \
                isinstance(spec, g.Slice) and spec.step != 1:
            found.add(node.inputs[0].id)
    return found


def _trailing(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    t = 0
    while t < min(len(a), len(b)) and a[len(a) - 1 - t] == b[len(b) - 1 - t]:
        t += 1
    return t


def _sink(node: g.Node) -> list[g.Node] | None:
    if not isinstance(node.spec, _SINKABLE):
        return None
    views = [x for x in node.value_inputs()
             if x.producer is not None and isinstance(x.producer.spec, g.View) and
             x.producer.inputs[0].producer is not None and
             isinstance(x.producer.inputs[0].producer.spec, _COMPUTED)]
    if not views:
        return None
    # sink below the view of a matmul/conv result if there is one (the epilogue to
    # join), of the output's own shape unless the node reduces; other inputs that are
    # views of same-shaped results, or of results they only add or drop leading unit
    # dims to (a norm's ``x * rsqrt(mean)``, whose [1, 1, 1] factor views a [1, 1]
    # one), take their sources too
    reduce = isinstance(node.spec, g.Reduce)
    anchored = [x for x in views if isinstance(x.producer.inputs[0].producer.spec, ANCHORS)]
    fitting = [x for x in anchored or views if reduce or x.shape == node.out.shape]
    if not fitting:
        return None
    view = fitting[-1]
    source = view.producer.inputs[0]
    t = _trailing(view.shape, source.shape)
    if t == 0 or len(view.shape) == len(source.shape) and t == len(view.shape):
        return None
    siblings = {x.id: x.producer.inputs[0] for x in views
                if x is not view and (x.shape == view.shape and
                                      x.producer.inputs[0].shape == source.shape or
                                      _unit_view(x, t))}
    if len(views) - 1 != len(siblings):
        return None
    shift = len(source.shape) - len(view.shape)
    spec = node.spec
    if reduce:
        if any(a < len(view.shape) - t for a in spec.axes):
            return None
        spec = g.Reduce(spec.kind, tuple(a + shift for a in spec.axes))
    extra: list[g.Node] = []
    inputs = []
    for x in node.inputs:
        if x is view:
            inputs.append(source)
        elif isinstance(x, g.Value) and x.id in siblings:
            inputs.append(siblings[x.id])
        elif isinstance(x, g.Value) and len(x.shape) > t:
            if any(n != 1 for n in x.shape[:-t]):
                return None
            trimmed = g.Value(x.shape[-t:], x.dtype, f"{x.name}_t")
            extra.append(g.Node(g.View(), (x,), (trimmed,), node.source))
            trimmed.producer = extra[-1]
            inputs.append(trimmed)
        else:
            inputs.append(x)
    out = node.out
    if reduce:
        new_shape = tuple(1 if i in spec.axes else n for i, n in enumerate(source.shape))
    else:
        new_shape = source.shape
    inner = g.Value(new_shape, out.dtype, f"{out.name}_s")
    computed = g.Node(spec, tuple(inputs), (inner,), node.source)
    inner.producer = computed
    back = g.Node(g.View(), (inner,), (out,), node.source)
    out.producer = back
    return extra + [computed, back]


def _unit_view(view: g.Value, t: int) -> bool:
    """Whether ``view`` only adds or drops leading unit dims to the value it views, and
    that value spans at most the trailing ``t`` dims: read in its place, it broadcasts
    the same way over a space whose trailing ``t`` dims are the view's."""
    source = view.producer.inputs[0]
    return len(source.shape) <= t and all(n == 1 for n in view.shape[:-t]) and \
        aligned(source.shape, t) == aligned(view.shape[-t:], t)


@dataclass(frozen=True)
class AttentionLayoutPass:
    """Attention inputs that are [B, S, H, D] tensors permuted to [B, H, S, D] (how
    transformer code splits heads) are read in place by the attention kernel, which
    addresses each head in the stored layout; an output only permuted back to
    [B, S, H, Dv] (how it merges heads for the output projection) is written in that
    layout. The permutes become dead code: XLA's layout assignment does the same
    (the Cloud TPU guide: transposing a matmul operand or result is effectively free).
    Keys and values that repeat grouped-query heads once per query head (transformers'
    ``repeat_kv``, which it writes whenever it passes SDPA a mask) are read as the heads
    they repeat, since the kernel maps query head h to key head h // R itself."""

    name: str = "attention-layout"

    def apply(self, graph: Graph) -> Graph:
        changed = False
        users = graph.users()
        outputs = {v.id for v in graph.outputs}
        for node in graph.nodes:
            if not isinstance(node.spec, g.Attention):
                continue
            inputs, flags = list(node.inputs), list(node.spec.heads_after_seq)
            shared = _shared_heads(node) if not any(flags) else None
            if shared is not None:
                inputs[1:3] = shared
                node.inputs, changed = tuple(inputs), True
            for i in range(3):
                if _heads_swap(inputs[i].producer) and not flags[i]:
                    inputs[i], flags[i] = inputs[i].producer.inputs[0], True
            if any(flags) and tuple(flags) != node.spec.heads_after_seq:
                node.inputs = tuple(inputs)
                node.spec = replace(node.spec, heads_after_seq=tuple(flags))
                changed = True
            merge = None if node.spec.out_heads_after_seq else _heads_merge(node, users, outputs)
            if merge is not None:
                merged = merge.out  # the permute's result, now the kernel's
                merged.producer = node
                node.outputs = (merged,) + node.outputs[1:]
                graph.nodes.remove(merge)  # the views before it are dead code now
                node.spec = replace(node.spec, out_heads_after_seq=True)
                changed = True
        return DeadCodePass().apply(graph) if changed else graph


def _shared_heads(node: g.Node) -> tuple[g.Value, g.Value] | None:
    """An attention's keys and values as the grouped-query heads its inputs repeat."""
    keys, values = (_repeated_heads(node.inputs[i]) for i in (1, 2))
    if keys is None or values is None or keys.shape[1] != values.shape[1] or \
            node.inputs[0].shape[1] % keys.shape[1]:
        return None
    return keys, values


def _repeated_heads(value: g.Value) -> g.Value | None:
    """``x`` [B, KV, S, D] when ``value`` is ``x[:, :, None].expand(B, KV, R, S, D)``
    viewed as [B, KV * R, S, D] (each key head repeated for R query heads), else None."""
    view = value.producer
    if view is None or not isinstance(view.spec, g.View) or len(value.shape) != 4:
        return None
    broadcast = view.inputs[0].producer
    if broadcast is None or not isinstance(broadcast.spec, g.Broadcast) or \
            len(broadcast.out.shape) != 5:
        return None
    b, kv, repeats, s, d = broadcast.out.shape
    unsqueezed = broadcast.inputs[0]
    source = unsqueezed.producer
    if value.shape != (b, kv * repeats, s, d) or unsqueezed.shape != (b, kv, 1, s, d) or \
            source is None or not isinstance(source.spec, g.View) or \
            source.inputs[0].shape != (b, kv, s, d):
        return None
    return source.inputs[0]


def _heads_swap(node: g.Node | None) -> bool:
    """A permute exchanging the heads and sequence dims of a 4-D tensor."""
    return node is not None and isinstance(node.spec, g.Permute) and \
        tuple(node.spec.perm) == (0, 2, 1, 3)


def _heads_merge(node: g.Node, users: dict[int, list[g.Node]], outputs: set[int]
                 ) -> g.Node | None:
    """The permute that is the only reader of an attention's output (through views that
    end in the output's own shape, as batched-matmul code flattens and restores the
    heads), if it swaps the heads back behind the sequence."""
    value = node.out
    while value.id not in outputs and len(users.get(value.id, ())) == 1:
        reader = users[value.id][0]
        if isinstance(reader.spec, g.View):
            value = reader.out
            continue
        return reader if _heads_swap(reader) and value.shape == node.out.shape else None
    return None


@dataclass(frozen=True)
class HoistWeightPrepPass:
    """Move nodes that read only weights (parameters, buffers), constants and each other (e.g. batch
    norm's ``rsqrt(var + eps)``) ahead of the rest, so they do not cut the fusion of
    a conv/matmul with its epilogue."""

    name: str = "hoist-weight-prep"

    def apply(self, graph: Graph) -> Graph:
        prep = weight_prep(graph)
        graph.nodes = [n for n in graph.nodes if id(n) in prep] + \
            [n for n in graph.nodes if id(n) not in prep]
        return graph


@dataclass(frozen=True)
class PadIntoConvPass:
    """A zero pad of an image that only convolutions read, as their image, becomes
    their padding (by addressing: the padded copy is never made). TensorFlow-style
    "same" padding comes as an explicit pad, ``(0, 1, 0, 1)`` before a stride-2
    convolution (transformers' MobileNetV2 and EfficientNet): 18 pads, a fifth of
    MobileNetV2's time on tpu-v4, each a copy of the whole activation. Runs before the
    layout passes, on NCHW convolutions."""

    name: str = "pad-into-conv"

    def apply(self, graph: Graph) -> Graph:
        users = graph.users()
        outputs = {v.id for v in graph.outputs}
        for node in graph.nodes:
            spec = node.spec
            x = node.inputs[0] if isinstance(spec, g.Conv2d) else None
            pad = x.producer if isinstance(x, g.Value) else None
            if pad is None or not isinstance(pad.spec, g.Pad) or spec.channels_last_in or \
                    pad.spec.value != 0.0 or min(pad.spec.pads) < 0 or x.id in outputs:
                continue
            image = pad.inputs[0]
            if not isinstance(image, g.Value) or base_of(image) is not image or \
                    len(image.shape) != 4 or not all(
                        isinstance(r.spec, g.Conv2d) and r.inputs[0] is x and
                        x not in r.inputs[1:] for r in users.get(x.id, ())):
                continue
            top, bottom, left, right = pad.spec.pads
            (ph, pw), (eh, ew) = spec.padding, spec.pads_end
            node.spec = replace(spec, padding=(ph + top, pw + left),
                                padding_end=(eh + bottom, ew + right))
            node.inputs = (image,) + node.inputs[1:]
        return graph
