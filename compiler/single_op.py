"""One aten op compiled on its own, for the eager device (``compile_op``).

Ops the compiler lowers become a one-node graph; ops without a lowering of their own
(autograd's backward ops) are traced through torch's core-ATen decompositions first.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from archsim.config.model import NpuConfig
from compiler.compile import CompiledProgram, compile_graph
from compiler.options import CompileOptions


_DATA_OUTPUTS: dict[Any, tuple[int, ...]] = {}
"""Ops whose other results are empty on a real device (meta tensors give them a shape):
only these outputs are compiled. Filled on first use (needs torch)."""


def compile_op(op: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None,
               config: NpuConfig, options: CompileOptions | None = None,
               name: str | None = None) -> CompiledProgram:
    """Compile one aten op for eager use. ``args`` hold tensors (real, fake or meta) and
    python scalars; tensors become the program's inputs in order of appearance. ``name``
    names the op's node (its commands' source; default the overload's, ``mm_default``)."""
    import torch
    import torch.fx

    kwargs = dict(kwargs or {})
    from compiler.lowerings.registry import LOWERINGS

    # the eager device hands over and takes back tensors in their logical order
    options = dataclasses.replace(options or CompileOptions(), channels_last=False)

    # inference batch norm saves no statistics: its second and third results are empty
    _DATA_OUTPUTS.setdefault(torch.ops.aten._native_batch_norm_legit_no_training.default, (0,))

    if op not in LOWERINGS and op in _op_decompositions():
        return compile_graph(_decomposed_graph(op, args, kwargs), config, options)
    fx_graph = torch.fx.Graph()
    counter = [0]

    def placeholder(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        node = fx_graph.placeholder(f"arg{counter[0]}")
        counter[0] += 1
        node.meta["val"] = torch.empty(tuple(x.shape), dtype=x.dtype, device="meta")
        return node

    def to_meta(x: Any) -> Any:  # strides kept: _scaled_mm checks its operands' layout
        if isinstance(x, torch.Tensor):
            return torch.empty_strided(tuple(x.shape), x.stride(), dtype=x.dtype,
                                       device="meta")
        return x

    fx_args = torch.utils._pytree.tree_map(placeholder, args)
    fx_kwargs = torch.utils._pytree.tree_map(placeholder, kwargs)
    meta_out = op(*torch.utils._pytree.tree_map(to_meta, args),
                  **torch.utils._pytree.tree_map(to_meta, kwargs))
    call = fx_graph.call_function(op, tuple(fx_args), fx_kwargs, name=name)
    call.meta["val"] = meta_out
    if isinstance(meta_out, torch.Tensor):
        fx_graph.output((call,))
    else:
        items = []
        kept = _DATA_OUTPUTS.get(op, range(len(meta_out)))
        for i, t in enumerate(meta_out):
            if isinstance(t, torch.Tensor) and t.numel() > 0 and i in kept:
                item = fx_graph.call_function(__import__("operator").getitem, (call, i))
                item.meta["val"] = t
                items.append(item)
        fx_graph.output(tuple(items))
    gm = torch.fx.GraphModule(torch.nn.Module(), fx_graph)
    return compile_graph(gm, config, options)


@functools.cache
def _op_decompositions() -> dict[Any, Any]:
    """torch's core-ATen decompositions (what aot_autograd applies before graphs reach
    the compiler), for eager ops without a lowering of their own: backward ops such as
    ``gelu_backward`` or ``_softmax_backward_data`` become ops that have one."""
    from torch._decomp import core_aten_decompositions

    return core_aten_decompositions()


def _decomposed_graph(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``op`` on ``args`` traced through its decomposition on meta tensors: a graph whose
    inputs are the tensors of ``args``/``kwargs`` in order, returning a tuple."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    leaves, spec = torch.utils._pytree.tree_flatten((args, kwargs))
    positions = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    def call(*tensors: Any) -> Any:
        filled = list(leaves)
        for i, t in zip(positions, tensors):
            filled[i] = t
        call_args, call_kwargs = torch.utils._pytree.tree_unflatten(filled, spec)
        out = op(*call_args, **call_kwargs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    metas = [torch.empty(tuple(leaves[i].shape), dtype=leaves[i].dtype, device="meta")
             for i in positions]
    return make_fx(call, decomposition_table=_op_decompositions())(*metas)
