"""Eager ops that run as another compiled op after their arguments are adapted:
``native_batch_norm`` (eval: the running-statistics op; training: the batch-statistics
op with the running buffers updated in place) and its variants, ``arange`` into an npu
tensor (a fill), ``torch.equal`` (a compare and an all-reduce read back); and compiled
ops whose arguments are rewritten first (:data:`ARGUMENTS`: ``cat`` without its empty
operands)."""

from __future__ import annotations

from typing import Any

import torch

from torch_bridge import runtime, storage

aten = torch.ops.aten
OpOverload = torch._ops.OpOverload


def _kernel(op: OpOverload) -> Any:
    """The npu kernel :mod:`torch_bridge.eager` installed for ``op``."""
    from torch_bridge.eager import _installed_kernel

    return _installed_kernel(op)


def _eval_batch_norm(x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any,
                     training: bool, momentum: float, eps: float) -> Any:
    """``native_batch_norm``: in eval mode (what ``nn.BatchNorm2d.eval()`` calls) the
    running-statistics op the compiler lowers; in training mode the batch-statistics
    op, its new running statistics written back into the buffers."""
    if training:
        return _train_batch_norm(x, weight, bias, running_mean, running_var, momentum, eps)
    if running_mean is None or running_var is None:
        return NotImplemented
    out = _kernel(aten._native_batch_norm_legit_no_training.default)(
        x, weight, bias, running_mean, running_var, momentum, eps)
    if isinstance(out, tuple):  # ran on the host: all three results
        return out
    empty = torch.empty(0, dtype=x.dtype, device=x.device)  # no saved statistics in eval
    return out, empty, empty.clone()


def _train_batch_norm(x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any,
                      momentum: float, eps: float) -> Any:
    """Training batch norm: (output, saved mean, saved 1/std); the running buffers, when
    given, take the compiled program's updated statistics in place."""
    if running_mean is None or running_var is None:
        return _kernel(aten._native_batch_norm_legit.no_stats)(
            x, weight, bias, True, momentum, eps)
    out, mean, rstd, new_mean, new_var = _kernel(
        aten._native_batch_norm_legit_functional.default)(
        x, weight, bias, running_mean, running_var, True, momentum, eps)
    storage.cpu_view(running_mean).copy_(storage.cpu_view(new_mean))
    storage.cpu_view(running_var).copy_(storage.cpu_view(new_var))
    return out, mean, rstd


def _legit_batch_norm(x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any,
                      training: bool, momentum: float, eps: float) -> Any:
    """``_native_batch_norm_legit``: as ``native_batch_norm``."""
    return _eval_batch_norm(x, weight, bias, running_mean, running_var, training, momentum,
                            eps)


def _no_stats_batch_norm(x: Any, weight: Any, bias: Any, training: bool, momentum: float,
                         eps: float) -> Any:
    """``_native_batch_norm_legit.no_stats`` (instance norm): batch statistics only."""
    if not training:
        return NotImplemented
    return _train_batch_norm(x, weight, bias, None, None, momentum, eps)


def _batch_norm_with_update(x: Any, weight: Any, bias: Any, running_mean: Any,
                            running_var: Any, momentum: float, eps: float) -> Any:
    """Training batch norm plus its (empty) cuDNN reserve buffer."""
    out, mean, rstd = _train_batch_norm(x, weight, bias, running_mean, running_var,
                                        momentum, eps)
    return out, mean, rstd, torch.empty(0, dtype=torch.uint8, device=x.device)


def _arange_fill(start: Any, end: Any, step: Any = 1, *, out: torch.Tensor) -> Any:
    """``torch.arange(..., device="npu")``: a fill on the device, timed like a memset
    (the values are written at DRAM bandwidth)."""
    values = torch.arange(start, end, step, dtype=out.dtype)
    if out.shape != values.shape:
        out.resize_(values.shape)  # torch.arange hands in an empty tensor
    storage.cpu_view(out).copy_(values)
    runtime.record_device_memory_op("aten.arange", 0, values.numel() * values.element_size())
    return out


def _equal(x: torch.Tensor, y: torch.Tensor) -> bool:
    """``torch.equal``: same shape, then a compare and an all-reduce on the device (the
    answer read back as a Python bool)."""
    if x.shape != y.shape:
        return False
    same = _kernel(aten.eq.Tensor)(x, y)
    return bool(_kernel(aten.all.default)(same).item())


ADAPTED: dict[OpOverload, Any] = {
    aten.native_batch_norm.default: _eval_batch_norm,
    aten._native_batch_norm_legit.default: _legit_batch_norm,
    aten._native_batch_norm_legit.no_stats: _no_stats_batch_norm,
    aten._batch_norm_with_update.default: _batch_norm_with_update,
    aten.arange.start_out: _arange_fill,
    aten.equal.default: _equal,
}
"""Ops compiled as another op after adapting their arguments."""


Call = tuple[tuple[Any, ...], dict[str, Any]]


def _cat_without_empty(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
    """``cat``'s zero-element operands add nothing (a KV cache before its first token,
    Phi-3's rotary pass-through half when the rotary covers every dim): they are dropped,
    so the call compiles instead of running on the host. torch's checks still hold: the
    call is first shaped on meta tensors (a mismatched empty operand raises as on CPU),
    and operands are kept when dropping them would change the result's dtype. All empty:
    kept, an empty result that costs nothing."""
    tensors = args[0]
    kept = [t for t in tensors if t.numel()]
    if len(kept) == len(tensors) or not kept:
        return args, kwargs
    meta = aten.cat.default([torch.empty(t.shape, dtype=t.dtype, device="meta")
                             for t in tensors], *args[1:], **kwargs)
    if _promoted([t.dtype for t in kept]) != meta.dtype:
        return args, kwargs
    return (kept, *args[1:]), kwargs


def _promoted(dtypes: list[torch.dtype]) -> torch.dtype:
    result = dtypes[0]
    for dtype in dtypes[1:]:
        result = torch.promote_types(result, dtype)
    return result


ARGUMENTS: dict[OpOverload, Any] = {
    aten.cat.default: _cat_without_empty,
}
"""Compiled ops whose arguments are rewritten before the call is compiled:
``(args, kwargs) -> (args, kwargs)`` with the same result (their ``out=`` variants too)."""


__all__ = ["ADAPTED", "ARGUMENTS"]
