"""Triton launches inside FX graphs: ``triton_kernel_wrapper_functional`` nodes (what
``torch.compile`` and ``run_decompositions(decompose_custom_triton_ops=True)`` make of a
``torch.library.triton_op``) become :class:`compiler.graph.TritonCall` nodes, lowered by
:mod:`compiler.kernels.triton` through the same path as an eager launch."""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch

from archsim.errors import LoweringError
from compiler import graph as g
from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.torch_types import torch_dtype


_EXAMPLES: ContextVar[Mapping[str, Any] | None] = ContextVar("triton_examples", default=None)


@contextmanager
def example_inputs(tensors: Mapping[str, Any]) -> Iterator[None]:
    """While compiling a graph for a functional run: its inputs' values by placeholder
    name, so a kernel whose loop bounds, branches or addresses depend on an input (a
    sequence length, a block table) is built for those values, as in an eager launch.
    The program then holds for these inputs only."""
    token = _EXAMPLES.set(dict(tensors))
    try:
        yield
    finally:
        _EXAMPLES.reset(token)


def is_triton_call(target: Any) -> bool:
    return target is getattr(torch.ops.higher_order, "triton_kernel_wrapper_functional", None)


def lower_triton_call(b: GraphBuilder, node_name: str, kwargs: dict[str, Any]
                      ) -> dict[str, Value]:
    """The node's result: argument name -> tensor after the launch (written arguments
    get the call's outputs, the others stay as they were)."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    from compiler.triton import trace_launch

    kernel = kernel_side_table.get_kernel(kwargs["kernel_idx"])
    call_kwargs = {**kwargs["kwargs"],
                   **kernel_side_table.get_constant_args(kwargs["constant_args_idx"])}
    grids = kwargs["grid"]
    if len(grids) != 1:
        raise LoweringError(f"node {node_name}: autotuned Triton kernels ({len(grids)} "
                            f"configurations) are not supported; launch one configuration")
    names = list(inspect.signature(getattr(kernel, "fn", kernel)).parameters)
    ordered = {n: call_kwargs[n] for n in names if n in call_kwargs}
    metas = {n: (torch.empty(v.shape, dtype=torch_dtype(v.dtype), device="meta")
                 if isinstance(v, Value) else v) for n, v in ordered.items()}
    examples = _EXAMPLES.get()
    data = None
    if examples is not None:  # inputs' values; anything computed in the graph is unknown
        data = {n: examples.get(v.name) if v.producer is None else None
                for n, v in ordered.items() if isinstance(v, Value)}
    traced = trace_launch(kernel, (), metas, tuple(grids[0]), data)
    pointers = tuple(p.name for p in traced.pointers)
    written = traced.written()
    inputs = tuple(ordered[n] for n in pointers)
    spec = g.TritonCall(traced, pointers, written)
    out_types = [(ordered[n].shape, ordered[n].dtype) for n in written]
    call = b.graph.add(spec, inputs, out_types, traced.name, traced.name)
    after = dict(zip(written, call.outputs))
    return {n: after.get(n, v) for n, v in ordered.items() if isinstance(v, Value)}
