"""One way from an ``nn.Module`` to the ATen graph the compiler takes.

``archsim run FILE``, ``archsim.estimate``, ``archsim validate`` and the built-in
workloads all export through :func:`export_model`, so a model gets the same graph,
hence the same numbers, whichever path it takes.
"""

from __future__ import annotations

from typing import Any, Mapping


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

    exported = torch.export.export(module, tuple(args), dict(kwargs or {}))
    return exported.run_decompositions(export_decompositions(),
                                       decompose_custom_triton_ops=True)
