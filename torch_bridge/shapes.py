"""Shapes-only runs of a PyTorch model: what ``archsim.estimate`` and every
performance-only run of :func:`archsim.app.run` do in the bridge layer.

- :func:`on_meta` / :func:`meta_like`: the model and its inputs mirrored on ``meta``
  (parameters and buffers replaced by meta tensors of the same shape and dtype; the
  caller's model is not touched and no weight is copied);
- :func:`export_shapes`: ``torch.export``, decomposed to core ATen (attention kept whole
  for the compiler's flash-attention kernel), with only the first layers of a stack of
  identical layers (:mod:`torch_bridge.layer_stack`), and :func:`whole_stack` to extend
  the result to the whole stack;
- :func:`estimate_options`: the compile options of a performance-only run.

Cycles equal those of a functional run of the same program, so a 7B-parameter model
can be timed in a few hundred MB of memory.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from archsim.result import SimResult
    from torch_bridge.layer_stack import LayerStack


def estimate_options(all_layers: bool = False) -> Any:
    """Compile options of a performance-only run: a large matmul at the end of the
    program is compiled in its first panels of output tiles and extended
    (:mod:`compiler.kernels.matmul_panels`), unless ``all_layers``."""
    from compiler.kernels.matmul_panels import PARTIAL_COMMANDS
    from compiler.options import CompileOptions

    return CompileOptions(partial_matmul_commands=0 if all_layers else PARTIAL_COMMANDS)


def export_shapes(model: torch.nn.Module, args: tuple[Any, ...],
                  kwargs: Mapping[str, Any] | None = None, all_layers: bool = False
                  ) -> tuple[torch.export.ExportedProgram, LayerStack | None]:
    """``model(*args, **kwargs)`` exported as one forward pass returning tensors
    (ModelOutput flattened, no KV cache object) for a shapes-only run — with only the
    first layers of its stack of identical layers, returned with it, unless
    ``all_layers`` or the model works between its layers (an activation in the
    parent's loop, which a partial run would leave out)."""
    import compiler
    from torch_bridge.layer_stack import find_layer_stack, first_layers, work_between_layers
    from torch_bridge.model_outputs import bind_arguments

    import torch

    # tensors are inputs of the graph; other arguments (flags, None) are bound into it
    tensors = {k: v for k, v in (kwargs or {}).items() if isinstance(v, torch.Tensor)}
    forward, args = bind_arguments(
        model, args, {k: v for k, v in (kwargs or {}).items() if k not in tensors})
    stack = None if all_layers else find_layer_stack(model)
    if stack is not None:
        with first_layers(stack):
            exported = compiler.export_model(forward, args, tensors)
        if not work_between_layers(exported.graph, stack.path):
            return exported, stack
    return compiler.export_model(forward, args, tensors), None


def whole_stack(result: SimResult, stack: LayerStack | None) -> SimResult:
    """The result of a run exported by :func:`export_shapes`, over the whole stack."""
    if stack is None:
        return result
    from archsim.repeated import extend

    return extend(result, stack.path, stack.total)


def any_meta(value: Any) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return value.is_meta
    if isinstance(value, (list, tuple)):
        return any(any_meta(v) for v in value)
    if isinstance(value, dict):
        return any(any_meta(v) for v in value.values())
    return False


def meta_like(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value if value.is_meta else torch.empty_strided(
            value.shape, value.stride(), dtype=value.dtype, device="meta")
    if isinstance(value, (list, tuple)):
        return type(value)(meta_like(v) for v in value)
    return value


def on_meta(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` itself if all its tensors are on meta; else a copy whose parameters
    and buffers are meta tensors (deep-copied with those tensors pre-placed in the memo,
    so no weight data is copied)."""
    import torch

    tensors: Sequence[torch.Tensor] = [*model.parameters(), *model.buffers()]
    if all(t.is_meta for t in tensors):
        return model
    memo: dict[int, Any] = {}
    for t in tensors:
        meta = torch.empty_like(t, device="meta")
        memo[id(t)] = (torch.nn.Parameter(meta, requires_grad=t.requires_grad)
                       if isinstance(t, torch.nn.Parameter) else meta)
    return copy.deepcopy(model, memo)


__all__ = ["any_meta", "estimate_options", "export_shapes", "meta_like", "on_meta",
           "whole_stack"]
