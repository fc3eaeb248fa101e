"""Triton kernels on ``"npu"`` tensors: ``kernel[grid](...)`` runs on the simulator.

Once Triton is imported (before or after torch), launches whose arguments include an
npu tensor are traced, lowered to the scheduled IR, simulated and timed on the device
timeline like any compiled op; launches on other devices go to Triton unchanged. So a
``torch.library.triton_op`` whose body calls ``wrap_triton(kernel)[grid](...)`` runs on
npu tensors eagerly with no host work, and ``kernel.warmup(..., grid=...)`` (or
:func:`warmup`) compiles ahead of time, as vLLM-RBLN does.

Nothing is patched process-wide except ``JITFunction.run`` (only npu launches take the
new path), Triton's active driver when it has none, ``triton.testing.do_bench``
(simulated while that driver is active) and an unset autotuning listener
(:mod:`torch_bridge.triton_driver`), and the interpreter's rewrite of ``x if c else y``
(:mod:`compiler.triton.interpret`);
Triton's interpreter is entered inside a scope per trace. A kernel whose control flow
or addresses depend on its tensors' values is built for the values at launch (a
warning says which arguments decided what).
"""

from __future__ import annotations

import importlib.abc
import inspect
import logging
import sys
import warnings
from contextlib import contextmanager
from typing import Any
from collections.abc import Iterator

import torch

from torch_bridge import runtime, storage

_installed = False
_verified: set[int] = set()
_noted: set[int] = set()
_cpu_interpreted = False


def _is_npu(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "npu"


def _named_tensors(jit_fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
                   ) -> dict[str, torch.Tensor]:
    names = list(inspect.signature(jit_fn.fn).parameters)
    pairs = list(zip(names, args)) + list(kwargs.items())
    return {n: v for n, v in pairs if isinstance(v, torch.Tensor)}


def _data(jit_fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
          ) -> dict[str, torch.Tensor] | None:
    """The launch's tensor contents (npu tensors' host buffers), None when some tensor
    has no data (meta): a kernel whose control flow or addresses depend on values is
    built for these."""
    tensors = _named_tensors(jit_fn, args, kwargs)
    if any(t.device.type not in ("npu", "cpu") for t in tensors.values()):
        return None
    return {n: storage.cpu_view(t) if _is_npu(t) else t for n, t in tensors.items()}


def warmup(jit_fn: Any, *args: Any, grid: Any, **kwargs: Any) -> Warmed:
    """Trace, lower and verify a launch without running it (cached); returns a
    :class:`Warmed` kernel: the :class:`compiler.triton.KernelProgram` (its attributes
    read through), launchable as Triton's compiled kernels are,
    ``warmed[grid](*runtime_args)``. Tensors may be npu, CPU or meta."""
    return Warmed(jit_fn, _compile(jit_fn, args, kwargs, grid), kwargs)


def _compile(jit_fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any) -> Any:
    from compiler.triton import compile_launch

    program = compile_launch(jit_fn, args, kwargs, grid, runtime.get_config(),
                             data=_data(jit_fn, args, kwargs))
    if program.note and id(program) not in _noted:
        _noted.add(id(program))
        warnings.warn(program.note, stacklevel=4)
    return program


class Warmed:
    """What ``kernel.warmup(...)`` returns on the npu: the lowered program (its
    attributes read through) and, like Triton's ``CompiledKernel``, a kernel launchable
    as ``warmed[grid](*args)`` with every argument in order or only the
    non-constexpr ones (the constexprs are then the warmup's). Occupancy queries
    (``n_regs``, ``metadata.shared``) say one program per core at a time: with the
    driver's ``max_num_regs`` and ``max_shared_mem``, tutorial-style sizing launches
    one program per core."""

    def __init__(self, jit_fn: Any, program: Any, kwargs: dict[str, Any]) -> None:
        from types import SimpleNamespace

        from torch_bridge.triton_driver import REGISTERS

        self.jit_fn = jit_fn
        self.program = program
        self.kernel = program
        params = getattr(jit_fn, "params", ())
        self.names = [p.name for p in params]
        self.runtime_names = [p.name for p in params if not p.is_constexpr]
        constexprs = {p.name for p in params if p.is_constexpr}
        self.constants = {k: v for k, v in kwargs.items() if k in constexprs}
        self.n_regs = REGISTERS // max(1, int(kwargs.get("num_warps", 4)))
        self.n_spills = 0
        self.metadata = SimpleNamespace(
            shared=runtime.get_config().core.scratchpad.size_bytes,
            num_warps=int(kwargs.get("num_warps", 4)),
            num_stages=int(kwargs.get("num_stages", 1)), name=program.name)

    def _init_handles(self) -> None:
        """Nothing to load: the program is already lowered."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["kernel"], name)

    def __getitem__(self, grid: Any) -> Any:
        def runner(*args: Any, stream: Any = None) -> None:
            names = self.names if len(args) == len(self.names) else self.runtime_names
            named = dict(zip(names, args))
            launch(self.jit_fn, grid, (), {**self.constants, **named})
        return runner


def launch(jit_fn: Any, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Run ``jit_fn[grid](*args, **kwargs)`` on the simulator; written tensors get the
    numbers the schedule computed."""
    from compiler.torch_types import to_numpy, to_torch

    kernel = _compile(jit_fn, args, kwargs, grid)
    tensors = _named_tensors(jit_fn, args, kwargs)
    arrays = {name: to_numpy(storage.cpu_view(tensors[name])) for name in kernel.arguments}
    outputs, result = kernel.run(arrays, verify=id(kernel) not in _verified)
    _verified.add(id(kernel))
    for name in kernel.written:
        target = tensors[name]
        dtype = kernel.program.tensor(name).dtype
        storage.cpu_view(target).copy_(to_torch(outputs[name], dtype).reshape(target.shape))
    runtime.record_launch(kernel.name, 1)
    runtime.record_device(kernel.name, result.total_cycles, result.dram_bytes,
                          flops=result.flops, note=kernel.note, result=result)


@contextmanager
def interpreted_on_cpu() -> Iterator[None]:
    """Inside, launches on CPU tensors run on Triton's interpreter (no GPU needed): the
    CPU reference that a model's simulated numbers are checked against."""
    global _cpu_interpreted
    install_when_imported()
    saved, _cpu_interpreted = _cpu_interpreted, True
    try:
        yield
    finally:
        _cpu_interpreted = saved


def _interpret(jit_fn: Any, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    from compiler.triton.interpret import interpret

    interpret(jit_fn, grid, args, kwargs)


def install() -> None:
    """Route npu launches to the simulator (idempotent; needs Triton imported)."""
    global _installed
    if _installed:
        return
    from triton.runtime.jit import JITFunction

    original = JITFunction.run

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        values = (*args, *kwargs.values())
        if not any(_is_npu(v) for v in values):
            if _cpu_interpreted and not warmup:
                return _interpret(self, grid, args, kwargs)
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        if warmup:
            return globals()["warmup"](self, *args, grid=grid, **kwargs)
        return launch(self, grid, args, kwargs)

    JITFunction.run = run
    from torch_bridge import triton_driver

    triton_driver.install()
    # torch.compile asks Triton's GPU driver which tensors a kernel mutates; with no
    # driver it logs a traceback and assumes all of them, which is what we do too.
    logging.getLogger("torch._dynamo").addFilter(_NoDriverNoise())
    _installed = True


class _NoDriverNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "identify_accessed_tensors" not in record.getMessage()


class _AfterTritonImport(importlib.abc.MetaPathFinder):
    """Installs the launcher right after ``import triton`` completes."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "triton":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("triton")
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_install(module: Any) -> None:
            exec_module(module)
            try:
                if module.__version__ == _pin():
                    install()
            except Exception:  # noqa: BLE001 - never break `import triton`
                pass
        loader.exec_module = exec_and_install  # type: ignore[method-assign]
        return spec


def _pin() -> str:
    from compiler.triton.interpret import PIN

    return PIN


def install_when_imported() -> None:
    """Install now if Triton is loaded, else as soon as it is (import stays lazy)."""
    module = sys.modules.get("triton")
    if module is not None:
        if getattr(module, "__version__", "") == _pin():
            install()
        return
    if not any(isinstance(f, _AfterTritonImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTritonImport())
