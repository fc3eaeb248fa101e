"""One way from an ``nn.Module`` to the ATen graph the compiler takes.

``archsim run FILE``, ``archsim.estimate`` and the built-in workloads all export
through :func:`export_model`, so a model gets the same graph, hence the same numbers,
whichever path it takes.
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
    """``torch.export``, then, when the graph holds an op the compiler has no lowering
    for (a user ``triton_op``, a composite op), decompose to core ATen with attention
    kept whole and Triton kernels opened into their launches. Decomposition costs
    about as much as the export itself, so a graph the compiler takes whole skips it."""
    import torch

    exported = torch.export.export(module, tuple(args), dict(kwargs or {}))
    if not needs_decomposition(exported.graph_module):
        return exported
    return exported.run_decompositions(export_decompositions(),
                                       decompose_custom_triton_ops=True)


def needs_decomposition(graph_module: Any) -> bool:
    """True when a call on data (or in a region the graph wraps) has no lowering. Calls
    on constants alone (a causal mask built from ``ones`` and ``tril``) are folded by the
    frontend and need none."""
    import operator

    import torch

    from compiler.frontend import IGNORED, INLINED
    from compiler.lowerings import LOWERINGS

    constant: set[Any] = set()
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        name = getattr(node.target, "__name__", str(node.target))
        if name.split(".")[0] in IGNORED:
            continue
        if name in INLINED:
            if needs_decomposition(getattr(graph_module, node.args[INLINED[name]].target)):
                return True
            continue
        inputs = node.all_input_nodes
        if all(n in constant for n in inputs):
            constant.add(node)
        if node.target not in LOWERINGS and (
                node not in constant or not isinstance(node.target, torch._ops.OpOverload)):
            return True
    return False
