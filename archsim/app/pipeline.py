"""The one pipeline under every front door: a :class:`Workload` on a config, to a
:class:`~archsim.result.SimResult`.

    export (torch.export, core ATen) -> compile -> simulate -> extend -> numerics check

A **performance-only** run needs shapes only: a model is mirrored on ``meta`` (no weight
is copied), a stack of identical layers is exported with its first layers and extended
to the whole stack, a large final matmul is compiled in its first panels
(:mod:`archsim.repeated`). A **functional** run computes the numbers with the schedule
and checks them against the same model on CPU: a disagreement is a
:class:`~archsim.errors.NumericsError`, never a printed diff.

``mode="auto"`` runs a model functionally unless it is given on ``meta`` or (a built-in
model or sized workload, sized on ``meta`` before anything is allocated) is too large
for the host (:data:`FUNCTIONAL_PARAMETER_LIMIT`, :data:`FUNCTIONAL_BYTES_LIMIT`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archsim.app.catalog import BUILTINS, Sizes, build_workload
from archsim.app.progress import SILENT, Progress
from archsim.app.workload import Kind, Workload
from archsim.config import NpuConfig, load_config
from archsim.app.numerics import check_numerics, input_values, split_outputs
from archsim.errors import (ArchsimError, DeviceMemoryError, HostMemoryError,
                            ProgramConfigError, VerifyError)

if TYPE_CHECKING:
    from archsim.result import SimResult
    from compiler.ir.ops import Program

MODES = ("auto", "functional", "performance")

FUNCTIONAL_PARAMETER_LIMIT = 30_000_000
"""Built-in models and sized workloads with more parameters than this run
performance-only unless asked otherwise."""
FUNCTIONAL_BYTES_LIMIT = 1 << 30
"""Built-in models and sized workloads whose weights and inputs take more host memory
than this run performance-only (``gemm --seq 100000`` would allocate 80 GB of inputs on
the host)."""
_LIMITS = (f"> {FUNCTIONAL_PARAMETER_LIMIT / 1e6:.0f}M parameters or > "
           f"{FUNCTIONAL_BYTES_LIMIT >> 30} GiB of weights and inputs")
"""The two limits, as the notes of a run past them say them."""


@dataclass(frozen=True)
class Settings:
    """How to run, the same for every kind of workload."""

    mode: str = "auto"
    all_layers: bool = False
    """Simulate every layer of a stack and every tile of a large final matmul."""
    options: Any = None
    """``compiler.CompileOptions`` (default: those of the mode)."""
    progress: Progress = SILENT


def run(workload: Workload, config: str | Path | NpuConfig = "atom", *, mode: str = "auto",
        all_layers: bool = False, options: Any = None,
        progress: Progress = SILENT) -> SimResult:
    """Compile (if needed) and simulate ``workload`` on ``config`` (preset name, YAML
    path or :class:`NpuConfig`); ``mode`` is one of :data:`MODES`."""
    from compiler.ir.collector import paused

    if mode not in MODES:
        raise ArchsimError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")
    _check_options(options)
    npu = config if isinstance(config, NpuConfig) else load_config(str(config))
    settings = Settings(mode, all_layers, options, progress)
    # Python's cyclic collector stays out of export, compile and simulate: they make
    # millions of long-lived objects and no garbage (Llama-2-70B's export alone ran
    # 190 collections, 1.2 s); nested pauses are fine.
    with paused():
        return _RUNNERS[workload.kind](workload, npu, settings)


def _check_options(options: Any) -> None:
    """``options`` is None or a CompileOptions, refused by type here rather than as an
    AttributeError deep inside the compiler."""
    from compiler.options import CompileOptions

    if options is not None and not isinstance(options, CompileOptions):
        raise TypeError(f"options must be a compiler.CompileOptions (or None), got "
                        f"{type(options).__name__} {options!r}")


# ---------------------------------------------------------------- per kind


def _run_program(workload: Workload, config: NpuConfig, s: Settings) -> SimResult:
    from archsim.simulator import Simulator

    with s.progress.step(f"parsing {workload.name}" if workload.program is None
                         else "loading the program"):
        program = workload.load_program()
    with s.progress.step(f"simulating {len(program.commands)} commands on {config.name}"):
        try:
            return Simulator(config).run(program)
        except VerifyError as exc:
            raise program_config_error(program, config, exc.problems) from None


def program_target(program: Program) -> str | None:
    """The preset a program was compiled for (its header's ``target=``), if it names
    one of :func:`~archsim.config.preset_names`; None otherwise."""
    from archsim.config import preset_names

    return program.target if program.target in preset_names() else None


def program_config_error(program: Program, config: NpuConfig,
                         problems: tuple[str, ...]) -> VerifyError:
    """The error of a program invalid on ``config``: one line naming the preset it was
    compiled for when ``config`` is another one or that preset changed (hundreds of
    problems, one per command, said nothing the target does not); else every problem,
    as :func:`~archsim.verify` gives them (a program broken on its own target)."""
    target = program_target(program)
    if target is not None and target != config.name:
        hint = (f"; it was compiled for {target}: run it without --config to use that "
                f"preset, or recompile the model for {config.name}")
    elif target is not None and config != load_config(target):
        hint = (f"; it was compiled for {target} as the preset is: run it without the "
                f"changes (--set) or recompile the model with them")
    elif program.target and target is None:
        hint = (f"; it was compiled for {program.target}, not a preset as it is: give "
                f"--config (and --set) as when it was saved")
    else:
        return VerifyError(problems, program.name)
    return ProgramConfigError(problems, program.name, config.name, hint)


def _run_builtin(workload: Workload, config: NpuConfig, s: Settings) -> SimResult:
    import torch

    name, entry = workload.name, BUILTINS[workload.name]
    d = entry.defaults
    sizes = Sizes(workload.batch or d.batch, workload.seq or d.seq, workload.layers or d.layers)
    torch.manual_seed(0)
    with torch.device("meta"):
        module, meta_inputs = entry.build(sizes, torch_dtype(workload.dtype or "f32"))
    parameters = sum(p.numel() for p in module.parameters())
    perf_only = s.mode == "performance" or _too_large(name, module, meta_inputs, s.mode,
                                                      entry.performance_only)
    # Functional runs default to f32 so numbers compare with torch exactly; estimates
    # default to the matrix engine's native precision, as a deployment would use.
    dtype_name = workload.dtype or (native_dtype(config) if perf_only else "f32")
    dtype = torch_dtype(dtype_name)
    if perf_only:  # shapes only: the meta module in the run's dtype (every build ends
        if dtype.is_floating_point:  # in .to(dtype); integer builds make their inputs)
            module = module.to(dtype)
        inputs = tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point()
                       else t for t in meta_inputs)
        s.progress.note(f"{name}: {parameters / 1e6:.1f}M parameters, {dtype_name}, "
                        f"performance-only (shapes only; --perf-only, {_LIMITS})")
    else:
        with torch.device("cpu"):
            module, inputs = entry.build(sizes, dtype)
        s.progress.note(f"{name}: {parameters / 1e6:.1f}M parameters, {dtype_name}, "
                        f"functional run (numbers checked against torch on CPU)")
    label = " ".join([name, *(f"{size[0]}{getattr(sizes, size)}" for size in ("batch", "seq")
                              if size in entry.takes), dtype_name])
    layers = ""
    if "layers" in entry.takes:
        layers = f"{sizes.layers}" + (f" of {entry.model_layers}" if entry.model_layers else "")
    if perf_only and entry.op:
        return _run_op(label, entry.int8_op if dtype_name == "i8" else entry.op, inputs,
                       config, s)
    return _run_module(label, module.eval(), inputs, {}, perf_only, config, s, layers)


def _run_sized(workload: Workload, config: NpuConfig, s: Settings) -> SimResult:
    module, inputs = sized_workload(workload.name, s.mode, s.progress)
    return _run_torch(workload.name, module, inputs, {}, workload.dtype, config, s)


def sized_workload(name: str, mode: str = "auto", progress: Progress = SILENT
                   ) -> tuple[Any, tuple[Any, ...]]:
    """A sized workload's ``(module, inputs)`` for a run in ``mode``, sized on ``meta``
    first, as a built-in model is: one too large for the host stays on ``meta`` (shapes
    only, performance-only; ``gemm_100000x100000x100000``'s inputs are 80 GB), or is a
    :class:`HostMemoryError` when ``mode`` is functional. One that fits is built on the
    CPU even performance-only: its schedule follows the CPU's layouts (a channels_last
    convolution's output is channels_last on the CPU, contiguous on ``meta``)."""
    module, inputs = build_workload(name, meta=True)
    if not _too_large(name, module, inputs, mode):
        return build_workload(name)
    progress.note(f"{name}: performance-only, shapes only ({_LIMITS})")
    return module, inputs


def _too_large(name: str, module: Any, meta_inputs: tuple[Any, ...], mode: str,
               always: bool = False) -> bool:
    """Whether a catalog workload, built on ``meta``, is ``always`` performance-only or
    too large for the host (:data:`FUNCTIONAL_PARAMETER_LIMIT`,
    :data:`FUNCTIONAL_BYTES_LIMIT`); a functional run of one is a
    :class:`HostMemoryError` before anything is allocated."""
    import torch

    parameters = sum(p.numel() for p in module.parameters())
    data_bytes = sum(t.numel() * t.element_size() for t in (*module.parameters(), *meta_inputs)
                     if isinstance(t, torch.Tensor))
    too_large = (always or parameters > FUNCTIONAL_PARAMETER_LIMIT
                 or data_bytes > FUNCTIONAL_BYTES_LIMIT)
    if mode == "functional" and too_large:
        raise HostMemoryError(f"{name} cannot run functionally: {parameters / 1e6:.0f}M "
                              f"parameters, {data_bytes / 2**30:.1f} GiB of weights and "
                              f"inputs on the host (functional runs take at most "
                              f"{FUNCTIONAL_PARAMETER_LIMIT / 1e6:.0f}M parameters and "
                              f"{FUNCTIONAL_BYTES_LIMIT >> 30} GiB); run it performance-only")
    return too_large


def _run_file(workload: Workload, config: NpuConfig, s: Settings) -> SimResult:
    module, inputs = workload.load_file()
    return _run_torch(Path(workload.name).stem, module, inputs, workload.kwargs,
                      workload.dtype, config, s)


def _run_given(workload: Workload, config: NpuConfig, s: Settings) -> SimResult:
    return _run_torch(workload.name, workload.module, workload.inputs, workload.kwargs,
                      workload.dtype, config, s, label_weights=bool(workload.name))


def _run_transformers(workload: Workload, config: NpuConfig, s: Settings) -> SimResult:
    import torch

    from serving.spec import check_positions, read_model_config

    data, name = read_model_config(workload.name)  # its sizes checked, transformers or not
    try:
        import transformers
    except ImportError:
        raise ArchsimError("a transformers config needs transformers: pip install -e "
                           "'.[hf]' (archsim's hf extra) or pip install transformers") from None
    if "model_type" not in data:
        hint = (f"; it is an archsim result: re-render it with 'archsim report "
                f"{workload.name}'" if data.get("format") == "archsim.report" else "")
        raise ArchsimError(f"{workload.name}: not a transformers config.json: it has no "
                           f"'model_type'{hint}")
    fields = {k: v for k, v in data.items() if k != "model_type"}
    if workload.layers:
        fields["num_hidden_layers"] = workload.layers
    try:
        model_config = transformers.AutoConfig.for_model(data.get("model_type", ""), **fields)
    except (ValueError, KeyError, *_config_validation_errors()) as exc:
        # its first line, without the list of every model type transformers knows (a
        # validator's error: the validator's cause, e.g. the hidden size and heads)
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        reason = str(cause).splitlines()[0].split(" Should contain one of")[0]
        raise ArchsimError(f"{workload.name}: transformers cannot read this config "
                           f"({reason})") from None
    if s.mode == "functional":
        raise ArchsimError(f"{name}: a transformers config has no weights; it runs "
                           f"performance-only")
    dtype_name = workload.dtype or native_dtype(config)
    batch, seq = workload.batch or 1, workload.seq or 128
    # the limit the config states (GPT-2's n_positions); a class default (Qwen2's 32768,
    # Llama's 2048) is no statement about a rotary model, which computes any position
    stated = "max_position_embeddings" in data or "n_positions" in data
    positions = getattr(model_config, "max_position_embeddings", None)
    if stated and isinstance(positions, int) and positions > 0:
        check_positions(name, (seq,), positions, "--seq")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            model_config, dtype=torch_dtype(dtype_name), attn_implementation="sdpa")
        ids = torch.zeros(batch, seq, dtype=torch.int64)
    s.progress.note(f"{name}: transformers {type(model).__name__}, "
                    f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
                    f"{dtype_name}, performance-only (a plain forward: every token's logits, "
                    f"no KV cache)")
    return _run_torch(f"{name} b{batch} s{seq} {dtype_name}", model.eval(), (ids,),
                      {"use_cache": False}, None, config, s, label_weights=False)


def _config_validation_errors() -> tuple[type[Exception], ...]:
    """What transformers' strict config classes raise when a validator refuses a config
    (huggingface_hub's, not a ValueError; absent before huggingface_hub 1.0)."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:
        return ()
    return (StrictDataclassError,)


_RUNNERS: dict[Kind, Callable[[Workload, NpuConfig, Settings], SimResult]] = {
    Kind.PROGRAM: _run_program,
    Kind.BUILTIN: _run_builtin,
    Kind.SIZED: _run_sized,
    Kind.FILE: _run_file,
    Kind.MODULE: _run_given,
    Kind.TRANSFORMERS: _run_transformers,
}


# ---------------------------------------------------------------- torch models


def _run_torch(name: str, module: Any, inputs: tuple[Any, ...], kwargs: Mapping[str, Any],
               dtype: str | None, config: NpuConfig, s: Settings,
               label_weights: bool = True) -> SimResult:
    """A model with its inputs, converted to ``dtype`` if given; performance-only when
    asked or when any input is on ``meta``."""
    import torch

    from torch_bridge.shapes import any_meta, meta_like, on_meta

    if not isinstance(module, torch.nn.Module):
        raise ArchsimError(f"expected an nn.Module, got {type(module).__name__}")
    kwargs = dict(kwargs)
    meta = any_meta((inputs, kwargs))
    if s.mode == "functional" and meta:
        raise ArchsimError("a functional run needs data: the inputs are on the meta device")
    perf_only = s.mode == "performance" or meta
    if meta:  # shapes only: the model mirrored on meta too (no weight copied)
        module = on_meta(module)
        inputs = tuple(meta_like(x) for x in inputs)
        kwargs = {k: meta_like(v) for k, v in kwargs.items()}
    # else exported as it is (torch.export traces with fake tensors, copying nothing),
    # so tensors the forward builds from Python values (index lists) stay known
    if dtype is not None:
        module, inputs, kwargs, converted = _converted(module, inputs, kwargs,
                                                       torch_dtype(dtype))
        if converted:
            s.progress.note(f"{name or type(module).__name__}: converted to {dtype} "
                            f"({', '.join(converted)})")
    label = name
    if name and label_weights:
        from compiler.torch_types import TORCH_TO_IR

        weights = {TORCH_TO_IR[d].value if d in TORCH_TO_IR else str(d)
                   for d in _stored_dtypes(module)}
        label = f"{name} ({'/'.join(sorted(weights))} weights)" if weights else name
    return _run_module(label, module, inputs, kwargs, perf_only, config, s)


def _stored_dtypes(module: Any) -> set[Any]:
    """The dtypes a model's weights are stored in: floating parameters, and the
    matrices of quantized ones (torchao's ``Int8Tensor`` reports its float dtype; its
    ``qdata`` is int8; its per-row scales are left out)."""
    import torch

    found = set()
    for p in module.parameters():
        if hasattr(p, "__tensor_flatten__"):  # a tensor subclass: its inner matrices
            found |= {t.dtype for t in (getattr(p, n) for n in p.__tensor_flatten__()[0])
                      if isinstance(t, torch.Tensor) and min(t.shape, default=0) > 1}
        elif p.is_floating_point() or p.dim() >= 2:
            found.add(p.dtype)
    return found


def _run_module(name: str, model: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any],
                perf_only: bool, config: NpuConfig, s: Settings, layers: str = "") -> SimResult:
    """Export, compile and simulate ``model(*inputs, **kwargs)``; ``layers`` (``12`` or
    ``2 of 32``) names the layers a built-in model was built with; an empty ``name``
    keeps the compiler's program name."""
    import compiler
    from torch_bridge.shapes import estimate_options, export_shapes, whole_stack
    from torch_bridge.layer_stack import KEEP_LAYERS
    from torch_bridge.model_outputs import bind_arguments
    from torch_bridge.layer_stack import stacked_kernel_count
    from compiler.triton.graph_call import example_inputs

    stack = None
    with s.progress.step("exporting with torch.export"):
        if perf_only:
            exported, stack = export_shapes(model, inputs, kwargs, s.all_layers)
        else:
            module, tensors = bind_arguments(model, inputs, kwargs)
            exported = compiler.export_model(module, tensors)
    model_name = name
    if name and stack:
        name += (f", {layers or stack.total} layers ({KEEP_LAYERS} simulated, "
                 f"{stack.total - KEEP_LAYERS} extended)")
    elif name and layers:
        name += f", {layers} layers simulated"
    options = s.options
    if options is None and perf_only:
        options = estimate_options(s.all_layers)
    examples = contextlib.nullcontext() if perf_only else \
        example_inputs(input_values(exported, tensors))
    with s.progress.step(f"compiling for {config.name}"), examples:
        try:
            compiled = compiler.compile_graph(exported, config, options)
        except DeviceMemoryError as exc:  # named by the model, not the graph's hash
            raise exc.renamed(model_name) from None
    if name:
        compiled = dataclasses.replace(
            compiled, program=dataclasses.replace(compiled.program, name=name))
    steps = f"simulating {len(compiled.program.commands)} commands"
    kernels = len(compiled.kernels) if stack is None else \
        stacked_kernel_count(compiled.kernels, stack.path, stack.total)
    if perf_only:
        with s.progress.step(steps + " (performance-only)"):
            result = whole_stack(compiled.simulate(), stack)
        return dataclasses.replace(result, kernels=kernels, choices=compiled.choices)
    with s.progress.step(steps + " (functional)"):
        outputs, result = compiled.run(*tensors)
    own, mutated = split_outputs(exported, outputs)
    check_numerics(module, tensors, own, s.progress, mutated, exported.graph)
    return dataclasses.replace(result, kernels=kernels, choices=compiled.choices)


def _run_op(name: str, op: str, inputs: tuple[Any, ...], config: NpuConfig,
            s: Settings) -> SimResult:
    """Compile ``aten.<op>`` on ``inputs`` (meta) as one op and simulate it
    performance-only, a large matmul in part unless ``all_layers``."""
    import torch

    from compiler import compile_op
    from torch_bridge.shapes import estimate_options

    options = s.options or estimate_options(s.all_layers)
    with s.progress.step(f"compiling for {config.name}"):
        compiled = compile_op(getattr(torch.ops.aten, op).default, inputs, {}, config,
                              options, name=op)
    compiled = dataclasses.replace(compiled, program=dataclasses.replace(compiled.program,
                                                                         name=name))
    with s.progress.step(f"simulating {len(compiled.program.commands)} commands "
                         f"(performance-only)"):
        return dataclasses.replace(compiled.simulate(), kernels=len(compiled.kernels),
                                   choices=compiled.choices)


# ---------------------------------------------------------------- dtypes and meta


def torch_dtype(name: str) -> Any:
    """The torch dtype of a dtype name (``f32``, ``f16``, ``bf16``): the IR's table."""
    from compiler.ir.dtypes import DType
    from compiler.torch_types import torch_dtype as of_ir

    return of_ir(DType(name))


def native_dtype(config: NpuConfig) -> str:
    """The matrix arrays' input dtype as a torch dtype name (f16 for integer arrays)."""
    native = config.core.matrix.input_dtype
    return native if native != "i8" else "f16"


def _converted(module: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any], dtype: Any
               ) -> tuple[Any, tuple[Any, ...], dict[str, Any], list[str]]:
    """The model and its floating-point inputs in ``dtype`` (the caller's model is not
    touched: a copy, of a meta mirror's shapes only), and what changed (``float32
    weights``...)."""
    import copy

    import torch

    changed = sorted({f"{t.dtype} weights".replace("torch.", "")
                      for t in (*module.parameters(), *module.buffers())
                      if t.is_floating_point() and t.dtype != dtype})

    def cast(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point() \
                and value.dtype != dtype:
            changed.append(f"{value.dtype} input".replace("torch.", ""))
            return value.to(dtype)
        return value

    inputs = tuple(cast(x) for x in inputs)
    kwargs = {k: cast(v) for k, v in kwargs.items()}
    if any("weights" in c for c in changed):
        module = copy.deepcopy(module).to(dtype)
    return module, inputs, kwargs, sorted(set(changed))


__all__ = ["FUNCTIONAL_BYTES_LIMIT", "FUNCTIONAL_PARAMETER_LIMIT", "MODES", "Settings",
           "native_dtype", "program_config_error", "program_target", "run", "sized_workload",
           "torch_dtype"]
