"""Running an aten op on the host: CPU views in, npu tensors out, timed as host work.

Any op without an npu kernel ends up here (through the global PrivateUse1 fallback or
an explicit entry whose kernel declined). The op runs on CPU views of the same bytes;
results that alias an input become npu views of that input's storage, fresh results
become npu tensors without a copy, and in-place / ``out=`` results are handed back as
the caller's own tensors (the dispatcher requires the same objects). Each call is
recorded on the device timeline as ``"host"`` work: inputs up the host link, host
compute, outputs back down.

Per-op facts taken from the schema (which returns are written arguments) are computed
once per op and cached: building them dominates a naive fallback's cost.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from torch_bridge import runtime, storage

_NPU = "npu"


@dataclass(frozen=True)
class OpInfo:
    """What the fallback needs to know about one op overload, from its schema."""

    name: str
    written_returns: tuple[tuple[int, int | str], ...]
    """(return index, argument position or kwarg name) for returns that are a written
    argument (in-place ``self``, ``out=``)."""
    written_args: tuple[int | str, ...]
    """Arguments the op writes to (position, or name if keyword-only)."""
    flops: Callable[[tuple[Any, ...], Any], float] | None
    """Host FLOP estimate from (cpu args, cpu result); ``None`` means one per element out."""


_INFO: dict[Any, OpInfo] = {}


def op_info(op: torch._ops.OpOverload) -> OpInfo:
    """The cached :class:`OpInfo` of ``op``."""
    info = _INFO.get(op)
    if info is None:
        info = _INFO[op] = _build_info(op)
    return info


def _build_info(op: torch._ops.OpOverload) -> OpInfo:
    schema = op._schema
    arg_keys: list[tuple[int | str, Any]] = []
    for position, arg in enumerate(schema.arguments):
        key: int | str = arg.name if arg.kwarg_only else position
        arg_keys.append((key, arg.alias_info))
    written_args = tuple(key for key, alias in arg_keys if alias is not None and alias.is_write)
    written_returns: list[tuple[int, int | str]] = []
    for index, ret in enumerate(schema.returns):
        alias = ret.alias_info
        if alias is None or not alias.is_write:
            continue
        for key, arg_alias in arg_keys:
            if arg_alias is not None and arg_alias.before_set == alias.before_set:
                written_returns.append((index, key))
                break
    name = f"{op.namespace}.{op._opname}" + (
        f".{op._overloadname}" if op._overloadname != "default" else "")
    return OpInfo(name, tuple(written_returns), written_args, _FLOPS.get(op._opname))


def _mm_flops(args: tuple[Any, ...], out: Any) -> float:
    a = args[0] if args[0].dim() >= 2 else args[1]
    return 2.0 * out.numel() * a.shape[-1]


def _addmm_flops(args: tuple[Any, ...], out: Any) -> float:
    return 2.0 * out.numel() * args[1].shape[-1]


def _conv_flops(args: tuple[Any, ...], out: Any) -> float:
    weight = args[1]
    per_output = weight[0].numel() if weight.dim() else 1
    return 2.0 * out.numel() * per_output


def _conv_backward_flops(args: tuple[Any, ...], out: Any) -> float:
    grad_output, weight = args[0], args[2]
    per_output = weight[0].numel() if weight.dim() else 1
    return 4.0 * grad_output.numel() * per_output  # grad input + grad weight


# Ops whose host cost is not about one FLOP per output element.
_FLOPS: dict[str, Callable[[tuple[Any, ...], Any], float]] = {
    "mm": _mm_flops, "bmm": _mm_flops, "matmul": _mm_flops,
    "addmm": _addmm_flops, "baddbmm": _addmm_flops,
    "convolution": _conv_flops, "convolution_overrideable": _conv_flops,
    "convolution_backward_overrideable": _conv_backward_flops,
}


class _Call:
    """Bookkeeping of one host call: which CPU views stand for which npu tensors."""

    __slots__ = ("bases", "bytes_in")

    def __init__(self) -> None:
        self.bases: dict[int, torch.Tensor] = {}  # cpu data_ptr of storage -> npu tensor
        self.bytes_in = 0

    def to_host(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if value.is_cpu or value.is_meta:  # (`.device.type` costs ~1 us)
                return value
            view = storage.cpu_view(value)
            self.bases[value.untyped_storage().data_ptr()] = value
            self.bytes_in += value.nbytes
            return view
        if isinstance(value, (list, tuple)) and value and any(
                isinstance(v, torch.Tensor) for v in value):
            return type(value)(self.to_host(v) for v in value)
        if isinstance(value, torch.device) and value.type == _NPU:
            return torch.device("cpu")
        return value

    def to_device(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            base = self.bases.get(value.untyped_storage().data_ptr())
            if base is not None:
                return storage.alias_like(base, value)
            return storage.wrap_cpu(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.to_device(v) for v in value)
        return value


def _numel_out(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, (list, tuple)):
        return sum(_numel_out(v) for v in value)
    return 1


def _nbytes_out(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.nbytes
    if isinstance(value, (list, tuple)):
        return sum(_nbytes_out(v) for v in value)
    return 8 if value is not None else 0


class HostFallbackWarning(UserWarning):
    """An op ran on the host (CPU) instead of the npu: warned once per op and reason,
    timed as host work in ``torch_bridge.profile()``. Filter it with
    ``warnings.filterwarnings("ignore", category=HostFallbackWarning)``."""


class CompileFallbackWarning(HostFallbackWarning):
    """An op that has an npu kernel ran on the host instead, for a reason given in the
    message and the event's ``note`` (the compiler failed, a dtype the device lacks, a
    result that does not fit ``out=``); a kind of :class:`HostFallbackWarning`, so one
    filter silences both."""


INHERENTLY_HOST = frozenset({
    "aten._local_scalar_dense", "aten.normal_", "aten.uniform_", "aten.random_",
    "aten.random_.from", "aten.random_.to", "aten.bernoulli_.float", "aten.exponential_",
})
"""Ops that are host work by design, never warned: ``.item()`` reads a value back, and
random fills (``torch.randn(..., device="npu")``) draw from CPU's generator so the
numbers equal CPU's. They are still timed as host work."""
_warned_ops: set[tuple[str, str]] = set()
"""(op, note) pairs already warned about."""


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside torch and
    torch_bridge: the user's line that called the op, not the dispatcher's."""
    inside = (os.path.dirname(torch.__file__), os.path.dirname(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(inside):
        frame, level = frame.f_back, level + 1
    return level


def _warn_once(name: str, note: str) -> None:
    """Warn about host work once per op and reason: every host run passes through here,
    so no op does host work unannounced (but the :data:`INHERENTLY_HOST` ones)."""
    if name in INHERENTLY_HOST or (name, note) in _warned_ops:
        return
    _warned_ops.add((name, note))
    if note:
        warnings.warn(f"{name} runs on the host: {note}", CompileFallbackWarning,
                      stacklevel=user_stacklevel())
        return
    warnings.warn(f"{name} has no npu kernel and runs on the host (timed as host work; see "
                  f"torch_bridge.profile())", HostFallbackWarning, stacklevel=user_stacklevel())


def run_on_host(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any],
                host_op: Callable[..., Any] | None = None, note: str = "") -> Any:
    """Run ``op`` (or ``host_op``, a CPU stand-in with the same arguments) on CPU views
    and return npu results; records the call as host work on the device timeline, with
    ``note`` saying why it ran on the host when that is not simply "no npu kernel".
    Warns once per op and ``note``: a :class:`CompileFallbackWarning` with a note, else a
    :class:`HostFallbackWarning`."""
    info = op_info(op)
    _warn_once(info.name, note)
    call = _Call()
    cpu_args = tuple(call.to_host(a) for a in args)
    cpu_kwargs = {k: call.to_host(v) for k, v in kwargs.items()} if kwargs else kwargs
    before = _geometry(info, cpu_args, cpu_kwargs) if info.written_args else None
    try:
        out = (host_op or op)(*cpu_args, **cpu_kwargs)
    except RuntimeError as exc:
        if before is None or "not resizable" not in str(exc):
            raise
        # An out= tensor of the wrong shape: let the CPU op fill fresh host tensors,
        # then _resync_written resizes the npu outputs and copies the results in.
        cpu_kwargs = {k: (torch.empty(0, dtype=v.dtype) if k in info.written_args
                          and isinstance(v, torch.Tensor) else v)
                      for k, v in cpu_kwargs.items()}
        out = (host_op or op)(*cpu_args, **cpu_kwargs)
    if before is not None:
        _resync_written(info, args, kwargs, cpu_args, cpu_kwargs, before)
    flops = info.flops(cpu_args, out) if info.flops is not None else _numel_out(out)
    result = _results(info, out, call, args, kwargs)
    runtime.record_host_op(info.name, flops, call.bytes_in, _nbytes_out(out), note)
    return result


def _results(info: OpInfo, out: Any, call: _Call, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
    if not info.written_returns:
        return call.to_device(out)
    if isinstance(out, torch.Tensor):
        return _arg(args, kwargs, info.written_returns[0][1])
    results = list(out)
    written = dict(info.written_returns)
    for index, value in enumerate(results):
        key = written.get(index)
        results[index] = _arg(args, kwargs, key) if key is not None else call.to_device(value)
    return tuple(results)


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], key: int | str) -> Any:
    if isinstance(key, int) and key < len(args):
        return args[key]
    if isinstance(key, str):
        return kwargs[key]
    raise RuntimeError(f"written argument {key} not passed")  # schema default; not expected


def _lookup(args: tuple[Any, ...], kwargs: dict[str, Any], key: int | str) -> Any:
    if isinstance(key, int):
        return args[key] if key < len(args) else None
    return kwargs.get(key)


def _geometry(info: OpInfo, cpu_args: tuple[Any, ...],
              cpu_kwargs: dict[str, Any]) -> list[tuple[int, torch.Size] | None]:
    out = []
    for key in info.written_args:
        value = _lookup(cpu_args, cpu_kwargs, key)
        out.append((value.data_ptr(), value.shape) if isinstance(value, torch.Tensor) else None)
    return out


def _resync_written(info: OpInfo, args: tuple[Any, ...], kwargs: dict[str, Any],
                    cpu_args: tuple[Any, ...], cpu_kwargs: dict[str, Any],
                    before: list[tuple[int, torch.Size] | None]) -> None:
    """If the CPU op resized a written ``out=`` view (so it now owns new CPU bytes),
    resize the npu tensor to match and copy the result into it."""
    for key, geometry in zip(info.written_args, before):
        cpu = _lookup(cpu_args, cpu_kwargs, key)
        if geometry is None or not isinstance(cpu, torch.Tensor):
            continue
        if (cpu.data_ptr(), cpu.shape) == geometry:
            continue
        npu = _lookup(args, kwargs, key)
        if npu is None or npu.device.type != _NPU:
            continue
        from torch_bridge.kernels import resize_npu

        resize_npu(npu, cpu.shape)
        storage.cpu_view(npu).copy_(cpu)


REASON_CHARS = 240
"""How long an exception's one-line summary in a fallback warning may be."""


def reason(exc: BaseException) -> str:
    """``exc`` in one line for a fallback's warning and note: its type and first line,
    and when that line only announces what follows (``VerifyError``'s ``program 'g' is
    invalid (1 problem):``) the first item after it; cut at :data:`REASON_CHARS`."""
    lines = [line.strip().removeprefix("- ") for line in str(exc).strip().splitlines()]
    lines = [line for line in lines if line]
    text = lines[0] if lines else ""
    if text.endswith(":") and len(lines) > 1:
        text = f"{text} {lines[1]}"
    text = f"{type(exc).__name__}: {text}".rstrip(": ")
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."


__all__ = ["REASON_CHARS", "CompileFallbackWarning", "HostFallbackWarning", "OpInfo", "op_info",
           "reason", "run_on_host"]
