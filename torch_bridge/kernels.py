"""The npu kernel table and the bridge's own kernels.

Dispatch for an aten op on npu tensors, in order:

1. the **kernel table** filled by :func:`register_npu_kernel` (a kernel may return
   ``NotImplemented`` to decline a call); ops the compiler lowers have a *default*
   kernel there (:mod:`torch_bridge.eager`), which a user kernel replaces and
   :func:`unregister_npu_kernel` restores,
2. the bridge's **builtin** kernels in this module (factories, copies, views, ``set_``,
   ``resize_``, memsets, convolution),
3. the **host fallback** (:func:`torch_bridge.fallback.run_on_host`).

Every op in (1) or (2) gets its own PrivateUse1 entry in the dispatcher so that it wins
over composite decompositions (``conv2d`` would otherwise never reach the device, and
``x + y`` would arrive as ``empty_strided`` + ``add.out``); every other op reaches the
global PrivateUse1 fallback, which goes through the same three steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from torch._C._dynamo.eval_frame import set_eval_frame

from torch_bridge import runtime, storage
from torch_bridge.fallback import run_on_host
from torch_bridge.same_device import check_same_device

aten = torch.ops.aten
Kernel = Callable[..., Any]
F = TypeVar("F", bound=Kernel)

_TABLE: dict[torch._ops.OpOverload, Kernel] = {}
_DEFAULT: dict[torch._ops.OpOverload, Kernel] = {}
_BUILTIN: dict[torch._ops.OpOverload, Kernel] = {}
_ENTRIES: set[torch._ops.OpOverload] = set()
_library: torch.library.Library | None = None


def register_npu_kernel(op: torch._ops.OpOverload) -> Callable[[F], F]:
    """Decorator: run ``fn`` for ``op`` on npu tensors, before the builtin kernels and
    the host fallback.

    ``fn`` receives the op's arguments exactly as the dispatcher passes them (npu
    tensors, keyword-only arguments as keywords) and returns what the op returns: new
    npu tensors, or for in-place / ``out=`` ops the written argument objects
    themselves. Return ``NotImplemented`` to let the builtin kernel or the host
    fallback handle this call. The kernel records its own device time
    (:func:`torch_bridge.runtime.record_device`). Registering again replaces the kernel.

    >>> @register_npu_kernel(torch.ops.aten.mm.default)
    ... def mm(a, b): ...
    """
    if not isinstance(op, torch._ops.OpOverload):
        raise TypeError(f"register_npu_kernel expects an op overload such as "
                        f"torch.ops.aten.mm.default, got {op!r}")

    def decorate(fn: F) -> F:
        _TABLE[op] = fn
        _ensure_entry(op)
        return fn

    return decorate


def unregister_npu_kernel(op: torch._ops.OpOverload) -> None:
    """Remove a user kernel for ``op``: its calls go back to the default kernel (the
    compiler) if there is one, else to the builtin kernel / host."""
    default = _DEFAULT.get(op)
    if default is None:
        _TABLE.pop(op, None)
    else:
        _TABLE[op] = default


def set_default_kernel(op: torch._ops.OpOverload, fn: Kernel | None) -> None:
    """Make ``fn`` the kernel ``op`` runs when no user kernel is registered (``None``
    removes it). Replaces a user kernel too: call this before registering your own."""
    if fn is None:
        if _TABLE.get(op) is _DEFAULT.pop(op, None):
            _TABLE.pop(op, None)
        return
    _DEFAULT[op] = fn
    _TABLE[op] = fn
    _ensure_entry(op)


def registered_kernels() -> dict[torch._ops.OpOverload, Kernel]:
    """A copy of the kernel table (user kernels and the defaults they did not replace)."""
    return dict(_TABLE)


def _builtin(*ops: torch._ops.OpOverload) -> Callable[[F], F]:
    def decorate(fn: F) -> F:
        for op in ops:
            _BUILTIN[op] = fn
        return fn

    return decorate


def dispatch(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``op`` on the device: kernel table, then builtin kernel, then host; its
    operands must be on the device (:func:`torch_bridge.same_device.check_same_device`)."""
    check_same_device(op, args, kwargs)
    fn = _TABLE.get(op)
    if fn is not None:
        out = fn(*args, **kwargs)
        if out is not NotImplemented:
            return out
    fn = _BUILTIN.get(op)
    if fn is not None:
        return fn(*args, **kwargs)
    return run_on_host(op, args, kwargs)


def _entry_for(op: torch._ops.OpOverload) -> Kernel:
    def entry(*args: Any, **kwargs: Any) -> Any:
        prior = set_eval_frame(None)  # see _global_fallback
        try:
            return dispatch(op, args, kwargs)
        finally:
            set_eval_frame(prior)

    return entry


def _global_fallback(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    # Kernels do real work: dynamo must not trace into them, which it would when an op
    # runs from a frame dynamo evaluates (autograd after a graph break). 0.1 us.
    prior = set_eval_frame(None)
    try:
        return dispatch(op, args, kwargs)
    finally:
        set_eval_frame(prior)


def _ensure_entry(op: torch._ops.OpOverload) -> None:
    if _library is None or op in _ENTRIES:
        return  # install() registers every table op
    _library.impl(op, _entry_for(op), "PrivateUse1")
    _ENTRIES.add(op)


# Ops that run on the host but get a direct entry: without one they decompose into
# empty_strided + the out= variant, two trips through Python instead of one.
HOST_HOT_OPS: tuple[torch._ops.OpOverload, ...] = (
    aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor,
    aten.add_.Tensor, aten.sub_.Tensor, aten.mul_.Tensor, aten.div_.Tensor,
    aten.mm.default, aten.addmm.default, aten.bmm.default,
    aten.threshold_backward.default, aten.sum.dim_IntList, aten.mean.dim,
    aten._softmax.default, aten._log_softmax.default, aten.gelu.default,
    aten.tanh.default, aten.exp.default, aten.neg.default,
)


def install(library: torch.library.Library, fallback_library: torch.library.Library) -> None:
    """Register entries and the global fallback for the PrivateUse1 key (once)."""
    global _library
    _library = library
    for op in (*_BUILTIN, *HOST_HOT_OPS, *_TABLE):
        _ensure_entry(op)
    fallback_library.fallback(_global_fallback, dispatch_key="PrivateUse1")


# -- factories ------------------------------------------------------------------------

def _contiguous_strides(size: Sequence[int]) -> list[int]:
    strides = [1] * len(size)
    for i in range(len(size) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(size[i + 1], 1)
    return strides


def _check_device(device: torch.device | None) -> None:
    if device is not None and device.index not in (None, 0):
        raise RuntimeError(f"npu has one device (npu:0); got {device}")


@_builtin(aten.empty.memory_format)
def empty(size: Sequence[int], *, dtype: torch.dtype | None = None, layout: Any = None,
          device: torch.device | None = None, pin_memory: bool | None = None,
          memory_format: torch.memory_format | None = None) -> torch.Tensor:
    _check_device(device)
    dtype = dtype or torch.get_default_dtype()
    if memory_format in (None, torch.contiguous_format, torch.preserve_format):
        stride = _contiguous_strides(size)
    else:
        stride = torch.empty(size, device="meta", memory_format=memory_format).stride()
    return storage.empty_strided(size, stride, dtype)


@_builtin(aten.empty_strided.default)
def empty_strided(size: Sequence[int], stride: Sequence[int], *,
                  dtype: torch.dtype | None = None, layout: Any = None,
                  device: torch.device | None = None,
                  pin_memory: bool | None = None) -> torch.Tensor:
    _check_device(device)
    return storage.empty_strided(size, stride, dtype or torch.get_default_dtype())


@_builtin(aten.fill_.Scalar)
def fill_(self: torch.Tensor, value: Any) -> torch.Tensor:
    storage.cpu_view(self).fill_(value)
    runtime.record_device_memory_op("aten.fill_", 0, storage.nbytes_of(self))
    return self


@_builtin(aten.zero_.default)
def zero_(self: torch.Tensor) -> torch.Tensor:
    storage.cpu_view(self).zero_()
    runtime.record_device_memory_op("aten.zero_", 0, storage.nbytes_of(self))
    return self


# -- copies ---------------------------------------------------------------------------

def copy_between(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``dst.copy_(src)`` where either side may be on npu; timed as a host-link transfer
    when crossing devices, as a DRAM copy when both are on npu."""
    dst_npu = not dst.is_cpu  # (`.device.type` costs ~1 us)
    src_npu = not src.is_cpu
    if (dst_npu and dst.device.type != "npu") or (src_npu and src.device.type != "npu"):
        raise RuntimeError(f"npu copies go to or from cpu; got {src.device} -> {dst.device}")
    if dst_npu and src_npu and dst.untyped_storage().data_ptr() \
            == src.untyped_storage().data_ptr():  # overlapping parts raise, as on CPU
        dst_view, src_view = storage.cpu_views_of_one_storage(dst, src)
        dst_view.copy_(src_view)
    else:
        (storage.cpu_view(dst) if dst_npu else dst).copy_(
            storage.cpu_view(src) if src_npu else src)
    nbytes = storage.nbytes_of(dst)
    if dst_npu and src_npu:
        runtime.record_device_memory_op("aten.copy_", storage.nbytes_of(src), nbytes)
    elif dst_npu:
        runtime.record_transfer("host_to_device", nbytes)
    else:
        runtime.record_transfer("device_to_host", storage.nbytes_of(src))
    return dst


@_builtin(aten.copy_.default)
def copy_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    return copy_between(self, src)


@_builtin(aten._copy_from.default)
def _copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    return copy_between(dst, self)


@_builtin(aten._copy_from_and_resize.default)
def _copy_from_and_resize(self: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if dst.shape != self.shape:
        if dst.device.type == "npu":
            resize_npu(dst, self.shape)
        else:
            dst.resize_(self.shape)
    return copy_between(dst, self)


# -- geometry: set_, views, resize_ ---------------------------------------------------

@_builtin(aten.set_.source_Storage_storage_offset)
def set_storage_offset(self: torch.Tensor, source: torch.UntypedStorage, storage_offset: int,
                       size: Sequence[int], stride: Sequence[int] = ()) -> torch.Tensor:
    if source.device.type != "npu":
        raise RuntimeError(f"set_: an npu tensor needs npu storage, got {source.device}")
    if not stride:
        stride = _contiguous_strides(size)
    return storage.set_geometry(self, source, storage_offset, size, stride)


@_builtin(aten.set_.source_Storage)
def set_storage(self: torch.Tensor, source: torch.UntypedStorage) -> torch.Tensor:
    numel = source.nbytes() // self.element_size()
    return set_storage_offset(self, source, 0, [numel], [1])


@_builtin(aten.set_.source_Tensor)
def set_tensor(self: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    return set_storage_offset(self, source.untyped_storage(), source.storage_offset(),
                              source.size(), source.stride())


@_builtin(aten.set_.default)
def set_empty(self: torch.Tensor) -> torch.Tensor:
    return storage.set_geometry(self, storage.allocate(0), 0, [0], [1])


def _view_kernel(op: torch._ops.OpOverload) -> Kernel:
    """A view op computed on the CPU view (metadata only, no data touched) and
    re-expressed on the npu storage. Views are free: nothing is recorded."""

    def kernel(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return storage.alias_like(self, op(storage.cpu_view(self), *args, **kwargs))

    return kernel


for _op in (aten.view.default, aten.as_strided.default, aten._reshape_alias.default,
            aten.unfold.default):
    _BUILTIN[_op] = _view_kernel(_op)


def resize_npu(self: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """Make ``self`` contiguous with ``size``, growing its storage (keeping its bytes) if
    needed, as ``Tensor.resize_`` does."""
    numel = 1
    for n in size:
        numel *= n
    needed = (self.storage_offset() + numel) * self.element_size()
    old = self.untyped_storage()
    target = old
    if needed > old.nbytes():
        target = storage.allocate(needed)
        if old.nbytes():
            storage.cpu_storage(target)[: old.nbytes()].copy_(storage.cpu_storage(old))
    return storage.set_geometry(self, target, self.storage_offset(), size,
                                _contiguous_strides(size))


@_builtin(aten.resize_.default)
def resize_(self: torch.Tensor, size: Sequence[int],
            memory_format: torch.memory_format | None = None) -> torch.Tensor:
    resize_npu(self, size)
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        stride = torch.empty(size, device="meta", memory_format=memory_format).stride()
        storage.set_geometry(self, self.untyped_storage(), self.storage_offset(), size, stride)
    return self


# -- convolution (never reaches a fallback: composite conv2d needs these) -------------

@_builtin(aten.convolution_overrideable.default)
def convolution_overrideable(*args: Any) -> torch.Tensor:
    return run_on_host(aten.convolution_overrideable.default, args, {},
                       host_op=aten.convolution.default)


def _convolution_backward_on_host(grad_output: torch.Tensor, input: torch.Tensor,
                                  weight: torch.Tensor, stride: Sequence[int],
                                  padding: Sequence[int], dilation: Sequence[int],
                                  transposed: bool, output_padding: Sequence[int],
                                  groups: int, output_mask: Sequence[bool]) -> Any:
    bias_size = [weight.shape[1] * groups if transposed else weight.shape[0]]
    return aten.convolution_backward.default(
        grad_output, input, weight, bias_size, stride, padding, dilation, transposed,
        output_padding, groups, output_mask)


@_builtin(aten.convolution_backward_overrideable.default)
def convolution_backward_overrideable(*args: Any) -> Any:
    return run_on_host(aten.convolution_backward_overrideable.default, args, {},
                       host_op=_convolution_backward_on_host)


__all__ = [
    "HOST_HOT_OPS", "copy_between", "dispatch", "install", "register_npu_kernel",
    "registered_kernels", "resize_npu", "set_default_kernel", "unregister_npu_kernel",
]
