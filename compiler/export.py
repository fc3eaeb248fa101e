"""One way from an ``nn.Module`` to the ATen graph the compiler takes.

``archsim run FILE``, ``archsim.estimate``, ``archsim validate`` and the built-in
workloads all export through :func:`export_model`, so a model gets the same graph,
hence the same numbers, whichever path it takes.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator
from typing import Any
from collections.abc import Mapping

from archsim.errors import ArchsimError, ExportError


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
    matching (written-out attention) and lowerings are written for this form.

    One trace where torch allows it (:func:`_export_decomposed`), else the public two:
    ``torch.export.export`` then ``run_decompositions``. A model torch refuses is an
    :class:`ExportError`."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    try:
        with _quiet_loggers():
            return _export_decomposed_or_public(module, tuple(args), dict(kwargs or {}))
    except GuardOnDataDependentSymNode as exc:
        raise ExportError(_data_dependent_message(module, exc)) from None
    except ArchsimError:
        raise
    except Exception as exc:  # torch's own error, kept as the cause
        raise ExportError(_failure_message(module, exc)) from exc


def _export_decomposed_or_public(module: Any, args: tuple[Any, ...],
                                 kwargs: dict[str, Any]) -> Any:
    """One trace (:func:`_export_decomposed`); on any failure but a data-dependent
    branch (which the public path would meet again), torch's public two-trace path, so
    a model the fast path cannot take still exports and a failing one gets the public
    path's error."""
    import torch
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    table = export_decompositions()
    with _no_stack_traces():
        try:
            return _export_decomposed(module, args, kwargs, table)
        except GuardOnDataDependentSymNode:
            raise
        except Exception:  # noqa: BLE001
            exported = torch.export.export(module, args, kwargs)
            return exported.run_decompositions(table, decompose_custom_triton_ops=True)


QUIET_DURING_EXPORT = ("torch._subclasses.fake_tensor",)
"""Loggers silenced while a model exports: torch's fake tensors log every op that fails
on its shapes (a Linear(4, 4) given 5 features) with its whole traceback, ~220 lines on
stderr, then raise the error :func:`export_model` makes one line of."""


@contextlib.contextmanager
def _quiet_loggers() -> Iterator[None]:
    """:data:`QUIET_DURING_EXPORT` at CRITICAL for the export, their levels restored
    after (a caller's own logging setup is left as it was)."""
    import logging

    loggers = [logging.getLogger(name) for name in QUIET_DURING_EXPORT]
    before = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, before):
            logger.setLevel(level)


@contextlib.contextmanager
def _no_stack_traces() -> Iterator[None]:
    """The trace records no Python stack per graph node (``node.meta["stack_trace"]``,
    which nothing downstream reads; sources are module paths): a sixth of GPT-2's export
    time. torch's own switch, ``torch.fx.config.do_not_emit_stack_traces``, restored
    after."""
    import torch.fx.config

    before = torch.fx.config.do_not_emit_stack_traces
    torch.fx.config.do_not_emit_stack_traces = True
    try:
        yield
    finally:
        torch.fx.config.do_not_emit_stack_traces = before


def _export_decomposed(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                       table: dict[Any, Any]) -> Any:
    """The decomposed program in one trace: torch.export's ATen-level export
    (``_export(pre_dispatch=False)``, the path ``run_decompositions`` retraces through)
    with the decomposition table handed to that trace. The public path traces twice
    (training IR, then decomposition); this one gives the same graph — node names,
    module paths and signature (checked by ``tests/compiler/test_export.py``) — in
    about 60% of the time, which matters for ``archsim run`` (export is its largest part
    after importing torch). torch 2.13's private entry point: if it moves, the caller
    falls back to the public path. The table reaches the trace by swapping a module
    global of ``torch.export._trace`` for its duration (restored after), so exports must
    not run concurrently in threads of one process (sweeps use processes)."""
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


def _failure_message(module: Any, exc: Exception) -> str:
    """One line for an export torch refused: the model, torch's error type and the first
    line of its message (the whole error stays the ExportError's ``__cause__``)."""
    model = getattr(module, "model", module)  # the user's model inside Forward
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    first = first if len(first) <= 240 else first[:237] + "..."
    return (f"torch.export cannot trace {type(model).__name__} into one graph: "
            f"{type(exc).__name__}: {first}")


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
