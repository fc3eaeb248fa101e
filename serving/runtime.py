"""The runtime's share of a serving step: kernel launches, the fixed latency of
collectives and the host's work per step (``NpuConfig.runtime``, all zero by default).

Each is simulated where it occurs: a block's kernel launches occupy its chip before the
block (:mod:`serving.compose`), a collective's fixed latency is paid once per
collective on its group (:func:`archsim.cluster.run_cluster`), the host's work runs
between steps on the host (:class:`archsim.cluster.Host`). The number of kernels is the
compiler's: its fused groups (:class:`compiler.plan.Kernel`, one per anchor with its
epilogue or per vector group), counted on the block's compiled program.
"""

from __future__ import annotations

import re
from typing import Any

from archsim.config.model import NpuConfig


def kernel_count(module: Any, inputs: tuple, config: NpuConfig, all_layers: bool) -> int:
    """Kernels of ``module(*inputs)`` as the compiler fuses them, over its whole layer
    stack: the program ``archsim.app.run`` compiled (the compiler's schedule cache
    returns it) keeps the first layers of a stack; each layer left out has as many
    kernels as a middle layer kept."""
    import compiler
    from torch_bridge.shapes import estimate_options, export_shapes

    exported, stack = export_shapes(module, inputs, {}, all_layers)
    names = compiler.compile_graph(exported, config, estimate_options(all_layers)).kernels
    if stack is None:
        return len(names)
    return stacked_kernel_count(names, stack.path, stack.total)


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


__all__ = ["kernel_count", "stacked_kernel_count"]
