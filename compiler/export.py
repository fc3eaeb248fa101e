"""One way from an ``nn.Module`` to the ATen graph the compiler takes.

``archsim run FILE``, ``archsim.estimate``, ``archsim validate`` and the built-in
workloads all export through :func:`export_model`, so a model gets the same graph,
hence the same numbers, whichever path it takes.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from archsim.errors import ExportError


def export_decompositions() -> dict[Any, Any]:
    """torch.export's default decomposition table minus scaled_dot_product_attention, so
    attention reaches the compiler whole and gets the flash-attention kernel:
    ``torch.export.export(m, args).run_decompositions(export_decompositions())``."""
    import torch

    table = torch.export.default_decompositions()
    table.pop(torch.ops.aten.scaled_dot_product_attention.default, None)
    return table


def export_model(module: Any, args: tuple[Any, ...],
                 kwargs: Mapping[str, Any] | None = None) -> Any:
    """``torch.export``, then decomposition to core ATen with attention kept whole and
    user ``triton_op`` kernels opened into their Triton launches. The compiler's pattern
    matching (written-out attention) and lowerings are written for this form."""
    import torch
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    try:
        exported = torch.export.export(module, tuple(args), dict(kwargs or {}))
    except GuardOnDataDependentSymNode as exc:
        raise ExportError(_data_dependent_message(module, exc)) from None
    return exported.run_decompositions(export_decompositions(),
                                       decompose_custom_triton_ops=True)


def _data_dependent_message(module: Any, exc: Exception) -> str:
    found = re.search(r"Caused by: \(([^)]*)\)", str(exc))
    where = f" at {found.group(1)}" if found else ""
    model = getattr(module, "model", module)  # the user's model inside Forward
    return (f"torch.export cannot trace {type(model).__name__} into one graph: its forward "
            f"pass branches on a tensor's values{where} (data-dependent control flow), "
            f"which a compiled program cannot do")


LIFTED_FOLD_ELEMENTS = 4096
"""Largest tensor constant lifted by torch.export that is folded into the graph."""


def lifted_constants(program: Any) -> dict[str, Any]:
    """Tensor constants ``torch.export`` lifted to inputs (a tensor the forward builds
    from Python values, such as Falcon's ``qkv[..., [-2], :]`` index), by placeholder:
    small integer ones (indices, masks). The frontend folds real ones into the graph like
    ``get_attr`` constants, so lowerings can read them (``GraphBuilder.constant_of``);
    meta ones (a shapes-only export lost their values) stay inputs that lowerings know
    are constants. Floating ones (a weight captured from a closure) stay inputs, like
    parameters."""
    import torch

    if not isinstance(program, torch.export.ExportedProgram):
        return {}
    found = {}
    for spec in program.graph_signature.input_specs:
        tensor = program.constants.get(spec.target) if spec.target else None
        if spec.kind.name == "CONSTANT_TENSOR" and isinstance(tensor, torch.Tensor) and \
                tensor.numel() <= LIFTED_FOLD_ELEMENTS \
                and not tensor.is_floating_point() and not tensor.is_complex():
            found[spec.arg.name] = tensor
    return found
