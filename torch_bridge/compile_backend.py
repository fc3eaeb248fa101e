"""The ``torch.compile`` backend named ``archsim`` (entry point ``torch_dynamo_backends``).

Dynamo's graph goes through ``aot_autograd`` with torch.export's decompositions, so the
compiler sees ATen graphs whose nodes carry ``meta["val"]`` (forward, and backward when
training). Each graph becomes a :class:`GraphRunner`: on every call it compiles the
graph for the current config (``compiler.compile_graph`` caches), runs the schedule on
the simulator in functional mode and returns its outputs on the device the graph
expects (npu outputs for npu inputs, CPU for CPU). The first run's outputs are checked
against the graph run by torch on CPU: a disagreement is a ``NumericsError``, not a
result. A graph that computes int64 values is checked so again on any run whose int64
inputs or outputs reach 2**53: the simulator's integers are exact only up to there,
which depends on the data, not the program (``a + 1`` of ``2**53 + 1`` is off), so a
first run that agreed says nothing of such a run (an intermediate value alone beyond
2**53 goes unseen). The run is recorded on the device timeline as ``"device"`` work named
``compiled forward 0`` etc., with its ``SimResult`` for the profiler; ops the compiler
put on the host inside the graph are in that result. A graph with symbolic sizes
(dynamo's, once input shapes change) is compiled per call signature, for its concrete
shapes (:mod:`torch_bridge.specialize`): every shape runs on the device. A graph keeps
its last :data:`MAX_VARIANTS` compiled (config, signature) variants.

A graph that does not compile (or whose simulation fails) runs eagerly instead — op by
op on the npu (where each op is itself recorded) or on CPU (recorded as host work, FLOPs
counted) — and every such call is recorded with the reason in the event's ``note``, plus
one :class:`GraphFallbackWarning` per graph (and call signature). An error a host op
raises on the user's data (``torch.linalg.inv`` of a singular matrix) is raised as
torch raises it, and the program stays. CPU inputs are taken to be in device memory
already: no host-link transfer is timed for them.
"""

from __future__ import annotations

import copy
import itertools
import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from archsim.errors import HostOpError
from compiler.frontend import effect_tokens, node_source
from torch_bridge import runtime, storage
from torch_bridge.fallback import reason
from torch_bridge.numerics import check_close, in_float64, triton_on_cpu, unrepeatable_ops
from torch_bridge.specialize import has_symbolic_sizes, signature, specialize

if TYPE_CHECKING:
    from compiler.compile import CompiledProgram


class GraphFallbackWarning(UserWarning):
    """A captured graph did not compile and runs eagerly (see the event's ``note``)."""


@dataclass(frozen=True)
class _Output:
    """Where one graph output comes from: the compiled program's ``index``-th output
    (placed on ``device``), or a non-tensor ``value`` returned as is."""

    index: int | None
    device: torch.device | None
    value: Any = None


def _tensor_outputs_only(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule,
                                                            tuple[_Output, ...]]:
    """A copy of ``gm`` returning only its tensor outputs, and how to rebuild the full
    output list (backward graphs return ``None`` for inputs without gradients)."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    layout: list[_Output] = []
    kept: list[torch.fx.Node] = []
    for node in gm.graph.nodes:
        if node.op != "output":
            env[node] = graph.node_copy(node, lambda n: env[n])
            continue
        for item in _flat(node.args[0]):
            val = item.meta.get("val") if isinstance(item, torch.fx.Node) else None
            if isinstance(val, torch.Tensor):
                layout.append(_Output(len(kept), val.device))
                kept.append(env[item])
            elif isinstance(item, torch.fx.Node):
                raise NotImplementedError(f"graph output {item.name} is not a tensor "
                                          f"({type(val).__name__})")
            else:
                layout.append(_Output(None, None, item))
        graph.output(tuple(kept))
    return torch.fx.GraphModule(gm, graph), tuple(layout)


def _flat(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat(v)]
    return [value]


def _host(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and not value.is_cpu:
        return storage.cpu_view(value)
    return value


def _place(tensor: torch.Tensor, device: torch.device | None) -> torch.Tensor:
    if device is not None and device.type == "npu":
        return storage.wrap_cpu(tensor)
    return tensor


@dataclass
class _Variant:
    """The graph compiled for one config and, when it has symbolic sizes, one call
    signature (:func:`torch_bridge.specialize.signature`). Mutable: a failed simulation
    drops its program, the first run's numerics check sets ``verified``."""

    program: CompiledProgram | None
    layout: tuple[_Output, ...] = ()
    takes: tuple[int, ...] | None = None
    """The call inputs the program takes, by position (``None``: all of them; a
    specialized graph takes no sizes)."""
    verified: bool = False
    failure: str | None = None
    """Why the graph runs eagerly (``None`` while it compiles)."""


MAX_VARIANTS = 16
"""Compiled variants one graph keeps (least recently used dropped first): a program is
1.4-7 MiB, and a loop over growing lengths would otherwise keep one per length."""


class GraphRunner:
    """One ATen graph: compiled per config on first call, then simulated on each call.
    A graph with symbolic sizes (dynamo's, once input shapes change) is compiled per
    call signature, for those concrete shapes (:mod:`torch_bridge.specialize`). The
    last :data:`MAX_VARIANTS` (config, signature) variants are kept: switching presets
    back and forth does not recompile.

    Called with a list of inputs (the boxed convention of ``aot_autograd``), which it
    clears as ``aot_autograd`` expects; returns the outputs as a list.
    """

    def __init__(self, gm: torch.fx.GraphModule, label: str) -> None:
        self._boxed_call = True  # an instance attribute: dynamo's wrappers copy __dict__
        self.gm = gm
        self.label = label
        self.sources = {node_source(n): _op_name(n.target) for n in gm.graph.nodes
                        if n.op == "call_function"}
        """Kernel source (module path and node name) -> aten op, to attribute a run's
        cycles to ops."""
        self._dynamic = has_symbolic_sizes(gm)
        self._no_reference = bool(unrepeatable_ops(gm.graph))
        """The graph draws random numbers or reads uninitialized memory: torch on CPU
        would get other numbers, so none are compared."""
        self._checks_every_run = _computes_int64(gm)
        """A run with int64 values beyond 2**53 is checked against torch on CPU, not
        only the first run (see the module doc)."""
        self._cpu_gm: torch.fx.GraphModule | None = None
        self._variants: OrderedDict[Hashable, _Variant] = OrderedDict()
        """(config, call signature) -> variant, least recently used first, at most
        :data:`MAX_VARIANTS`."""
        self._last: _Variant | None = None

    @property
    def program(self) -> CompiledProgram | None:
        """The program of the last call (``None`` before the first call or when the
        graph did not compile)."""
        return self._last.program if self._last is not None else None

    @property
    def failure(self) -> str | None:
        """Why the last call ran eagerly (``None`` when it was simulated)."""
        return self._last.failure if self._last is not None else None

    def __call__(self, args: list[Any]) -> list[Any]:
        inputs = list(args)
        args.clear()  # let aot_autograd free inputs it no longer needs
        config = runtime.get_config()
        key = (config, signature(inputs) if self._dynamic else ())
        variant = self._variants.get(key)
        if variant is None:
            variant = self._variants[key] = self._compile(config, inputs)
            if len(self._variants) > MAX_VARIANTS:
                self._variants.popitem(last=False)
        self._variants.move_to_end(key)
        self._last = variant
        if variant.program is None:
            return self._run_eagerly(variant, inputs)
        return self._run_compiled(variant, inputs)

    def _compile(self, config: Any, inputs: list[Any]) -> _Variant:
        import compiler

        try:
            gm, takes = self.gm, None
            if self._dynamic:
                static = specialize(self.gm, inputs)
                gm, takes = static.gm, static.takes
            gm, layout = _tensor_outputs_only(gm)
            return _Variant(compiler.compile_graph(gm, config), layout, takes)
        except Exception as exc:  # noqa: BLE001 - reported: warned, noted on every run
            failure = f"compile failed: {reason(exc)}"
            warnings.warn(f"{self.label} runs eagerly: {failure}", GraphFallbackWarning,
                          stacklevel=4)
            return _Variant(None, failure=failure)

    def _run_compiled(self, variant: _Variant, inputs: list[Any]) -> list[Any]:
        program = variant.program
        given = inputs if variant.takes is None else [inputs[i] for i in variant.takes]
        try:
            outputs, result = program.run(*(_host(a) for a in given),
                                          verify=not variant.verified)
        except HostOpError as exc:  # the user's data, not the simulator: torch's error
            raise exc.error from None
        except Exception as exc:  # noqa: BLE001 - reported: warned, noted on every run
            variant.program = None
            variant.failure = f"simulation failed: {reason(exc)}"
            warnings.warn(f"{self.label} runs eagerly: {variant.failure}",
                          GraphFallbackWarning, stacklevel=4)
            return self._run_eagerly(variant, inputs)
        if not variant.verified or self._checks_every_run and _beyond_exact_ints(
                (*inputs, *outputs)):
            self._check_numerics(variant.layout, inputs, outputs)
        variant.verified = True
        note = f"{len(program.fallbacks)} ops on the host" if program.fallbacks else ""
        runtime.record_launch(self.label, len(program.kernels))
        runtime.record_device(self.label, result.total_cycles, result.dram_bytes,
                              flops=result.flops, note=note, result=result,
                              sources=self.sources)
        return [_place(outputs[o.index], o.device) if o.index is not None else o.value
                for o in variant.layout]

    def _check_numerics(self, layout: tuple[_Output, ...], inputs: list[Any],
                        outputs: tuple[Any, ...]) -> None:
        """Numbers are a contract: a run's outputs against the graph run by torch on
        CPU, a :class:`NumericsError` when they disagree by more than rounding
        (:func:`torch_bridge.numerics.check_close`; not for a graph that
        draws random numbers or reads uninitialized memory: CPU would get others)."""
        if self._no_reference:
            return

        def run(gm: torch.fx.GraphModule, args: tuple[Any, ...]) -> tuple[Any, ...]:
            with torch.no_grad(), triton_on_cpu():
                flat = _flat(gm(*args))
            return tuple(e for e, o in zip(flat, layout) if o.index is not None)

        if self._cpu_gm is None:
            self._cpu_gm = _on_cpu(self.gm)
        cpu_gm, host = self._cpu_gm, tuple(_host(a) for a in inputs)
        check_close(tuple(outputs), run(cpu_gm, host),
                    lambda: run(copy.deepcopy(cpu_gm).double(), in_float64(host)))

    def _run_eagerly(self, variant: _Variant, inputs: list[Any]) -> list[Any]:
        on_npu = any(isinstance(a, torch.Tensor) and a.device.type == "npu" for a in inputs)
        if on_npu:  # each op records itself on the timeline
            runtime.record_host_op(self.label, 0, 0, 0,
                                   note=f"{variant.failure}; ran op by op")
            return list(self.gm(*inputs))
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            outputs = list(_CountedRun(self.gm).run(*inputs))
        elements = sum(o.numel() for o in outputs if isinstance(o, torch.Tensor))
        runtime.record_host_op(self.label, max(counter.get_total_flops(), elements), 0, 0,
                               note=f"{variant.failure}; ran on CPU")
        return outputs


class _CountedRun(torch.fx.Interpreter):
    """Runs a graph node by node under torch's ``FlopCounterMode``. The counter declines
    higher-order ops it has no rule for (``with_effects``, which wraps the check of
    ``torch.linalg.inv``): it returns ``NotImplemented`` without running them, so such an
    op then runs once outside the counter, its FLOPs uncounted."""

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        result = super().call_function(target, args, kwargs)
        if result is not NotImplemented or \
                not isinstance(target, torch._ops.HigherOrderOperator):
            return result
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            return target(*args, **kwargs)


def _computes_int64(gm: torch.fx.GraphModule) -> bool:
    """Whether an op of ``gm`` makes an int64 tensor (by its ``meta["val"]``)."""
    return any(isinstance(v, torch.Tensor) and v.dtype == torch.int64
               for n in gm.graph.nodes if n.op == "call_function"
               for v in _flat(n.meta.get("val")))


EXACT_INTS = 2 ** 53
"""The simulator's int64 arithmetic is exact below this magnitude (float64's)."""


def _beyond_exact_ints(values: Sequence[Any]) -> bool:
    """Whether an int64 tensor among ``values`` holds a magnitude of :data:`EXACT_INTS`
    or more (a cheap look at the run's inputs and outputs; CPU's check of the whole
    graph each run would double a language model's call and demand CPU's order of
    ``topk``'s ties)."""
    return any(isinstance(v, torch.Tensor) and v.dtype == torch.int64 and v.numel()
               and int(_host(v).abs().max()) >= EXACT_INTS  # the bytes: no npu ops run
               for v in values)


def _on_cpu(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose factory ops and copies make CPU tensors where it makes npu
    ones: the reference run must not run (and record) npu work of its own."""
    graph = copy.deepcopy(gm.graph)
    for node in graph.nodes:
        device = node.kwargs.get("device")
        if device is not None and torch.device(device).type != "cpu":
            node.kwargs = {**node.kwargs, "device": torch.device("cpu")}
    return torch.fx.GraphModule(gm, graph)


def _op_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        name = f"{target.namespace}.{target._opname}"
        return name if target._overloadname == "default" else f"{name}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


_counter = itertools.count()


def _compiler(role: str, kinds: tuple[str, ...] = ()
              ) -> Callable[[torch.fx.GraphModule, Sequence[Any]], GraphRunner]:
    """``kinds``: parameter / buffer / user_input per input of dynamo's graph. A forward
    graph takes the same inputs in the same order, so its placeholders are marked
    (``meta["archsim_kind"]``) and the compiler schedules them as weights, as it does
    an exported program's (batch-norm folding hoisted ahead of the convolutions)."""
    def compile_aten_graph(gm: torch.fx.GraphModule,
                           example_inputs: Sequence[Any]) -> GraphRunner:
        tokens = effect_tokens(gm.graph)  # aot_autograd's own inputs, not dynamo's
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder" and n not in tokens]
        if kinds and len(placeholders) == len(kinds):
            for node, kind in zip(placeholders, kinds):
                node.meta["archsim_kind"] = kind
        return GraphRunner(gm, f"compiled {role} {next(_counter)}")

    return compile_aten_graph


def _input_kinds(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> tuple[str, ...]:
    """Which of dynamo's graph inputs are the module's parameters and buffers."""
    from torch._dynamo.source import is_from_unspecialized_param_buffer_source

    kinds = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, example_inputs):
        source = getattr(node.meta.get("grapharg"), "source", None)
        if isinstance(value, torch.nn.Parameter):
            kinds.append("parameter")
        elif source is not None and is_from_unspecialized_param_buffer_source(source):
            kinds.append("buffer")
        else:
            kinds.append("user_input")
    return tuple(kinds) if len(kinds) == len(example_inputs) else ()


def _attention_math(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                    is_causal: bool = False, dropout_mask: torch.Tensor | None = None, *,
                    scale: float | None = None, enable_gqa: bool = False) -> Any:
    """SDPA's math path as ATen writes it, in the inputs' dtype. ATen's upcasts f16 and
    bf16 inputs to float32 for the host's accuracy; the device's flash-attention kernel
    (which the compiler matches this pattern to) takes them as they are and
    accumulates in f32, as a fused kernel does. Dropout keeps ATen's path."""
    if dropout_p or dropout_mask is not None:
        return NotImplemented
    rows, keys = query.shape[-2], key.shape[-2]
    factor = (1.0 / query.shape[-1] ** 0.5 if scale is None else scale) ** 0.5
    if enable_gqa:
        repeat = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(repeat, dim=-3)
        value = value.repeat_interleave(repeat, dim=-3)
    if is_causal:
        attn_mask = torch.ones(rows, keys, dtype=torch.bool, device=query.device).tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.where(attn_mask, 0.0, float("-inf")).to(query.dtype)
    scores = (query * factor) @ (key.transpose(-2, -1) * factor)
    if attn_mask is None:
        probs = torch.softmax(scores, dim=-1)
    else:  # a row every key of which is masked gives zeros, as ATen's math path
        probs = torch.ops.aten._safe_softmax.default(scores + attn_mask, -1)
    return probs @ value, probs


def _differentiable_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                              attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                              is_causal: bool = False, scale: float | None = None,
                              enable_gqa: bool = False) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` written as :func:`_attention_math`'s ops, for
    a graph that is differentiated. On CPU, SDPA reaches autograd as
    ``_scaled_dot_product_flash_attention_for_cpu``, whose backward takes the forward's
    logsumexp; torch.export's decomposition of that forward returns the attention
    probabilities in its place, so the backward computed wrong gradients. Written with
    these ops, autograd differentiates them (the backward saves the probabilities) and
    both graphs run on the device. Dropout keeps torch's own path."""
    if dropout_p:
        return torch._C._nn.scaled_dot_product_attention(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
            enable_gqa=enable_gqa)
    return _attention_math(query, key, value, attn_mask, 0.0, is_causal, scale=scale,
                           enable_gqa=enable_gqa)[0]


_SDPA = (torch.nn.functional.scaled_dot_product_attention,
         torch._C._nn.scaled_dot_product_attention)


def _with_math_attention(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` calling :func:`_differentiable_attention` where it calls SDPA by
    ``torch.nn.functional``'s module-level name (as ``multi_head_attention_forward``
    does), while autograd traces it: the name is swapped for the call only. (A torch
    function mode cannot do this: inside its handler it is off, and on again it
    would catch ``fn`` itself.)"""
    def call(*args: Any, **kwargs: Any) -> Any:  # (not functools.wraps: FX would
        # write the call as torch's own function, by its module and name)
        functional = torch.nn.functional
        saved = functional.scaled_dot_product_attention
        functional.scaled_dot_product_attention = _differentiable_attention
        try:
            return fn(*args, **kwargs)
        finally:
            functional.scaled_dot_product_attention = saved
    return call


_CALLING_SDPA = (torch.nn.functional.multi_head_attention_forward,)
"""Functions dynamo leaves whole in its graph that call SDPA inside
(``nn.MultiheadAttention``, hence ``nn.Transformer*`` layers)."""


def _attention_for_training(gm: torch.fx.GraphModule,
                            example_inputs: Sequence[Any]) -> None:
    """When ``aot_autograd`` will differentiate ``gm`` (an input requires grad, as it
    decides), its SDPA calls, and those inside :data:`_CALLING_SDPA`, become
    :func:`_differentiable_attention`. Inference graphs keep the call: it is decomposed
    below autograd, to the same ops."""
    if not torch.is_grad_enabled() or not any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in example_inputs):
        return
    rewritten = False
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in _SDPA:
            node.target = _differentiable_attention
        elif node.target in _CALLING_SDPA:
            node.target = _with_math_attention(node.target)
        else:
            continue
        rewritten = True
    if rewritten:
        gm.recompile()


def archsim_backend(gm: torch.fx.GraphModule,
                    example_inputs: Sequence[Any], **kwargs: Any) -> Callable[..., Any]:
    """The dynamo backend: ``aot_autograd`` with every forward / backward graph
    compiled and simulated by archsim. The decompositions are ``torch.export``'s, as
    for ``archsim run`` and ``archsim.estimate`` (attention kept whole), with SDPA's
    math path in its inputs' dtype (:func:`_attention_math`), and the module's
    parameters and buffers are weights, so a model gets the same graph, hence the same
    latency, through every door. A graph that is differentiated gets SDPA as those ops
    before autograd sees it (:func:`_attention_for_training`)."""
    from torch._dynamo.backends.common import aot_autograd

    from compiler.export import export_decompositions

    decompositions = {**export_decompositions(),
                      torch.ops.aten._scaled_dot_product_attention_math.default: _attention_math}
    _attention_for_training(gm, example_inputs)
    backend = aot_autograd(fw_compiler=_compiler("forward", _input_kinds(gm, example_inputs)),
                           bw_compiler=_compiler("backward"), decompositions=decompositions)
    return backend(gm, example_inputs, **kwargs)


__all__ = ["MAX_VARIANTS", "GraphFallbackWarning", "GraphRunner", "archsim_backend"]
