"""Eager npu ops through the compiler: one compiled, simulated program per op call.

The ops in :data:`COMPILED_OPS` get a default kernel (:func:`torch_bridge.kernels.
set_default_kernel`) that compiles the call with ``compiler.compile_op``, runs the
schedule on the simulator in functional mode and hands back the numbers it computed as
npu tensors. The run's cycles go on the device timeline as ``"device"`` work and its
``SimResult`` goes to the timeline's listeners (the profiler).

Per call the cost is: a signature (shapes, dtypes, scalar arguments) looked up in this
module's cache of compiled programs, the first call's timing charged again, the numbers
computed (:mod:`torch_bridge.numerics`: by the op on CPU once the first call's simulated
outputs agreed with it, else by replaying the program), and wrapping the outputs. Every
call runs the op on CPU as well, so a call torch refuses (an index out of range, an
integer division by zero) raises torch's own exception before anything is written;
only a CPU kernel torch lacks (``not implemented for 'Half'``) leaves the program's
numbers unchecked (:func:`torch_bridge.numerics.cpu_lacks_kernel`). Python
numbers in tensor positions (``x * 2.5``) are fed as 0-dim tensors, so a new scalar
value does not compile a new program.

If an op cannot be compiled for some arguments (a dtype the device lacks such as float64,
the compiler raises, or it would run the op as a host node) or its run fails, the call
runs on the host through :func:`torch_bridge.fallback.run_on_host`: timed as host work,
with the reason in the event's ``note``, listed by the profiler, kept in
:func:`compile_failures` and warned once per op and reason
(:class:`CompileFallbackWarning`). A call with a zero-element operand whose results are
all empty computes nothing: its empty results are made on the device at no cost (torch's
shape rules give their shapes). Some ops drop zero-element operands first
(:data:`torch_bridge.eager_adapted.ARGUMENTS`: ``cat`` of an empty KV cache).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from torch_bridge import kernels, numerics, runtime, storage
from torch_bridge.eager_adapted import ADAPTED, ARGUMENTS
from torch_bridge.eager_ops import COMPILE_AS, COMPILED_OPS, IN_PLACE, OUT_OF_PLACE, out_names
from torch_bridge.fallback import CompileFallbackWarning, op_info, reason, run_on_host
from torch_bridge.numerics import flat_tensors

if TYPE_CHECKING:
    from archsim.result import SimResult
    from compiler.compile import CompiledProgram

aten = torch.ops.aten
OpOverload = torch._ops.OpOverload


@dataclass(frozen=True)
class CompileFailure:
    """Why one op signature runs on the host instead of the device."""

    op: str
    signature: str
    reason: str


@dataclass
class _Entry:
    """A cached compiled program, and its timing once simulated (and verified)."""

    program: CompiledProgram
    timing: SimResult | None = None
    """The first run's SimResult: later calls replay it with new data (archsim.replay)."""
    cpu_numerics: bool = False
    """The first run's outputs agreed with the op on CPU: later calls may take their
    numbers from there (:mod:`torch_bridge.numerics`)."""
    copy_bytes: int = 0
    """A program with no commands hands back its inputs (``cat`` of one operand): the
    call's fresh results are a copy on the device of this many bytes."""


ZERO_ELEMENTS = object()
"""Cache entry of a signature with a zero-element operand (see ``_zero_elements``)."""


class _Cache:
    """Compiled programs per (op, signature) for one config; emptied when it changes."""

    def __init__(self) -> None:
        self.config: object = None
        self.entries: dict[Hashable, _Entry | CompileFailure] = {}

    def for_config(self, config: object) -> dict[Hashable, _Entry | CompileFailure]:
        if config is not self.config:
            self.config, self.entries = config, {}
        return self.entries


_cache = _Cache()
_failures: dict[tuple[str, str], CompileFailure] = {}


def compile_failures() -> tuple[CompileFailure, ...]:
    """Every (op, signature) that fell back to the host since start, once each."""
    return tuple(_failures.values())


def clear_cache() -> None:
    """Forget compiled programs and cached failures (they are recompiled on next use)."""
    _cache.entries = {}


def _tensor_positions(op: OpOverload) -> frozenset[int | str]:
    """Argument positions (or keyword names) the schema types as ``Tensor``."""
    positions: set[int | str] = set()
    for index, arg in enumerate(op._schema.arguments):
        if isinstance(arg.type, torch.TensorType):
            positions.add(arg.name if arg.kwarg_only else index)
    return frozenset(positions)


def _scalar_tensor(value: bool | int | float) -> torch.Tensor:
    """A Python number in a tensor position as the 0-dim tensor that promotes like it
    (floats at the default dtype: a wrapped number never widens a tensor's dtype)."""
    if isinstance(value, bool):
        return torch.tensor(value)
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int64)
    return torch.tensor(value, dtype=torch.get_default_dtype())


def _host_value(value: Any, tensor_position: bool) -> Any:
    if isinstance(value, torch.Tensor):
        return value if value.is_cpu else storage.cpu_view(value)
    if tensor_position and isinstance(value, (bool, int, float)):
        return _scalar_tensor(value)
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_host_value(v, False) for v in value)  # [None, None, index] too
    return value


def _key_of(value: Any) -> Hashable:
    if isinstance(value, torch.Tensor):
        return (value.shape, value.dtype)
    if isinstance(value, (list, tuple)):
        return tuple(_key_of(v) for v in value)
    return (type(value), value)


def _describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The call's signature as text: ``(float32[4, 8], 2.5, dim=-1)``."""
    def text(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
            return "[" + ", ".join(text(v) for v in value) + "]"
        return repr(value)

    parts = [text(a) for a in args] + [f"{k}={text(v)}" for k, v in kwargs.items()]
    return "(" + ", ".join(parts) + ")"


class CompiledOpKernel:
    """The default npu kernel of one op: compile (cached), simulate, return npu tensors."""

    __slots__ = ("op", "target", "name", "tensor_positions", "in_place", "writes_out",
                 "host_op", "adapt")

    def __init__(self, op: OpOverload) -> None:
        self.op = op
        self.in_place = op in IN_PLACE
        self.writes_out = op in OUT_OF_PLACE
        self.target = IN_PLACE.get(op) or COMPILE_AS.get(op) or OUT_OF_PLACE.get(op) or op
        """The op the compiler lowers."""
        self.host_op = COMPILE_AS.get(op)
        """The CPU op that runs a call on the host (``None``: ``op`` itself)."""
        self.name = op_info(op).name
        self.tensor_positions = _tensor_positions(op)
        self.adapt = ARGUMENTS.get(self.target)
        """Rewrites a call's arguments before it is compiled (``None``: as given)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.writes_out:
            return self._into_out(args, kwargs)
        if self.adapt is not None:
            args, kwargs = self.adapt(args, kwargs)
        positions = self.tensor_positions
        host_args = tuple(_host_value(a, i in positions) for i, a in enumerate(args))
        host_kwargs = {k: _host_value(v, k in positions) for k, v in kwargs.items()}
        key = (self.op, _key_of(host_args), _key_of(tuple(sorted(host_kwargs.items()))))
        entries = _cache.for_config(runtime.get_config())
        entry = entries.get(key)
        if entry is None:
            entry = entries[key] = self._compile(host_args, host_kwargs)
        if isinstance(entry, CompileFailure):
            return self._on_host(args, kwargs, entry)
        if entry is ZERO_ELEMENTS:
            return self._zero_elements(args, kwargs, entries, key)
        outputs = None
        if entry.cpu_numerics and numerics.mode() == "checked":
            outputs, result = numerics.cpu_results(self.target, host_args, host_kwargs), \
                entry.timing
        elif entry.timing is not None:  # the first call's check runs the op on CPU too
            numerics.cpu_results(self.target, host_args, host_kwargs)  # raises torch's error
        if outputs is None:
            tensors = flat_tensors((*host_args, *host_kwargs.values()))
            try:
                outputs, result = entry.program.run(*tensors, timing=entry.timing)
            except Exception as exc:  # noqa: BLE001 - reported: cached, warned, on the event
                failure = entries[key] = self._failure((host_args, host_kwargs),
                                                       f"simulation failed: {reason(exc)}")
                return self._on_host(args, kwargs, failure)
            if entry.timing is None:
                entry.cpu_numerics = numerics.check_first_call(
                    self.target, host_args, host_kwargs, outputs)
            entry.timing = result
        if entry.copy_bytes:
            runtime.record_device_memory_op(self.name, entry.copy_bytes, entry.copy_bytes)
        else:
            runtime.record_launch(self.name, len(entry.program.kernels))
            runtime.record_device(self.name, result.total_cycles, result.dram_bytes,
                                  flops=result.flops, result=result)
        if self.in_place:
            self_arg = args[0]
            storage.cpu_view(self_arg).copy_(outputs[0])
            return self_arg
        wrapped = tuple(storage.wrap_cpu(t) for t in outputs)
        return wrapped[0] if len(wrapped) == 1 else wrapped

    def _into_out(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        names = out_names(self.op)
        outs = [kwargs[n] for n in names]
        functional = {k: v for k, v in kwargs.items() if k not in names}
        result = _installed_kernel(self.target)(*args, **functional)
        results = (result,) if isinstance(result, torch.Tensor) else tuple(result)
        for got, out in zip(results, outs):
            if isinstance(got, torch.Tensor) and got.shape != out.shape \
                    and out.numel() == 0:  # torch hands in an empty out to be resized
                out.resize_(got.shape)
        if len(results) != len(outs) or not all(
                isinstance(got, torch.Tensor) and got.shape == out.shape
                and torch.can_cast(got.dtype, out.dtype) for got, out in zip(results, outs)):
            return run_on_host(self.op, args, kwargs, note="result does not fit out=")
        for got, out in zip(results, outs):
            storage.cpu_view(out).copy_(storage.cpu_view(got))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _compile(self, host_args: tuple[Any, ...],
                 host_kwargs: dict[str, Any]) -> _Entry | CompileFailure:
        import compiler
        from compiler.torch_types import TORCH_TO_IR

        call = (host_args, host_kwargs)
        for tensor in flat_tensors((*host_args, *host_kwargs.values())):
            if tensor.dtype not in TORCH_TO_IR:  # device limits, not compiler failures
                return self._failure(call, f"dtype {tensor.dtype} is not supported by the "
                                           f"device")
            if tensor.numel() == 0:
                return ZERO_ELEMENTS
        try:
            program = compiler.compile_op(self.target, host_args, host_kwargs,
                                          runtime.get_config())
        except Exception as exc:  # noqa: BLE001 - reported: cached, warned, on the event
            return self._failure(call, f"compile failed: {reason(exc)}")
        if program.fallbacks:
            return self._failure(call, f"no device lowering for these arguments "
                                       f"({', '.join(program.fallbacks)})")
        if self.in_place:
            spec, target = program.outputs[0], host_args[0]
            if tuple(spec.shape) != tuple(target.shape) or not torch.can_cast(
                    _out_dtype(spec.dtype), target.dtype):
                return self._failure(call, f"result {list(spec.shape)} {spec.dtype} cannot "
                                           f"be stored in place into {list(target.shape)} "
                                           f"{target.dtype}")
        if program.program.commands:
            return _Entry(program)
        return _Entry(program, copy_bytes=sum(
            math.prod(spec.shape) * _out_dtype(spec.dtype).itemsize for spec in program.outputs))

    def _failure(self, call: tuple[tuple[Any, ...], dict[str, Any]],
                 reason: str) -> CompileFailure:
        """Keep why this signature runs on the host (``run_on_host`` warns with it)."""
        failure = CompileFailure(self.name, _describe(*call), reason)
        _failures[(self.name, failure.signature)] = failure
        return failure

    def _zero_elements(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                       entries: dict[Hashable, Any], key: Hashable) -> Any:
        """A call with a zero-element operand: when every result is empty too there is
        nothing to compute, so the empty results are made (from torch's own shape rules
        on the CPU views) and the call costs no device time. When no input has data but
        a result does (``mm`` with K = 0 gives zeros, padding an empty tensor gives the
        fill), the results are fills written on the device at DRAM bandwidth; otherwise
        it runs on the host, timed."""
        cpu_args = tuple(_host_value(a, False) for a in args)
        cpu_kwargs = {k: _host_value(v, False) for k, v in kwargs.items()}
        out = (self.host_op or self.op)(*cpu_args, **cpu_kwargs)
        results = out if isinstance(out, (tuple, list)) else (out,)
        empty = all(isinstance(r, torch.Tensor) and r.numel() == 0 for r in results)
        filled = not empty and _all_empty_inputs(cpu_args, cpu_kwargs)
        if filled:  # no input data: the results are fills (padding of nothing, mm with K=0)
            nbytes = sum(r.numel() * r.element_size() for r in results
                         if isinstance(r, torch.Tensor))
            runtime.record_device_memory_op(self.name, 0, nbytes)
        elif not empty:
            failure = entries[key] = self._failure(
                (cpu_args, cpu_kwargs), "a zero-element operand with a non-empty result")
            return self._on_host(args, kwargs, failure)
        if not filled:
            runtime.record_device(self.name, 0, note="zero elements: nothing to compute")
        if self.in_place:
            return args[0]
        wrapped = tuple(storage.wrap_cpu(r) for r in results)
        return wrapped[0] if len(wrapped) == 1 else wrapped

    def _on_host(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                 failure: CompileFailure) -> Any:
        return run_on_host(self.op, args, kwargs, host_op=self.host_op, note=failure.reason)


def _all_empty_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Every tensor argument has zero elements: results depend on shapes and scalars
    only (a fill written at DRAM bandwidth)."""
    tensors = flat_tensors((*args, *kwargs.values()))
    return bool(tensors) and all(t.numel() == 0 for t in tensors)


def _out_dtype(name: str) -> torch.dtype:
    from compiler.ir.dtypes import DType
    from compiler.torch_types import torch_dtype

    return torch_dtype(DType(name))


_installed: dict[OpOverload, CompiledOpKernel] = {}


def _installed_kernel(op: OpOverload) -> CompiledOpKernel:
    kernel = _installed.get(op)
    if kernel is None:
        kernel = _installed[op] = CompiledOpKernel(op)
    return kernel


def install(ops: Iterable[OpOverload] = COMPILED_OPS) -> None:
    """Make the compiler the default kernel of ``ops`` (idempotent)."""
    for op in ops:
        if op not in _installed:
            _installed[op] = CompiledOpKernel(op)
        kernels.set_default_kernel(op, _installed[op])
    if ops is COMPILED_OPS:
        for op, kernel in ADAPTED.items():
            kernels.set_default_kernel(op, kernel)


def uninstall(ops: Iterable[OpOverload] = COMPILED_OPS) -> None:
    """Run ``ops`` on the host again (e.g. to compare host and device timing)."""
    for op in ops:
        kernels.set_default_kernel(op, None)


@contextmanager
def on_host(*ops: OpOverload) -> Iterator[None]:
    """Run ``ops`` (default: every compiled op) on the host inside the block."""
    chosen = ops or COMPILED_OPS
    uninstall(chosen)
    try:
        yield
    finally:
        install([op for op in chosen if op in _installed])


__all__ = [
    "COMPILED_OPS", "COMPILE_AS", "CompileFailure", "CompileFallbackWarning",
    "CompiledOpKernel", "IN_PLACE", "OUT_OF_PLACE", "clear_cache", "compile_failures",
    "install", "on_host", "uninstall",
]
