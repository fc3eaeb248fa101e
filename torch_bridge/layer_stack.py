"""Finding a model's stack of identical layers, and running the model with only the
first few of them (``archsim.estimate`` simulates those and extends the result to the
whole stack, :func:`archsim.repeated.extend`).

A stack is an ``nn.ModuleList`` or ``nn.Sequential`` (not the model itself) of at least :data:`MIN_LAYERS` modules that are
identical: same class, same submodule tree, same parameter and buffer shapes and
dtypes, and the same plain attributes (numbers, strings, flags) except one that counts
the layer's position (``layer_idx``). A model that alternates layer kinds (sliding
and full attention, dense and mixture-of-experts) differs in those attributes or
shapes, so it is simulated whole. Of several stacks, the one with the most parameters
is taken (an encoder-decoder's other stack is simulated whole).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
import re
from typing import Any

from torch import nn

MIN_LAYERS = 4
"""Stacks shorter than this are simulated whole (three layers are always simulated)."""

KEEP_LAYERS = 3
"""Layers simulated of a stack: the first, one between identical layers, the last
(four would follow engines that alternate two timings from layer to layer more closely
on small models — Gemma-shaped 128-wide: -1.7% -> -0.7% — but take Llama-2-70B's
estimate past 1 GB)."""

_PLAIN = (bool, int, float, str, type(None))


@dataclass(frozen=True)
class LayerStack:
    path: str
    """Module path of the stack in the model (``model.layers``)."""
    parent: nn.Module
    attribute: str
    layers: nn.ModuleList | nn.Sequential

    @property
    def total(self) -> int:
        return len(self.layers)


def find_layer_stack(model: nn.Module) -> LayerStack | None:
    """The model's stack of identical layers with the most parameters, or None."""
    best: tuple[int, LayerStack] | None = None
    for path, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)) or not path \
                or len(module) < MIN_LAYERS:
            continue
        signatures = [_signature(layer) for layer in module]
        counters = _position_counters(signatures)
        signatures = [_without(s, counters) for s in signatures]
        if any(s != signatures[0] for s in signatures[1:]):
            continue
        size = sum(p.numel() for p in module.parameters())
        parent_path, _, attribute = path.rpartition(".")
        stack = LayerStack(path, model.get_submodule(parent_path), attribute, module)
        if best is None or size > best[0]:
            best = (size, stack)
    return best[1] if best else None


@contextmanager
def first_layers(stack: LayerStack, keep: int = KEEP_LAYERS) -> Iterator[None]:
    """The model runs with the first ``keep`` layers of ``stack`` while inside (the
    stack is put back on leaving, also on errors)."""
    first = list(stack.layers)[:keep]
    setattr(stack.parent, stack.attribute, nn.Sequential(*first)
            if isinstance(stack.layers, nn.Sequential) else nn.ModuleList(first))
    try:
        yield
    finally:
        setattr(stack.parent, stack.attribute, stack.layers)


Signature = tuple[tuple[str, type, tuple[tuple[str, Any], ...], tuple[Any, ...], bool], ...]


def work_between_layers(graph: Any, path: str) -> list[str]:
    """Nodes of an exported graph that run between the stack's layers but belong to no
    layer (a parent that applies an activation between its layers in its own loop):
    extending a partial run would leave their work out, so the model runs whole."""
    from compiler.frontend import node_source

    layer = re.compile(re.escape(path) + r"\.(\d+)(?:[.:]|$)")
    nodes = [(n, node_source(n)) for n in graph.nodes if n.op == "call_function"]
    inside = [i for i, (_, source) in enumerate(nodes) if layer.match(source)]
    if not inside:
        return []
    return [source for _, source in nodes[inside[0]:inside[-1]]
            if not layer.match(source)]


def _signature(layer: nn.Module) -> Signature:
    """Per submodule: path, class, plain attributes, tensor shapes and dtypes, mode."""
    parts = []
    for name, module in layer.named_modules():
        attributes = tuple(sorted((key, value) for key, value in vars(module).items()
                                  if not key.startswith("_") and isinstance(value, _PLAIN)))
        tensors = tuple((n, tuple(t.shape), t.dtype, isinstance(t, nn.Parameter))
                        for n, t in (*module.named_parameters(recurse=False),
                                     *module.named_buffers(recurse=False)))
        parts.append((name, type(module), attributes, tensors, module.training))
    return tuple(parts)


def _position_counters(signatures: list[Signature]) -> set[tuple[str, str]]:
    """(submodule, attribute) pairs whose value is the layer's position in every layer
    (``self_attn.layer_idx``)."""
    def plain(signature: Signature) -> dict[tuple[str, str], Any]:
        return {(name, key): value for name, _, attributes, _, _ in signature
                for key, value in attributes}

    layers = [plain(s) for s in signatures]
    return {key for key in layers[0]
            if all(type(v.get(key)) is int and v[key] == i for i, v in enumerate(layers))}


def _without(signature: Signature, counters: set[tuple[str, str]]) -> Signature:
    return tuple((name, cls, tuple((k, v) for k, v in attributes if (name, k) not in counters),
                  tensors, training)
                 for name, cls, attributes, tensors, training in signature)


def stacked_kernel_count(names: tuple[str, ...], path: str, total: int) -> int:
    """``names`` (kernel names: the source of their first node) of a program that kept
    the first layers of the stack at ``path`` of ``total`` layers, over the whole
    stack: each layer not kept adds layer 1's kernels (a middle layer: the first
    follows the embedding, the last fuses with what follows)."""
    pattern = re.compile(re.escape(path) + r"\.(\d+)(?:[.:]|$)")
    per_layer: dict[int, int] = {}
    for name in names:
        match = pattern.match(name)
        if match:
            layer = int(match.group(1))
            per_layer[layer] = per_layer.get(layer, 0) + 1
    kept = max(per_layer, default=-1) + 1
    middle = per_layer.get(1, per_layer.get(0, 0))
    return len(names) + middle * max(total - kept, 0)


__all__ = ["KEEP_LAYERS", "LayerStack", "MIN_LAYERS", "find_layer_stack", "first_layers",
           "stacked_kernel_count", "work_between_layers"]
