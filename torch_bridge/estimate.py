"""``archsim.estimate``: a model's latency on an NPU from shapes alone (no weights, no data).

Defined in the bridge layer (it exports and compiles a PyTorch model); ``archsim``
re-exports it lazily.

When the inputs are on the ``meta`` device, the model is mirrored there too
(parameters and buffers replaced by meta tensors of the same shape and dtype; the
caller's model is not touched and no weight is copied); otherwise it is exported as it
is (``torch.export`` traces with fake tensors and copies nothing). It is exported with
``torch.export``, decomposed to core ATen
(keeping attention whole for the compiler's flash-attention kernel), compiled with
``compiler.compile_graph`` and simulated performance-only. Cycles equal
those of a functional run of the same program, so a 7B-parameter model can be timed in
a few hundred MB of memory.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from archsim.config import NpuConfig
    from archsim.result import SimResult
    from torch_bridge.layer_stack import LayerStack


def estimate(model: torch.nn.Module, example_inputs: Any, config: str | Path | NpuConfig = "atom",
             *, kwargs: Mapping[str, Any] | None = None, options: Any = None,
             all_layers: bool = False) -> SimResult:
    """Simulate one call ``model(*example_inputs, **kwargs)`` performance-only on
    ``config`` (preset name, YAML path or ``NpuConfig``) and return its ``SimResult``.

    ``example_inputs`` is a tensor or a tuple of tensors (any device, or ``meta``); only
    their shapes and dtypes matter. The model runs as it is (``train()`` / ``eval()``
    mode included). ``options`` are ``compiler.CompileOptions``.

    A stack of at least four identical layers (``model.layers`` of a transformer) is
    simulated in part: its first three layers are compiled and simulated and the result
    is extended to the whole stack, each other layer adding what the middle ones added
    (``result.layers`` says so; :mod:`archsim.repeated`) — unless the model does work
    of its own between its layers, which a partial run would leave out.
    Likewise a matmul ending the program that would take more than
    ``compiler.kernels.matmul_panels.PARTIAL_COMMANDS`` commands (a 16384^3 GEMM) is
    compiled and simulated in its first panels of output tiles and extended to the
    rest (``result.tiles``) when ``options`` are not given.
    ``all_layers=True`` simulates every layer and every tile.
    """
    import torch

    import compiler
    from archsim.config import NpuConfig, load_config
    from compiler.ir.collector import paused

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"estimate expects an nn.Module, got {type(model).__name__}")
    npu_config = config if isinstance(config, NpuConfig) else load_config(str(config))
    inputs = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    kwargs = dict(kwargs or {})
    if _any_meta((inputs, kwargs)):  # shapes only: the model mirrored on meta too
        model = _on_meta(model)
        inputs = tuple(_meta_like(x) for x in inputs)
        kwargs = {k: _meta_like(v) for k, v in kwargs.items()}
    # else exported as it is (torch.export traces with fake tensors, copying nothing),
    # so tensors the forward builds from Python values (index lists) stay known
    options = options or estimate_options(all_layers)
    # Python's cyclic collector kept out of the export as it is out of compiling and
    # simulating (Llama-2-70B: 190 collections in the export, 1.2 s): one pause over all
    with paused():
        exported, stack = export_shapes(model, tuple(inputs), kwargs, all_layers)
        compiled = compiler.compile_graph(exported, npu_config, options)
        return whole_stack(compiled.simulate(), stack)


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
    ``all_layers`` or the model works between its layers (:func:`estimate`)."""
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


def _any_meta(value: Any) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return value.is_meta
    if isinstance(value, (list, tuple)):
        return any(_any_meta(v) for v in value)
    if isinstance(value, dict):
        return any(_any_meta(v) for v in value.values())
    return False


def _meta_like(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value if value.is_meta else torch.empty_strided(
            value.shape, value.stride(), dtype=value.dtype, device="meta")
    if isinstance(value, (list, tuple)):
        return type(value)(_meta_like(v) for v in value)
    return value


def _on_meta(model: torch.nn.Module) -> torch.nn.Module:
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


__all__ = ["estimate", "estimate_options", "export_shapes", "whole_stack"]
