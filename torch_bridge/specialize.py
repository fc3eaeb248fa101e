"""A graph with symbolic sizes, made static for one call's inputs.

Dynamo compiles a graph with a symbolic batch (``s0``) once input shapes change: its
placeholders then include the sizes (``SymInt``), its tensors have shapes like
``(s0, 16)`` and a training forward returns sizes for its backward. The compiler
schedules static shapes only, so the ``torch.compile`` backend compiles such a graph
per call signature (:func:`signature`), for a copy whose ``meta["val"]`` are those of
the concrete inputs (:func:`specialize`): each input shape runs on the device as its
own program, as it would on hardware, where a schedule is built for its sizes.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

_NUMBERS = (int, float, bool)
"""What a size computation evaluates to once its inputs are concrete."""


@dataclass(frozen=True)
class Specialized:
    """A graph made static: ``gm`` takes only the call inputs at positions ``takes``
    (the sizes are folded into it) and returns the sizes its original returned as
    plain numbers."""

    gm: torch.fx.GraphModule
    takes: tuple[int, ...]


def has_symbolic_sizes(gm: torch.fx.GraphModule) -> bool:
    """True when some placeholder is a size or a tensor of symbolic shape."""
    return any(_symbolic(n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder")


def _symbolic(val: Any) -> bool:
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(val, torch.Tensor):
        return any(not isinstance(d, int) for d in (*val.shape, *val.stride()))
    return False


def signature(inputs: Sequence[Any]) -> Hashable:
    """What a specialization is valid for (its guard): each tensor's shape, strides,
    dtype and device type, each number's value."""
    return tuple((tuple(a.shape), a.stride(), a.dtype, a.device.type)
                 if isinstance(a, torch.Tensor) else a for a in inputs)


def specialize(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> Specialized:
    """A copy of ``gm`` for these inputs: ``meta["val"]`` propagated from them by fake
    tensors without symbols, size computations and size placeholders folded into the
    numbers they now are. An op whose result depends on the data (``item()``) cannot be
    made static and raises (the caller runs the graph eagerly)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    gm = copy.deepcopy(gm)
    mode = FakeTensorMode()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    fakes = [_fake(mode, node, arg) for node, arg in zip(placeholders, inputs)]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
    numbers = [n for n in gm.graph.nodes if n.op in ("placeholder", "call_function")
               and isinstance(n.meta.get("val"), _NUMBERS)]
    for node in numbers:
        _fold(gm.graph, node)
    gm.recompile()
    return Specialized(gm, tuple(i for i, n in enumerate(placeholders) if n not in numbers))


def _fake(mode: Any, node: torch.fx.Node, arg: Any) -> Any:
    """The fake input of ``node`` for ``arg``; an effect token (aot_autograd passes
    ``None``) is the empty tensor it stands for."""
    if isinstance(arg, torch.Tensor):
        return mode.from_tensor(arg, static_shapes=True)
    if arg is None and isinstance(node.meta.get("val"), torch.Tensor):
        with mode:
            return torch.empty(0)
    return arg


def _fold(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """Replace ``node`` (a number now) by its value in every user, and drop it."""
    value = node.meta["val"]
    for user in list(node.users):
        user.args = torch.fx.node.map_arg(user.args, lambda n: value if n is node else n)
        user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda n: value if n is node else n)
    graph.erase_node(node)


__all__ = ["Specialized", "has_symbolic_sizes", "signature", "specialize"]
