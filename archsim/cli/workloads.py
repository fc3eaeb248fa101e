"""What ``archsim run MODEL`` can run: built-in workloads, a user's Python file, or a
saved ``.rbln`` program — and the one function that compiles and simulates any of them.

Large models run performance-only automatically: they are built on the ``meta``
device (shapes, no weights), so a 7B-parameter estimate allocates nothing.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archsim.config import NpuConfig
from archsim.errors import ArchsimError

FUNCTIONAL_PARAMETER_LIMIT = 30_000_000
"""Models with more parameters than this run performance-only unless asked otherwise."""
FUNCTIONAL_BYTES_LIMIT = 1 << 30
"""Built-in workloads whose weights and inputs take more host memory than this run
performance-only (``gemm --seq 100000`` would allocate 80 GB of inputs on the host)."""


@dataclass(frozen=True)
class Workload:
    description: str
    build: Callable[[argparse.Namespace, Any], tuple[Any, tuple[Any, ...]]]
    """(args, torch dtype) -> (module, example inputs); called under the target device."""
    batch: int = 1
    seq: int = 128
    layers: int = 0
    model_layers: int = 0
    """Layers of the model the workload stands for (the report says N of them)."""
    op: str = ""
    """The aten op (``mm``) the workload is by itself: performance-only runs compile it
    as that one op (``compile_op``, the eager device's path) instead of through
    ``torch.export``, whose import of ``torch._dynamo`` takes over a second; the graph
    is the same single node."""


def _ids(args: argparse.Namespace, vocab: int) -> Any:
    import torch

    return torch.randint(0, vocab, (args.batch, args.seq))


def _gpt2(args, dtype):
    from archsim.app.models import GPT2

    return GPT2(layers=args.layers).to(dtype), (_ids(args, 50257),)


def _bert(args, dtype):
    from archsim.app.models import Bert

    return Bert(layers=args.layers).to(dtype), (_ids(args, 30522),)


def _llama(args, dtype):
    import torch

    from archsim.app.models import Llama

    model = Llama(layers=args.layers).to(dtype)
    return model, (torch.randn(args.batch, args.seq, 4096, dtype=dtype),)


def _llama_small(args, dtype):
    import torch

    from archsim.app.models import Llama

    model = Llama(layers=args.layers, hidden=512, heads=8, kv_heads=2,
                  intermediate=1376).to(dtype)
    return model, (torch.randn(args.batch, args.seq, 512, dtype=dtype),)


def _resnet(blocks: tuple[int, ...], bottleneck: bool):
    def build(args, dtype):
        import torch

        from archsim.app.models import ResNet

        model = ResNet(blocks, bottleneck).to(dtype)
        return model, (torch.randn(args.batch, 3, 224, 224, dtype=dtype),)
    return build


def _gemm(args, dtype):
    import torch

    from archsim.app.models import Gemm

    n = args.seq
    return Gemm(), (torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype))


def _conv(args, dtype):
    import torch

    from archsim.app.models import Conv

    return Conv(64, 64, 3).to(dtype), (torch.randn(args.batch, 64, 56, 56, dtype=dtype),)


def _attention(args, dtype):
    import torch

    from archsim.app.models import SDPA

    shape = (args.batch, 12, args.seq, 64)
    return SDPA(), tuple(torch.randn(shape, dtype=dtype) for _ in range(3))


WORKLOADS: dict[str, Workload] = {
    "gpt2": Workload("GPT-2 small (hidden 768, 12 heads), --layers (12), --seq (128)",
                     _gpt2, layers=12, model_layers=12),
    "bert-base": Workload("BERT-base encoder (hidden 768, 12 heads), --layers (12), --seq (128)",
                          _bert, layers=12, model_layers=12),
    "llama-7b": Workload("Llama-7B-shaped decoder (hidden 4096, SwiGLU 11008), --layers "
                         "(32: 3 simulated, the others extended), --seq (2048); "
                         "performance-only", _llama, seq=2048, layers=32, model_layers=32),
    "llama-small": Workload("small Llama-style decoder (hidden 512, GQA 8/2 heads), "
                            "--layers (2)", _llama_small, layers=2),
    "resnet-18": Workload("ResNet-18 on 224x224 images, --batch (1)", _resnet((2, 2, 2, 2), False)),
    "resnet-50": Workload("ResNet-50 on 224x224 images, --batch (1)", _resnet((3, 4, 6, 3), True)),
    "gemm": Workload("square GEMM, --seq gives the size (default 1024)", _gemm, seq=1024,
                     op="mm"),
    "conv": Workload("3x3 conv, 64->64 channels on 56x56, --batch (1)", _conv),
    "attention": Workload("causal scaled-dot-product attention, 12 heads x 64, --seq (128)",
                          _attention),
}


# ---------------------------------------------------------------- simulate anything


def simulate_model(args: argparse.Namespace, config: NpuConfig, progress) -> Any:
    """Compile (if needed) and simulate MODEL on ``config``; returns a SimResult."""
    model = args.model
    if model.endswith(".rbln"):
        return _simulate_program(Path(model), config, progress)
    if model.endswith(".py"):
        module, inputs = _from_python_file(Path(model))
        return _simulate_torch(Path(model).stem, module, inputs, args, config, progress)
    if getattr(args, "kwargs", None):
        raise ArchsimError(f"--kwarg applies to a model file (.py), not to {model!r}")
    workload = WORKLOADS.get(model)
    if workload is None:
        raise ArchsimError(f"unknown model {model!r}: give a built-in workload "
                           f"({', '.join(WORKLOADS)}), a .py file or a .rbln program")
    return _simulate_builtin(model, workload, args, config, progress)


def _simulate_program(path: Path, config: NpuConfig, progress) -> Any:
    from archsim.simulator import Simulator
    from compiler.ir.text import load_program

    if not path.is_file():
        raise ArchsimError(f"no such program file: {path}")
    with progress.step(f"parsing {path}"):
        program = load_program(path)
    with progress.step(f"simulating {len(program.commands)} commands on {config.name}"):
        return Simulator(config).run(program)


def _from_python_file(path: Path) -> tuple[Any, tuple[Any, ...]]:
    if not path.is_file():
        raise ArchsimError(f"no such model file: {path}")
    try:
        compile(path.read_bytes(), str(path), "exec")
    except SyntaxError as exc:  # also a file that is not UTF-8
        raise ArchsimError(f"{path}:{exc.lineno}: not valid Python: {exc.msg}") from None
    # An exception raised by the file's own code keeps its traceback: it points into the
    # user's model, where the bug is.
    namespace = runpy.run_path(str(path))
    model = namespace.get("model")
    inputs = namespace.get("example_inputs")
    if model is None and callable(namespace.get("get_model")):
        model = namespace["get_model"]()
    if inputs is None and callable(namespace.get("get_inputs")):
        inputs = namespace["get_inputs"]()
    if model is None or inputs is None:
        raise ArchsimError(f"{path}: define 'model' (an nn.Module) and 'example_inputs' (a "
                           f"tuple of tensors), or functions get_model() and get_inputs()")
    return model, tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def _simulate_builtin(name: str, workload: Workload, args: argparse.Namespace,
                      config: NpuConfig, progress) -> Any:
    import torch

    args.batch = args.batch or workload.batch
    args.seq = args.seq or workload.seq
    args.layers = args.layers or workload.layers
    torch.manual_seed(0)
    with torch.device("meta"):
        module, meta_inputs = workload.build(args, _dtype(args.dtype or "f32"))
    parameters = sum(p.numel() for p in module.parameters())
    data_bytes = sum(t.numel() * t.element_size() for t in (*module.parameters(), *meta_inputs)
                     if isinstance(t, torch.Tensor))
    perf_only = (args.perf_only or parameters > FUNCTIONAL_PARAMETER_LIMIT
                 or data_bytes > FUNCTIONAL_BYTES_LIMIT or name == "llama-7b")
    # Functional runs default to f32 so numbers compare with torch exactly; estimates
    # default to the matrix engine's native precision, as a deployment would use.
    native = config.core.matrix.input_dtype if config.core.matrix.input_dtype != "i8" else "f16"
    dtype_name = args.dtype or (native if perf_only else "f32")
    dtype = _dtype(dtype_name)
    if perf_only:  # shapes only: the meta module in the run's dtype (every build ends
        module = module.to(dtype)  # in .to(dtype) and makes float inputs in it)
        inputs = tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point()
                       else t for t in meta_inputs)
    else:
        with torch.device("cpu"):
            module, inputs = workload.build(args, dtype)
    if not perf_only and not args.quiet:
        print(f"{name}: {parameters / 1e6:.1f}M parameters, {dtype_name}, functional run "
              f"(numbers checked against torch on CPU)", file=sys.stderr)
    elif not args.quiet:
        print(f"{name}: {parameters / 1e6:.1f}M parameters, {dtype_name}, performance-only "
              f"(shapes only; --perf-only, > {FUNCTIONAL_PARAMETER_LIMIT / 1e6:.0f}M "
              f"parameters or > {FUNCTIONAL_BYTES_LIMIT >> 30} GiB of weights and inputs)",
              file=sys.stderr)
    label = f"{name} b{args.batch}" + (f" s{args.seq}" if name not in ("resnet-18", "resnet-50",
                                                                       "conv") else "")
    label += f" {dtype_name}"
    of = f" of {workload.model_layers}" if workload.layers and workload.model_layers else ""
    layers = f"{args.layers}{of}" if workload.layers else ""
    if perf_only and workload.op:
        return _run_op(label, workload.op, inputs, config, args, progress)
    return _run_module(label, module.eval(), inputs, {}, perf_only, config, args, progress,
                       layers)


def _run_op(name: str, op: str, inputs: tuple[Any, ...], config: NpuConfig,
            args: argparse.Namespace, progress) -> Any:
    """Compile ``aten.<op>`` on ``inputs`` (meta) as one op and simulate it
    performance-only, a large matmul in part unless ``--all-layers``."""
    import dataclasses

    import torch

    from compiler import compile_op
    from torch_bridge.estimate import estimate_options

    options = estimate_options(getattr(args, "all_layers", False))
    with progress.step(f"compiling for {config.name}"):
        compiled = compile_op(getattr(torch.ops.aten, op).default, inputs, {}, config,
                              options, name=op)
    compiled = dataclasses.replace(compiled, program=dataclasses.replace(compiled.program,
                                                                         name=name))
    with progress.step(f"simulating {len(compiled.program.commands)} commands "
                       f"(performance-only)"):
        return compiled.simulate()


def _simulate_torch(name: str, module: Any, inputs: tuple[Any, ...], args: argparse.Namespace,
                    config: NpuConfig, progress) -> Any:
    from torch_bridge.model_outputs import Forward

    perf_only = args.perf_only or any(getattr(t, "is_meta", False) for t in inputs)
    # one forward pass returning tensors (ModelOutput flattened, no KV cache object)
    kwargs = dict(getattr(args, "kwargs", None) or [])
    from compiler.torch_types import TORCH_TO_IR

    weights = {TORCH_TO_IR[p.dtype].value if p.dtype in TORCH_TO_IR else str(p.dtype)
               for p in module.parameters() if p.is_floating_point()}
    label = f"{name} ({'/'.join(sorted(weights))} weights)" if weights else name
    return _run_module(label, module.eval(), inputs, kwargs, perf_only, config, args,
                       progress)


def _run_module(name: str, model: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any],
                perf_only: bool, config: NpuConfig, args: argparse.Namespace, progress,
                layers: str = "") -> Any:
    """Export, compile and simulate ``model(*inputs, **kwargs)``. Performance-only runs
    simulate the first layers of a stack of identical layers and extend the result to
    the whole stack (``archsim.estimate``'s export; ``--all-layers`` simulates each);
    ``layers`` (``12`` or ``2 of 32``) names the layers a built-in model was built with."""
    import dataclasses

    import torch

    import compiler
    from torch_bridge.estimate import estimate_options, export_shapes, whole_stack
    from torch_bridge.layer_stack import KEEP_LAYERS
    from torch_bridge.model_outputs import bind_arguments

    quiet = args.quiet
    module, tensors = bind_arguments(model, inputs, kwargs)
    stack = None
    with progress.step("exporting with torch.export"):
        if perf_only:
            exported, stack = export_shapes(model, inputs, kwargs,
                                            getattr(args, "all_layers", False))
        else:
            exported = compiler.export_model(module, tensors)
    if stack:
        kept = KEEP_LAYERS
        name += (f", {layers or stack.total} layers ({kept} simulated, "
                 f"{stack.total - kept} extended)")
    elif layers:
        name += f", {layers} layers simulated"
    with progress.step(f"compiling for {config.name}"):
        options = estimate_options(getattr(args, "all_layers", False)) if perf_only else None
        compiled = compiler.compile_graph(exported, config, options)
    program = dataclasses.replace(compiled.program, name=name)
    compiled = dataclasses.replace(compiled, program=program)
    steps = f"simulating {len(program.commands)} commands"
    if perf_only:
        with progress.step(steps + " (performance-only)"):
            return whole_stack(compiled.simulate(), stack)
    with progress.step(steps + " (functional)"):
        outputs, result = compiled.run(*tensors)
    with torch.no_grad(), _triton_on_cpu():
        expected = module(*tensors)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    worst = max(float((o.float() - e.float()).abs().max()) for o, e in zip(outputs, expected))
    if not quiet:
        print(f"numerics: max |npu - torch cpu| = {worst:.3g} over {len(outputs)} output(s)",
              file=sys.stderr)
    return result


def _triton_on_cpu() -> Any:
    """The CPU reference runs a model's Triton kernels on Triton's interpreter."""
    import contextlib

    if "triton" not in sys.modules:
        return contextlib.nullcontext()
    from torch_bridge.triton_launch import interpreted_on_cpu

    return interpreted_on_cpu()


def _dtype(name: str) -> Any:
    import torch

    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[name]
