"""compile_graph / compile_op: the driver from torch programs to a CompiledProgram.

Pipeline: frontend (FX -> graph IR) -> dead-code elimination -> splat resolution ->
fusion (graph -> kernels) -> materialization (which values get DRAM tensors) -> kernels
(tiling, SRAM planning, multicore, double buffering) -> scheduled Program.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np

from archsim.config.model import NpuConfig
from archsim.errors import LoweringError
from compiler import graph as g
from compiler.emit import Emitter
from compiler.graph import Graph, Value, base_of
from compiler.ir.collector import paused
from compiler.schedule_cache import ScheduleCache
from compiler.ir.dram_peak import check_dram_capacity, check_inputs_fit
from compiler.ir.dtypes import DType
from compiler.ir.ops import Program
from compiler.kernels.common import Context
from compiler.kernels.matmul_panels import TilePanels
from compiler.layout import ChannelsLastConvPass, channels_last
from compiler.layout_regions import ChannelsLastActivationsPass
from compiler.options import CompileOptions
from compiler.plan import ANCHORS, FusionPass, Kernel
from compiler.residency import keep_on_chip
from compiler.passes import (
    AttentionLayoutPass,
    DeadCodePass,
    HoistWeightPrepPass,
    PadIntoConvPass,
    SinkViewsPass,
    SplatPass,
)


@dataclass(frozen=True)
class OutputSpec:
    """A graph output: the DRAM tensor holding it and the shape to read it as."""

    tensor: str
    shape: tuple[int, ...]
    """The shape it is stored as."""
    dtype: str
    perm: tuple[int, ...] | None = None
    """Set when stored in another dim order than the caller's (a channels-last result):
    the caller gets ``stored.permute(argsort(perm))``, torch's channels-last strides."""


def logical(tensor: Any, perm: tuple[int, ...] | None) -> Any:
    """A stored tensor as the caller sees it: ``perm`` undone, as a view."""
    if perm is None:
        return tensor
    return tensor.permute(tuple(sorted(range(len(perm)), key=perm.__getitem__)))


@dataclass(frozen=True)
class Fill:
    """A constant made of one value (materialized only for functional runs)."""

    value: float
    shape: tuple[int, ...]
    dtype: DType

    def array(self) -> np.ndarray:
        from compiler.ir.dtypes import DType as D
        np_dtype = np.float32 if self.dtype in (D.bf16, D.f16, D.f32) else self.dtype.storage
        return np.full(self.shape, self.value, dtype=np_dtype)


@dataclass(frozen=True)
class CompiledProgram:
    """A scheduled program plus everything needed to run it on torch tensors."""

    program: Program
    config: NpuConfig
    options: CompileOptions
    inputs: tuple[Any, ...]
    """InputSpec per graph placeholder, in order (params, buffers, user inputs)."""
    input_names: tuple[str, ...]
    """DRAM tensor name per graph placeholder, in the same order."""
    outputs: tuple[OutputSpec, ...]
    output_names: tuple[str, ...]
    host_functions: Mapping[str, Callable[..., Any]]
    constants: Mapping[str, Any]
    """DRAM tensor name -> numpy array or :class:`Fill` (fed automatically by ``run``)."""
    fallbacks: tuple[str, ...]
    """Graph nodes that run on the host (``"node: aten op"``)."""
    kernels: tuple[str, ...]
    bound: Mapping[str, Any] = field(default_factory=dict)
    """Placeholder name -> tensor for parameters/buffers known at compile time."""
    reference: Any = field(default=None, compare=False, repr=False)
    """The FX GraphModule compiled (for ``run(simulate=False)``: torch on CPU)."""
    tile_panels: TilePanels | None = None
    """Set when the last kernel, a matmul, was compiled in part (performance-only)."""
    choices: Mapping[str, str] = field(default_factory=dict)
    """Kernel source -> the mapping it chose among several, and why."""

    @property
    def user_input_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.inputs if s.kind == "user_input")

    @cached_property
    def _tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        return {t.name: t.shape for t in self.program.tensors}

    @cached_property
    def _output_dtypes(self) -> tuple[Any, ...]:
        from compiler.torch_types import torch_dtype
        return tuple(torch_dtype(DType(spec.dtype)) for spec in self.outputs)

    def feed(self, *args: Any) -> dict[str, np.ndarray]:
        """Input arrays by DRAM name: give every placeholder, or only the user inputs
        when parameters were bound at compile time."""
        from compiler.torch_types import to_numpy
        import torch

        names = self.input_names
        if len(args) != len(names):
            users = self.user_input_names
            tokens = {n for n, s in zip(names, self.inputs) if s.kind == g.TOKEN}
            if len(args) != len(users) or set(self.bound) < set(names) - set(users) - tokens:
                raise LoweringError(f"{self.program.name}: expected {len(names)} inputs "
                                    f"({', '.join(names)}) or {len(users)} user inputs, got "
                                    f"{len(args)}")
            given = dict(zip(users, args))
            args = tuple(given.get(n, self.bound.get(n)) for n in names)
        feed: dict[str, np.ndarray] = {}
        shapes = self._tensor_shapes
        for name, arg, spec in zip(names, args, self.inputs):
            if spec.kind == g.TOKEN:  # no data (aot_autograd passes None, export nothing)
                feed[name] = np.empty(shapes[name], dtype=np.float32)
                continue
            array = to_numpy(arg) if isinstance(arg, torch.Tensor) else np.asarray(arg)
            if spec.perm is not None:  # stored channels-last, as torch held it
                array = np.ascontiguousarray(
                    np.transpose(array.reshape(spec.shape), spec.perm))
            feed[name] = array.reshape(shapes[name]) if array.shape != shapes[name] else array
        for name, const in self.constants.items():
            array = const if isinstance(const, np.ndarray) else const.array()
            feed[name] = array.reshape(shapes[name]) if array.shape != shapes[name] else array
        return feed

    def run(self, *args: Any, simulate: bool = True, verify: bool = True,
            timing: Any = None) -> tuple[Any, Any]:
        """Run functionally on tensors/arrays; returns (outputs as torch tensors, SimResult).
        With ``simulate=False`` the compiled graph runs in torch on CPU instead and the
        SimResult is None (a fast reference path). With ``timing`` (an earlier result of
        this program) the commands run functionally without the event simulation and the
        result keeps that timing (:func:`archsim.replay.replay`: cycles never depend on
        the data)."""
        import torch

        from archsim.replay import replay
        from archsim.simulator import Simulator

        if not simulate:
            return self._reference(*args), None
        if self.tile_panels is not None:
            raise LoweringError(f"{self.program.name}: compiled in part for performance-only "
                                f"runs (partial_matmul_commands); it cannot run functionally")
        if timing is not None:
            result = replay(self.program, self.config, self.feed(*args), timing,
                            self.host_functions)
        else:
            result = Simulator(self.config).run(self.program, self.feed(*args),
                                                host_functions=dict(self.host_functions),
                                                verify=verify)
        outs = []
        for spec, dtype in zip(self.outputs, self._output_dtypes):
            array = np.asarray(result.outputs[spec.tensor]).reshape(spec.shape)
            outs.append(logical(torch.from_numpy(np.array(array)).to(dtype), spec.perm))
        return tuple(outs), result

    def _reference(self, *args: Any) -> tuple[Any, ...]:
        import torch

        from compiler.torch_types import torch_dtype

        if self.reference is None:
            raise LoweringError(f"{self.program.name}: no reference graph to run without "
                                f"simulation")
        feed = self.feed(*args)
        tensors = [logical(torch.from_numpy(np.array(feed[name])).reshape(
            spec.shape if spec.perm is None else [spec.shape[d] for d in spec.perm]),
            spec.perm).to(torch_dtype(DType(spec.dtype)))
            for name, spec in zip(self.input_names, self.inputs)]
        outs = self.reference(*tensors)
        flat = [outs] if isinstance(outs, torch.Tensor) else list(outs)
        return tuple(t for t in flat if isinstance(t, torch.Tensor))

    def simulate(self, verify: bool = True) -> Any:
        """Performance-only simulation (no data); a matmul compiled in part is extended
        to the whole (``SimResult.tiles``)."""
        from archsim.simulator import Simulator

        result = Simulator(self.config).run(self.program, None, verify=verify)
        return result if self.tile_panels is None else self.tile_panels.extend(result)


# ---------------------------------------------------------------- the driver

_CACHE: ScheduleCache[CompiledProgram] = ScheduleCache()


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "t"


def _kernel_table() -> dict[type[g.Spec] | None, Callable[[Context, Kernel], Any]]:
    from compiler.kernels.attention import lower_attention_kernel
    from compiler.kernels.conv import lower_conv_kernel
    from compiler.kernels.pool import lower_pool_kernel
    from compiler.kernels.host import lower_host_kernel
    from compiler.kernels.matmul import lower_matmul_kernel
    from compiler.kernels.movement import (
        lower_cat_kernel,
        lower_gather_kernel,
        lower_pad_kernel,
    )
    from compiler.kernels.triton import lower_triton_kernel
    from compiler.kernels.vector import lower_vector_kernel

    return {
        None: lower_vector_kernel,
        g.MatMul: lower_matmul_kernel,
        g.Conv2d: lower_conv_kernel,
        g.Attention: lower_attention_kernel,
        g.Pool2d: lower_pool_kernel,
        g.Cat: lower_cat_kernel,
        g.Pad: lower_pad_kernel,
        g.Gather: lower_gather_kernel,
        g.HostCall: lower_host_kernel,
        g.TritonCall: lower_triton_kernel,
    }


def _materialize(graph: Graph, kernels: list[Kernel], scalars: dict[int, float]) -> set[int]:
    """Base value ids that need a DRAM tensor: read by another kernel or returned."""
    owner: dict[int, Kernel] = {}
    for kernel in kernels:
        for node in kernel.nodes:
            for v in node.outputs:
                owner[v.id] = kernel
    needed: set[int] = set()
    for kernel in kernels:
        for node in kernel.nodes:
            for v in node.value_inputs():
                if v.id in scalars:
                    continue
                base = base_of(v)
                if owner.get(base.id) is not kernel or base is not v:
                    needed.add(base.id)
                if isinstance(kernel.anchor and kernel.anchor.spec, ANCHORS) and \
                        node is kernel.anchor:
                    needed.add(base.id)
    for kernel in kernels:  # a host op returns all its results (svd's U, S and Vh)
        if isinstance(kernel.anchor and kernel.anchor.spec, g.HostCall):
            needed.update(v.id for v in kernel.anchor.outputs)
    for v in graph.outputs:
        needed.add(base_of(v).id)
    return needed


def build_program(graph: Graph, config: NpuConfig, options: CompileOptions, name: str
                  ) -> tuple[Program, dict[int, str], dict[str, Callable[..., Any]],
                             dict[str, Any], list[Kernel], Context]:
    graph = DeadCodePass().apply(PadIntoConvPass().apply(graph))
    if options.channels_last:  # on the live graph: a dead reader keeps no region NCHW
        graph = ChannelsLastActivationsPass().apply(graph)
    graph = DeadCodePass().apply(ChannelsLastConvPass().apply(graph))
    if options.attention_fusion:
        graph = AttentionLayoutPass().apply(graph)
    if options.fusion:
        graph = HoistWeightPrepPass().apply(SinkViewsPass().apply(graph))
    scalars = SplatPass().apply(graph)
    kernels = FusionPass().apply(graph, options)
    needed = _materialize(graph, kernels, scalars)
    em = Emitter(name, config)
    ctx = Context(em, config, options, scalars=scalars)
    used_names: set[str] = set()
    constants: dict[str, Any] = {}
    output_bases = {base_of(v).id for v in graph.outputs}

    def declare(value: Value, role: str) -> None:
        tname = _safe(value.name)
        while tname in used_names:
            tname += "_"
        used_names.add(tname)
        shape = value.shape if value.shape else (1,)
        em.tensor(tname, shape, value.dtype, role)
        ctx.tensors[value.id] = tname

    for v in graph.inputs:
        declare(v, "in")
    for node in graph.nodes:
        for v in node.outputs:
            if v.id not in needed or v.id in ctx.tensors:
                continue
            if isinstance(node.spec, g.Constant):
                declare(v, "in")
                constants[ctx.tensors[v.id]] = graph.constants[v.id]
            elif isinstance(node.spec, g.Splat):
                declare(v, "in")
                constants[ctx.tensors[v.id]] = Fill(node.spec.value, v.shape or (1,), v.dtype)
            else:
                declare(v, "out" if v.id in output_bases else "temp")
    table = _kernel_table()
    host_functions: dict[str, Callable[..., Any]] = {}
    serial = config.runtime.kernel_order == "serial"  # a runtime's stream
    for kernel in kernels:  # only the last may be compiled in part: none waits for it
        ctx.partial_limit = options.partial_matmul_commands if kernel is kernels[-1] else 0
        if serial:  # no command of a kernel overlaps the one before (no prefetch)
            em.barrier()
        spec_type = type(kernel.anchor.spec) if kernel.anchor is not None else None
        lower = table.get(spec_type)
        if lower is None:
            raise LoweringError(f"{kernel.name}: no kernel for {spec_type.__name__}")
        fn_name = lower(ctx, kernel)
        if spec_type is g.HostCall:
            host_functions[fn_name] = kernel.anchor.spec.fn
    constants.update(ctx.constants)
    program = em.build()
    if options.on_chip_temps:
        program = keep_on_chip(program, config)
    return program, ctx.tensors, host_functions, constants, kernels, ctx


def _graph_key(program: Any) -> str:
    import torch

    gm = program.graph_module if isinstance(program, torch.export.ExportedProgram) else program
    parts = [gm.code]
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):  # with its layout where the compiler keeps it
            parts.append(f"{node.name}:{tuple(val.shape)}:{val.dtype}:"
                         f"{'nhwc' if channels_last(val) else ''}")
        if node.op == "get_attr":  # folded into the program: its values are part of it
            parts.append(_tensor_digest(_fetch_attr(gm, str(node.target))))
    if isinstance(program, torch.export.ExportedProgram):
        parts.append(str(program.graph_signature))
    from compiler.export import lifted_constants

    for name, tensor in lifted_constants(program).items():  # folded too
        parts.append(f"{name}={_tensor_digest(tensor)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _fetch_attr(gm: Any, target: str) -> Any:
    return functools.reduce(getattr, target.split("."), gm)


def _tensor_digest(value: Any) -> str:
    import torch

    if not isinstance(value, torch.Tensor) or value.device.type == "meta":
        return repr(type(value))
    data = value.detach().cpu().contiguous().reshape(-1)  # 0-dim too
    raw = data.view(torch.uint8) if data.dtype != torch.bool else data.to(torch.uint8)
    return hashlib.sha256(raw.numpy().tobytes()).hexdigest()


def _bound_weights(program: Any, input_specs: tuple[Any, ...]) -> dict[str, Any]:
    """Parameters and buffers an ExportedProgram carries (not meta), by placeholder."""
    import torch

    if not isinstance(program, torch.export.ExportedProgram):
        return {}
    state = {**program.state_dict, **program.constants}
    bound: dict[str, Any] = {}
    for spec in input_specs:
        tensor = state.get(spec.target)
        if isinstance(tensor, torch.Tensor) and tensor.device.type != "meta":
            bound[spec.name] = tensor
    return bound


def compile_graph(program: Any, config: NpuConfig, options: CompileOptions | None = None
                  ) -> CompiledProgram:
    """Compile an ExportedProgram (after ``run_decompositions()``) or an ATen-level
    ``fx.GraphModule`` whose placeholders carry ``meta["val"]``. Shapes only: fake or
    meta tensors are enough. Schedules are cached by (graph, shapes, dtypes, folded
    constants, config, options); the weights bound are always this program's own."""
    import torch

    from compiler import frontend

    options = options or CompileOptions()
    key = (_graph_key(program), config, options)
    cached = _CACHE.get(key)
    reference = (program.graph_module if isinstance(program, torch.export.ExportedProgram)
                 else program)
    if cached is not None:
        # the schedule is shared; the weights are this program's own
        return dataclasses.replace(
            cached, bound=MappingProxyType(_bound_weights(program, cached.inputs)),
            reference=reference)
    with paused():  # millions of long-lived objects, no garbage: see compiler.ir.collector
        graph, input_specs, fallbacks = frontend.build(program, options)
        name = "graph_" + key[0][:8]
        check_inputs_fit(name, sum(math.prod(v.shape) * v.dtype.itemsize
                                   for v in graph.inputs), config)
        prog, tensors, host_functions, constants, kernels, ctx = build_program(
            graph, config, options, name)
        check_dram_capacity(prog, config)
    outputs = tuple(OutputSpec(tensors[base_of(v).id], v.shape, v.dtype.value,
                               graph.output_perms.get(i))
                    for i, v in enumerate(graph.outputs))
    compiled = CompiledProgram(
        program=prog, config=config, options=options, inputs=tuple(input_specs),
        input_names=tuple(tensors[v.id] for v in graph.inputs), outputs=outputs,
        output_names=tuple(o.tensor for o in outputs),
        host_functions=MappingProxyType(host_functions),
        constants=MappingProxyType(constants), fallbacks=tuple(fallbacks),
        kernels=tuple(k.name for k in kernels),
        bound=MappingProxyType(_bound_weights(program, tuple(input_specs))),
        reference=reference, tile_panels=ctx.tile_panels,
        choices=MappingProxyType(dict(ctx.choices)))
    # the schedule only: the weights and the graph are the caller's
    _CACHE.put(key, dataclasses.replace(compiled, bound=MappingProxyType({}), reference=None))
    return compiled


def clear_cache() -> None:
    _CACHE.clear()
