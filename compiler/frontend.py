"""FX/ATen graphs (torch.export or aot_autograd) -> the graph IR.

Works from ``node.meta["val"]`` (fake/meta tensors), so no weights are needed. Ops whose
tensor inputs are all compile-time constants are folded with torch on CPU; ops without
a lowering become :class:`~compiler.graph.HostCall` nodes (timed on the host, visible).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.fx

from archsim.errors import LoweringError, UnsupportedOpError
from compiler import graph as g
from compiler.attention_match import AttentionMatch, find_attention
from compiler.causal_mask import CausalMaskPass
from compiler.export import lifted_constants
from compiler.graph import Graph, Value
from compiler.graph_builder import GraphBuilder
from compiler.layout import CHANNELS_FIRST, CHANNELS_LAST, channels_last
from compiler.lowerings import LOWERINGS
from compiler.lowerings.registry import lowering_for
from compiler.lowerings.attention import lower_sdpa
from compiler.options import CompileOptions
from compiler.torch_types import ir_dtype, to_numpy, to_torch, torch_dtype
from compiler.triton.graph_call import is_triton_call, lower_triton_call

_IGNORED = {"_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size",
            "_assert_async"}
_INLINED = {"wrap_with_set_grad_enabled": 1, "wrap_with_autocast": 4}
"""Higher-order ops that only wrap a region (grad mode, autocast): the position of the
body's graph module among their args; the region's inputs follow it."""
_WITH_EFFECTS = "with_effects"
"""The higher-order op torch wraps an effectful op in (``torch.linalg.inv``'s error
check, ``aten._print``): ``with_effects(token, op, *args) -> (token, *op's results)``,
the token (:data:`compiler.graph.TOKEN`) ordering such ops."""


@dataclass(frozen=True)
class InputSpec:
    """One graph input: the DRAM tensor that holds it and what it is."""

    name: str
    kind: str  # user_input | parameter | buffer | constant_tensor | token
    target: str
    shape: tuple[int, ...]
    """The shape the caller gives (logical)."""
    dtype: str
    perm: tuple[int, ...] | None = None
    """Set when the tensor is stored in another dim order: the DRAM tensor holds
    ``tensor.permute(perm)`` (a channels-last image: ``(0, 2, 3, 1)``)."""


def _meta_tensors(val: Any) -> list[torch.Tensor | None]:
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (list, tuple)):
        return [v if isinstance(v, torch.Tensor) else None for v in val]
    return []


def _static_shape(t: torch.Tensor, where: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in t.shape)
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a data-dependent size
        raise LoweringError(f"{where}: dynamic shape {list(t.shape)} is not supported (a "
                            f"size that depends on the data, as torch.unique's, or a dynamic "
                            f"dimension); export with static shapes") from None


def node_source(node: torch.fx.Node) -> str:
    """What a node's commands are attributed to: the innermost module it came from, as a
    path inside the user's model, and its FX name (``h.0.mlp.c_fc:addmm_5``); the FX
    name alone outside any submodule. Paths in ``nn_module_stack`` start at the traced
    root (torch.export: ``''``; dynamo: the local ``L['self']`` or ``L['fn']``). A model
    exported inside archsim's ``model_outputs.Forward`` wrapper (``archsim run``,
    ``archsim.estimate``) is a root too, so the wrapper's ``model`` attribute never
    shows; paths are otherwise relative to the module that was traced."""
    stack = list((node.meta.get("nn_module_stack") or {}).values())
    if not stack:
        return node.name
    path = _from_root(str(stack[-1][0]))
    for entry_path, kind in stack:
        if _type_name(kind).endswith("model_outputs.Forward"):
            wrapped = ".".join(p for p in (_from_root(str(entry_path)), "model") if p)
            if path == wrapped or path.startswith(wrapped + "."):
                path = path[len(wrapped):].lstrip(".")
    return f"{path}:{node.name}" if path else node.name


def _from_root(path: str) -> str:
    """``L['self'].model.layers[0]`` -> ``model.layers.0`` (dynamo's root local dropped,
    indexing as dots)."""
    path = re.sub(r"^L\[[^\]]*\]\.?", "", path)
    return re.sub(r"\[['\"]?([^\]'\"]+)['\"]?\]", r".\1", path).lstrip(".")


def _type_name(kind: Any) -> str:
    """A module type as ``nn_module_stack`` records it: a class (dynamo) or its dotted
    name (torch.export)."""
    return kind if isinstance(kind, str) else f"{kind.__module__}.{kind.__qualname__}"


class Frontend:
    def __init__(self, options: CompileOptions,
                 lifted: Mapping[str, torch.Tensor] | None = None) -> None:
        self.options = options
        self.lifted = dict(lifted or {})
        self.graph = Graph()
        self.builder = GraphBuilder(self.graph, self._const_tensor)
        self.env: dict[torch.fx.Node, Any] = {}
        self.const: dict[int, torch.Tensor] = {}
        self.inputs: list[InputSpec] = []
        self.fallbacks: list[str] = []
        self.attention: dict[torch.fx.Node, AttentionMatch] = {}

    # -- entry ---------------------------------------------------------------------
    def run(self, gm: torch.fx.GraphModule, kinds: dict[str, tuple[str, str]]) -> Graph:
        if self.options.attention_fusion:
            self.attention = find_attention(gm.graph)
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                self._placeholder(node, *kinds.get(node.name, ("user_input", node.name)))
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                self._output(node)
            elif node.op == "get_attr":
                self._get_attr(gm, node)
            else:
                raise LoweringError(f"node {node.name}: FX op {node.op!r} is not supported")
        return self.graph

    def _placeholder(self, node: torch.fx.Node, kind: str, target: str) -> None:
        lifted = self.lifted.get(node.name)
        if lifted is not None and not lifted.is_meta:
            self.env[node] = self._constant(lifted, node.name)
            return
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise LoweringError(f"placeholder {node.name}: needs a tensor in meta['val'], "
                                f"got {type(val).__name__}")
        shape = _static_shape(val, node.name)
        perm = CHANNELS_LAST if self.options.channels_last and kind == "user_input" and \
            channels_last(val) else None
        stored = shape if perm is None else tuple(shape[d] for d in perm)
        value = Value(stored, ir_dtype(val.dtype, node.name), node.name)
        self.graph.inputs.append(value)
        if lifted is not None:  # a constant of the model whose values a meta export lost
            self.const[value.id] = lifted
        if kind not in ("user_input", g.TOKEN):
            self.graph.weights.add(value.id)
        self.inputs.append(InputSpec(node.name, kind, target, shape, value.dtype.value, perm))
        # the graph computes on the logical dims: a channels-last image is a permuted
        # view of what DRAM holds (compiler.layout folds it into the convolution)
        self.env[node] = value if perm is None else self.builder.permute(value, CHANNELS_FIRST)

    def _get_attr(self, gm: torch.fx.GraphModule, node: torch.fx.Node) -> None:
        attr = getattr(gm, str(node.target))
        if isinstance(attr, torch.fx.GraphModule):  # the body of a higher-order op
            self.env[node] = attr
            return
        self.env[node] = self._constant(attr, node.name)

    def _output(self, node: torch.fx.Node) -> None:
        for item in _flatten(node.args[0]):
            value = self.env.get(item) if isinstance(item, torch.fx.Node) else item
            if not isinstance(value, Value):
                raise LoweringError(f"graph output {item}: not a tensor ({value!r})")
            if self.options.channels_last and isinstance(item, torch.fx.Node) and \
                    channels_last(item.meta.get("val")):  # returned as torch holds it
                self.graph.output_perms[len(self.graph.outputs)] = CHANNELS_LAST
                value = self.builder.permute(value, CHANNELS_LAST)
            self.graph.outputs.append(value)

    # -- call_function -----------------------------------------------------------------
    def _call(self, node: torch.fx.Node) -> None:
        target = node.target
        if target is operator.getitem:
            self.env[node] = self.env[node.args[0]][node.args[1]]
            return
        name = getattr(target, "__name__", str(target))
        if name.split(".")[0] in _IGNORED:
            self.env[node] = None
            return
        if name in _INLINED:  # e.g. a no-grad or autocast region: its body, in place
            self.env[node] = self._inline(node, _INLINED[name])
            return
        if name == _WITH_EFFECTS:
            self.env[node] = self._effectful(node)
            return
        args = torch.fx.node.map_arg(node.args, lambda n: self.env[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: self.env[n])
        self.builder.source = node_source(node)
        if is_triton_call(target):  # a Triton kernel: traced and lowered as launched
            self.env[node] = lower_triton_call(self.builder, node.name, kwargs)
            return
        metas = _meta_tensors(node.meta.get("val"))
        if metas and all(m is not None and all(isinstance(d, int) for d in m.shape) and
                         m.numel() == 0 for m in metas):
            # nothing to compute: every result is empty (a batch of zero rows)
            empties = tuple(self._constant(torch.empty(_static_shape(m, node.name),
                                                       dtype=m.dtype), node.name)
                            for m in metas)
            self.env[node] = empties[0] if isinstance(node.meta["val"], torch.Tensor) \
                else empties
            return
        if self._foldable(target, args, kwargs, metas):
            self.env[node] = self._fold(node, target, args, kwargs)
            return
        fn = lowering_for(target)
        result = self._fused_attention(node)
        if result is None and fn is not None:
            try:
                result = fn(self.builder, *args, **kwargs)
            except NotImplementedError:
                result = None
        if result is None or _missing_needed_output(node, result):
            result = self._host(node, target, args, kwargs, metas)
        self.env[node] = self._check(node, result, metas)

    def _inline(self, node: torch.fx.Node, body_at: int) -> Any:
        """Lower the body of a higher-order op wrapping a region (grad mode, autocast):
        ``node.args[body_at]`` is the body's GraphModule, the args after it its inputs."""
        body = self.env[node.args[body_at]]
        if not isinstance(body, torch.fx.GraphModule):
            raise LoweringError(f"{node.name}: expected a graph module as argument "
                                f"{body_at} of {node.target}")
        operands = [self.env[a] if isinstance(a, torch.fx.Node) else a
                    for a in node.args[body_at + 1:]]
        placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
        for placeholder, value in zip(placeholders, operands):
            self.env[placeholder] = value
        result: Any = None
        for inner in body.graph.nodes:
            if inner.op == "call_function":
                self._call(inner)
            elif inner.op == "get_attr":
                self._get_attr(body, inner)
            elif inner.op == "output":
                result = torch.fx.node.map_arg(inner.args[0], lambda n: self.env[n])
        return tuple(result) if isinstance(result, (list, tuple)) else result

    def _fused_attention(self, node: torch.fx.Node) -> Value | None:
        """The flash-attention kernel for a matched written-out attention ending at
        ``node``; its score nodes are then dead code. None when not matched or the
        kernel does not take these operands."""
        match = self.attention.get(node)
        if match is None:
            return None
        q, k, v = (self.env[n] for n in (match.q, match.k, match.v))
        mask = self.env[match.mask] if match.mask is not None else None
        if not all(isinstance(x, Value) for x in (q, k, v)) or \
                not (mask is None or isinstance(mask, Value)):
            return None
        try:
            out = lower_sdpa(self.builder, q, k, v, mask, scale=match.scale)
        except NotImplementedError:
            return None
        return self.builder.view(out, tuple(node.meta["val"].shape))

    def _check(self, node: torch.fx.Node, result: Any, metas: list[torch.Tensor | None]) -> Any:
        single = not isinstance(result, tuple)
        results = [result] if single else list(result)
        for i, meta in enumerate(metas[:len(results)]):
            value = results[i]
            if meta is None or not isinstance(value, Value):
                continue
            shape = _static_shape(meta, node.name)
            if value.shape != shape:
                raise LoweringError(f"node {node.name} ({node.target}): lowering produced shape "
                                    f"{list(value.shape)}, torch says {list(shape)}")
            dtype = ir_dtype(meta.dtype, node.name)
            if value.dtype is not dtype:
                results[i] = self.builder.cast(value, dtype)
        return results[0] if single else tuple(results)

    # -- constants ---------------------------------------------------------------------
    def _constant(self, tensor: torch.Tensor, name: str) -> Value:
        tensor = tensor.detach()
        node = self.graph.add(g.Constant(), (), [(tuple(tensor.shape),
                                                  ir_dtype(tensor.dtype, name))], name)
        self.graph.constants[node.out.id] = to_numpy(tensor)
        self.const[node.out.id] = tensor
        return node.out

    def _const_tensor(self, value: Value) -> torch.Tensor | None:
        if value.id in self.const:
            return self.const[value.id]
        producer = value.producer
        if producer is not None and isinstance(producer.spec, g.Splat):
            return torch.full(value.shape, producer.spec.value, dtype=torch_dtype(value.dtype))
        return None

    def _foldable(self, target: Any, args: Any, kwargs: Any,
                  metas: list[torch.Tensor | None]) -> bool:
        if not self.options.constant_folding or not isinstance(target, torch._ops.OpOverload):
            return False
        if torch.Tag.nondeterministic_seeded in target.tags:
            return False
        values = [v for v in _flatten((args, kwargs)) if isinstance(v, Value)]
        if not values and target in LOWERINGS:
            return False
        known = [self._const_tensor(v) for v in values]
        if any(t is None or t.is_meta for t in known):  # meta: a constant of unknown values
            return False
        if not metas or any(m is None for m in metas):
            return False
        return sum(m.numel() for m in metas) <= self.options.fold_limit_elements

    def _fold(self, node: torch.fx.Node, target: Any, args: Any, kwargs: Any) -> Any:
        def real(x: Any) -> Any:
            return self._const_tensor(x) if isinstance(x, Value) else x
        args, kwargs = _map_values((args, kwargs), real)
        kwargs = {k: (torch.device("cpu") if k == "device" else v) for k, v in kwargs.items()}
        out = target(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            return self._constant(out, node.name)
        return tuple(self._constant(t, f"{node.name}_{i}") if isinstance(t, torch.Tensor) else t
                     for i, t in enumerate(out))

    # -- host fallback --------------------------------------------------------------------
    def _host(self, node: torch.fx.Node, target: Any, args: Any, kwargs: Any,
              metas: list[torch.Tensor | None]) -> Any:
        op_name = str(target)
        self._check_host_fallback(node, op_name)
        if not metas or any(m is None for m in metas):
            raise UnsupportedOpError(f"node {node.name}: {op_name} has no lowering and its "
                                     f"outputs are not all tensors")
        inputs = [v for v in _flatten((args, kwargs)) if isinstance(v, Value)]
        fn = _host_function(target, args, kwargs, inputs)
        host = self._host_call(node, op_name, fn, inputs, metas)
        if isinstance(node.meta.get("val"), torch.Tensor):
            return host.out
        return tuple(host.outputs)

    def _effectful(self, node: torch.fx.Node) -> tuple[Any, ...]:
        """``with_effects(token, op, *args)``: ``op`` runs on the host (an error check or
        a print has no kernel), reading the token and writing the next one, so it stays
        live and in order. Returns ``(token, *op's results)``, ``None`` where ``op``
        returns ``None``."""
        token_node, op, *op_args = node.args
        op_name = f"{op} (an effectful op, in {_WITH_EFFECTS})"
        self._check_host_fallback(node, op_name)
        token_meta, *results = node.meta["val"]
        if not all(r is None or isinstance(r, torch.Tensor) for r in results):
            kinds = ", ".join(type(r).__name__ for r in results)
            raise UnsupportedOpError(f"node {node.name}: {op_name} returns {kinds}; the "
                                     f"host runs effectful ops returning tensors or None")
        args = torch.fx.node.map_arg(tuple(op_args), lambda n: self.env[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: self.env[n])
        self.builder.source = node_source(node)
        token = self.env[token_node]
        inputs = [v for v in _flatten((args, kwargs)) if isinstance(v, Value)] + [token]
        fn = _effect_function(_host_function(op, args, kwargs, inputs), token_meta)
        tensors = [r for r in results if r is not None]
        host = self._host_call(node, str(op), fn, inputs, [token_meta, *tensors])
        produced = iter(host.outputs[1:])
        return (host.outputs[0], *(None if r is None else next(produced) for r in results))

    def _check_host_fallback(self, node: torch.fx.Node, op_name: str) -> None:
        if not self.options.host_fallback:
            raise UnsupportedOpError(f"node {node.name}: no lowering for {op_name} and host "
                                     f"fallback is off")

    def _host_call(self, node: torch.fx.Node, op_name: str,
                   fn: Callable[..., tuple[np.ndarray, ...]], inputs: list[Value],
                   metas: list[torch.Tensor]) -> g.Node:
        """A :class:`~compiler.graph.HostCall` node, charged 2 FLOPs per element in and
        out, and listed among the program's fallbacks."""
        out_types = [(_static_shape(m, node.name), ir_dtype(m.dtype, node.name)) for m in metas]
        elements = sum(int(np.prod(v.shape)) for v in inputs) + \
            sum(int(np.prod(s)) for s, _ in out_types)
        spec = g.HostCall(op_name, fn, flops=2 * elements)
        host = self.graph.add(spec, tuple(inputs), out_types, node.name, node.name)
        self.fallbacks.append(f"{node.name}: {op_name}")
        return host


def effect_tokens(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The placeholders that are effect tokens: aot_autograd's graphs take them first,
    unnamed as such (torch.export's signature says ``token``), and pass them to
    ``with_effects``."""
    return [n for n in graph.nodes if n.op == "placeholder" and any(
        _op_is(u.target, _WITH_EFFECTS) and u.args[0] is n for u in n.users)]


def _op_is(target: Any, name: str) -> bool:
    return getattr(target, "__name__", str(target)) == name


def _missing_needed_output(node: torch.fx.Node, result: Any) -> bool:
    """A lowering returned None for an output somebody reads (e.g. pool indices)."""
    if not isinstance(result, tuple):
        return False
    needed = {u.args[1] for u in node.users if u.target is operator.getitem}
    return any(i < len(result) and result[i] is None for i in needed)


def _host_function(target: Any, args: Any, kwargs: Any,
                   inputs: list[Value]) -> Callable[..., tuple[np.ndarray, ...]]:
    index = {v.id: i for i, v in enumerate(inputs)}

    def run(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        def real(x: Any) -> Any:
            if not isinstance(x, Value):
                return x
            return to_torch(np.asarray(arrays[index[x.id]]).reshape(x.shape), x.dtype)
        call_args, call_kwargs = _map_values((args, kwargs), real)
        call_kwargs = {k: (torch.device("cpu") if k == "device" else v)
                       for k, v in call_kwargs.items()}
        out = target(*call_args, **call_kwargs)
        outs = [out] if isinstance(out, torch.Tensor) else list(out or ())
        return tuple(to_numpy(t) for t in outs if t is not None)
    return run


def _effect_function(run: Callable[..., tuple[np.ndarray, ...]], token: torch.Tensor
                     ) -> Callable[..., tuple[np.ndarray, ...]]:
    """``run`` returning the next effect token (empty, as torch's) before its results."""
    empty = to_numpy(torch.empty(tuple(token.shape), dtype=token.dtype))

    def with_token(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        return (empty.copy(), *run(*arrays))
    return with_token


def _flatten(tree: Any) -> list[Any]:
    if isinstance(tree, (list, tuple)):
        return [x for item in tree for x in _flatten(item)]
    if isinstance(tree, dict):
        return [x for item in tree.values() for x in _flatten(item)]
    return [tree]


def _map_values(tree: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(tree, tuple):
        return tuple(_map_values(x, fn) for x in tree)
    if isinstance(tree, list):
        return [_map_values(x, fn) for x in tree]
    if isinstance(tree, dict):
        return {k: _map_values(v, fn) for k, v in tree.items()}
    return fn(tree)


def build(program: Any, options: CompileOptions) -> tuple[Graph, list[InputSpec], list[str]]:
    """An ExportedProgram or GraphModule -> (graph IR, input specs, host fallbacks)."""
    kinds: dict[str, tuple[str, str]] = {}
    if isinstance(program, torch.export.ExportedProgram):
        for spec in program.graph_signature.input_specs:
            kind = spec.kind.name.lower()
            kinds[spec.arg.name] = (kind, spec.target or spec.arg.name)
        gm = program.graph_module
    elif isinstance(program, torch.fx.GraphModule):
        gm = program
        for node in gm.graph.nodes:  # weights marked by the torch.compile backend
            if node.op == "placeholder" and "archsim_kind" in node.meta:
                kinds[node.name] = (node.meta["archsim_kind"], node.name)
        kinds.update({node.name: (g.TOKEN, node.name) for node in effect_tokens(gm.graph)})
    else:
        raise LoweringError(f"compile_graph takes an ExportedProgram or fx.GraphModule, got "
                            f"{type(program).__name__}")
    frontend = Frontend(options, lifted_constants(program))
    graph = frontend.run(gm, kinds)
    if options.causal_mask:  # the folded mask is known here; the kernel then skips tiles
        graph = CausalMaskPass().apply(graph)
    return graph, frontend.inputs, frontend.fallbacks
