"""One way from an ``nn.Module`` to the ATen graph the compiler takes.

``archsim run FILE``, ``archsim.estimate``, ``archsim validate`` and the built-in
workloads all export through :func:`export_model`, so a model gets the same graph,
hence the same numbers, whichever path it takes.
"""

from __future__ import annotations

import math
from typing import Any, Mapping


def export_decompositions() -> dict[Any, Any]:
    """torch.export's default decomposition table minus scaled_dot_product_attention, so
    attention reaches the compiler whole and gets the flash-attention kernel:
    ``torch.export.export(m, args).run_decompositions(export_decompositions())``."""
    import torch

    table = torch.export.default_decompositions()
    table.pop(torch.ops.aten.scaled_dot_product_attention.default, None)
    table[torch.ops.aten.linear.default] = _folded_linear
    default_matmul = table[torch.ops.aten.matmul.default]
    table[torch.ops.aten.matmul.default] = lambda a, b: _folded_matmul(a, b, default_matmul)
    return table


def _folded_linear(x: Any, weight: Any, bias: Any = None) -> Any:
    """``aten.linear`` as ATen's own kernel writes it for a contiguous input (``addmm``
    with the bias, ``mm`` without, on the input's rows), whatever the input's strides.
    ATen instead picks ``expand`` + ``bmm`` when the batch dims cannot be viewed as rows,
    and strides are not the same on every door: SDPA's output is laid out (B, L, H, E)
    by CPU's flash kernel but (B, H, L, E) on meta, so SegFormer's exported graph
    differed between ``archsim run`` and a meta ``archsim.estimate``. The reshape is a
    copy on such an input in torch; archsim's graph has no strides, so both doors get
    the same graph."""
    import torch

    aten = torch.ops.aten
    if x.dim() < 2:
        out = aten.matmul.default(x, aten.t.default(weight))
        return out if bias is None else aten.add.Tensor(out, bias)
    rows = aten.reshape.default(x, [math.prod(x.shape[:-1]), x.shape[-1]])
    if bias is not None and x.dim() <= 3:
        out = aten.addmm.default(bias, rows, aten.t.default(weight))
    else:
        out = aten.mm.default(rows, aten.t.default(weight))
        if bias is not None:
            out = aten.add.Tensor(out, bias)
    return out if x.dim() == 2 else aten.view.default(out, [*x.shape[:-1], weight.shape[0]])


def _folded_matmul(a: Any, b: Any, default: Any) -> Any:
    """``[..., M, K] @ [K, N]`` as one ``mm`` on the rows whatever ``a``'s strides (see
    :func:`_folded_linear`); other shapes as torch decomposes them."""
    import torch

    if a.dim() < 3 or b.dim() != 2:
        return default(a, b)
    aten = torch.ops.aten
    out = aten.mm.default(aten.reshape.default(a, [math.prod(a.shape[:-1]), a.shape[-1]]), b)
    return aten.view.default(out, [*a.shape[:-1], b.shape[-1]])


def export_model(module: Any, args: tuple[Any, ...],
                 kwargs: Mapping[str, Any] | None = None) -> Any:
    """``torch.export``, then decomposition to core ATen with attention kept whole and
    user ``triton_op`` kernels opened into their Triton launches. The compiler's pattern
    matching (written-out attention) and lowerings are written for this form."""
    import torch

    exported = torch.export.export(module, tuple(args), dict(kwargs or {}))
    return exported.run_decompositions(export_decompositions(),
                                       decompose_custom_triton_ops=True)


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
