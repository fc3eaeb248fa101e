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
    matching (written-out attention) and lowerings are written for this form.

    One trace where torch allows it (:func:`_export_decomposed`), else the public two:
    ``torch.export.export`` then ``run_decompositions``."""
    import torch
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    table = export_decompositions()
    try:
        try:
            return _export_decomposed(module, tuple(args), dict(kwargs or {}), table)
        except GuardOnDataDependentSymNode:
            raise
        except Exception:  # noqa: BLE001 - the public path gives the user its own error
            exported = torch.export.export(module, tuple(args), dict(kwargs or {}))
            return exported.run_decompositions(table, decompose_custom_triton_ops=True)
    except GuardOnDataDependentSymNode as exc:
        raise ExportError(_data_dependent_message(module, exc)) from None


def _export_decomposed(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                       table: dict[Any, Any]) -> Any:
    """The decomposed program in one trace: torch.export's ATen-level export
    (``_export(pre_dispatch=False)``, the path ``run_decompositions`` retraces through)
    with the decomposition table handed to that trace. The public path traces twice
    (training IR, then decomposition); this one gives the same graph — node names,
    module paths and signature (checked by ``tests/compiler/test_export.py``) — in
    about 60% of the time, which matters for ``archsim run`` (export is its largest part
    after importing torch). torch 2.13's private entry point: if it moves, the caller
    falls back to the public path."""
    import functools

    _trace, _override_composite_implicit_decomp, split_table = _private_export_api()
    # as run_decompositions does: composite ops the table keeps (attention) are
    # preserved by overriding their implicit decomposition during the trace
    composite, table = split_table(dict(table))
    to_aten = _trace._export_to_aten_ir
    _trace._export_to_aten_ir = functools.partial(to_aten, decomp_table=table,
                                                  decompose_custom_triton_ops=True)
    try:
        with _override_composite_implicit_decomp(composite):
            return _trace._export(module, args, kwargs, strict=False, pre_dispatch=False)
    finally:
        _trace._export_to_aten_ir = to_aten


def _private_export_api() -> tuple[Any, Any, Any]:
    """The torch 2.13 internals :func:`_export_decomposed` uses (ImportError if moved)."""
    from torch.export import _trace
    from torch.export.exported_program import (
        _override_composite_implicit_decomp,
        _split_decomp_table_to_cia_and_python_decomp,
    )

    return _trace, _override_composite_implicit_decomp, \
        _split_decomp_table_to_cia_and_python_decomp


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
