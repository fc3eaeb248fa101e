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

from typing import Any

from archsim.config.model import NpuConfig


def kernel_count(module: Any, inputs: tuple, config: NpuConfig, all_layers: bool) -> int:
    """Kernels of ``module(*inputs)`` as the compiler fuses them, over its whole layer
    stack: the program ``archsim.app.run`` compiled (the compiler's schedule cache
    returns it) keeps the first layers of a stack; each layer left out has as many
    kernels as a middle layer kept."""
    import compiler
    from torch_bridge.layer_stack import stacked_kernel_count
    from torch_bridge.shapes import estimate_options, export_shapes

    exported, stack = export_shapes(module, inputs, {}, all_layers)
    names = compiler.compile_graph(exported, config, estimate_options(all_layers)).kernels
    if stack is None:
        return len(names)
    return stacked_kernel_count(names, stack.path, stack.total)


__all__ = ["kernel_count"]
