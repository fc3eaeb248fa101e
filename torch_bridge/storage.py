"""Device memory: npu storages backed by host byte buffers, and the allocator's accounting.

Every npu storage is a CPU byte buffer exposed to torch with
``torch._C._construct_storage_from_data_pointer``; the buffer is kept alive as an
attribute of the storage's Python object (torch preserves that object for as long as
the C++ storage lives), so npu tensors have real ``data_ptr()``s and views share bytes.

Kernels work on *CPU views*: CPU tensors over the same bytes with the same sizes,
strides and offset (:func:`cpu_view`). A CPU result can become an npu tensor without a
copy (:func:`wrap_cpu`): its storage becomes the buffer.

Allocations are counted against ``dram.capacity_bytes`` of the current config; going
over raises ``torch.OutOfMemoryError`` before anything is allocated, so tensors already
on the device are never lost.
"""

from __future__ import annotations

import atexit
import time
from collections.abc import Sequence

import torch

from torch_bridge import runtime

DEVICE = torch.device("npu", 0)
_CPU = torch.device("cpu")
_CPU_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset._handle  # skip a Python frame
_make_storage = torch._C._construct_storage_from_data_pointer
_create_empty = torch._C._acc.create_empty_tensor


class Allocator:
    """Counts device bytes in use and the peak since the last reset."""

    def __init__(self) -> None:
        self.in_use_bytes = 0
        self.peak_bytes = 0
        self._exit_wait_registered = False

    def reserve(self, nbytes: int) -> None:
        """Count ``nbytes`` as allocated, or raise ``torch.OutOfMemoryError``."""
        config = runtime.get_config()
        capacity = config.dram.capacity_bytes
        if self.in_use_bytes + nbytes > capacity:
            raise torch.OutOfMemoryError(
                f"npu out of memory: tried to allocate {nbytes} bytes with "
                f"{self.in_use_bytes} bytes in use of {capacity} bytes "
                f"(dram.capacity_bytes of preset {config.name!r}); "
                f"tensors already on the device are kept")
        self.in_use_bytes += nbytes
        if self.in_use_bytes > self.peak_bytes:
            self.peak_bytes = self.in_use_bytes
        if not self._exit_wait_registered:
            self._exit_wait_registered = True
            atexit.register(_wait_for_autograd_threads)

    def release(self, nbytes: int) -> None:
        self.in_use_bytes -= nbytes

    def reset_peak(self) -> None:
        self.peak_bytes = self.in_use_bytes


allocator = Allocator()


def _wait_for_autograd_threads() -> None:
    """The process can abort at exit right after ``backward()`` on npu tensors (the
    autograd device thread races interpreter shutdown); a short wait avoids it."""
    time.sleep(0.05)


class _Buffer:
    """Host bytes behind one npu storage; frees its accounting when the storage dies."""

    __slots__ = ("cpu", "nbytes", "__weakref__")

    def __init__(self, cpu: torch.Tensor, nbytes: int) -> None:
        self.cpu = cpu
        self.nbytes = nbytes

    def __del__(self) -> None:
        allocator.release(self.nbytes)


def _storage_over(cpu: torch.Tensor, nbytes: int) -> torch.UntypedStorage:
    """An npu storage over the first ``nbytes`` of ``cpu``'s storage (already reserved)."""
    buffer = _Buffer(cpu, nbytes)
    storage = _make_storage(cpu.untyped_storage().data_ptr(), DEVICE, nbytes)
    storage._npu_buffer = buffer  # keeps the bytes alive as long as the storage
    return storage


def allocate(nbytes: int) -> torch.UntypedStorage:
    """A new npu storage of ``nbytes`` uninitialised bytes."""
    allocator.reserve(nbytes)
    try:
        cpu = torch.empty(max(nbytes, 1), dtype=torch.uint8)
    except BaseException:
        allocator.release(nbytes)
        raise
    return _storage_over(cpu, nbytes)


def tensor_on(storage: torch.UntypedStorage, dtype: torch.dtype, size: Sequence[int],
              stride: Sequence[int], offset: int = 0) -> torch.Tensor:
    """An npu tensor viewing ``storage`` (offset in elements of ``dtype``)."""
    tensor = _create_empty([0], dtype)
    _set_storage.redispatch_boxed(_CPU_KEYSET, tensor, storage, offset, size, stride)
    return tensor


def set_geometry(tensor: torch.Tensor, storage: torch.UntypedStorage, offset: int,
                 size: Sequence[int], stride: Sequence[int]) -> torch.Tensor:
    """``tensor.set_(storage, offset, size, stride)`` without re-entering npu dispatch."""
    return _set_storage.redispatch_boxed(_CPU_KEYSET, tensor, storage, offset, size, stride)


def cpu_storage(storage: torch.UntypedStorage) -> torch.UntypedStorage:
    """A CPU storage over the same bytes (non-owning: valid while ``storage`` lives)."""
    return _make_storage(storage.data_ptr(), _CPU, storage.nbytes())


def cpu_view(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the same bytes as npu ``tensor``, same sizes/strides/offset.

    Valid only while ``tensor``'s storage lives: do not keep it beyond one kernel call.
    The view is cached on the tensor and reused while the tensor's address, sizes and
    strides are unchanged (they determine the view entirely; building one costs ~4 us).
    """
    key = (tensor.data_ptr(), tensor.size(), tensor.stride())
    cached = tensor.__dict__.get("_npu_cpu_view")
    if cached is not None and cached[0] == key:
        return cached[1]
    view = _view_over(cpu_storage(tensor.untyped_storage()), tensor)
    tensor.__dict__["_npu_cpu_view"] = (key, view)
    return view


def _view_over(cpu: torch.UntypedStorage, tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over ``cpu`` with npu ``tensor``'s sizes, strides and offset."""
    view = torch.empty(0, dtype=tensor.dtype).set_(cpu, tensor.storage_offset(),
                                                   tensor.size(), tensor.stride())
    if tensor.is_complex() and tensor.is_conj():  # torch's lazy bits live on the tensor,
        view = view.conj()                        # not in its bytes: carry them over
    if tensor.is_neg():
        view = view._neg_view()
    return view


def cpu_views_of_one_storage(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """CPU views of npu ``tensors`` that share one storage, built over one CPU storage
    object: torch's overlap checks then see that they share memory (``a[1:].copy_(a[:-1])``
    raises as on CPU). Views from :func:`cpu_view` each get their own storage object,
    which those checks take for separate memory."""
    shared = cpu_storage(tensors[0].untyped_storage())
    return tuple(_view_over(shared, t) for t in tensors)


def wrap_cpu(cpu: torch.Tensor) -> torch.Tensor:
    """An npu tensor that takes over ``cpu``'s bytes (no copy); ``cpu`` must not be used
    by anyone else afterwards. Counted against device memory. A result with torch's
    lazy conjugate or negative bit is materialized first: the bytes alone do not carry
    the bit (``fft.ifft``'s result is such a view)."""
    if cpu.is_conj() or cpu.is_neg():
        cpu = cpu.resolve_conj().resolve_neg()
    nbytes = cpu.untyped_storage().nbytes()
    allocator.reserve(nbytes)
    storage = _storage_over(cpu, nbytes)
    return tensor_on(storage, cpu.dtype, cpu.size(), cpu.stride(), cpu.storage_offset())


def alias_like(base: torch.Tensor, cpu: torch.Tensor) -> torch.Tensor:
    """An npu view of ``base``'s storage with the geometry of ``cpu``, a CPU view result."""
    if cpu.dtype != base.dtype:
        return tensor_on(base.untyped_storage(), cpu.dtype, cpu.size(), cpu.stride(),
                         cpu.storage_offset())
    # detach + as_strided_ stay in C++ (no npu kernel): ~3x cheaper than tensor_on.
    return base.detach().as_strided_(cpu.size(), cpu.stride(), cpu.storage_offset())


def empty_strided(size: Sequence[int], stride: Sequence[int],
                  dtype: torch.dtype) -> torch.Tensor:
    """A new npu tensor; storage sized for the given strides."""
    extent = 1
    for n, s in zip(size, stride):
        if n == 0:
            extent = 0
            break
        extent += (n - 1) * s
    storage = allocate(extent * dtype.itemsize)
    return tensor_on(storage, dtype, size, stride, 0)


def nbytes_of(tensor: torch.Tensor) -> int:
    """Bytes a kernel reads or writes for ``tensor`` (elements x item size)."""
    return tensor.nbytes


__all__ = [
    "Allocator", "DEVICE", "alias_like", "allocate", "allocator", "cpu_storage",
    "cpu_view", "cpu_views_of_one_storage", "empty_strided", "nbytes_of", "set_geometry",
    "tensor_on", "wrap_cpu",
]


def _clone_storage(self: torch.UntypedStorage) -> torch.UntypedStorage:
    """``UntypedStorage.clone`` that works for npu storages (see :func:`patch_storage`)."""
    if self.device.type != "npu":
        return _original_clone(self)
    nbytes = self.nbytes()
    new = allocate(nbytes)
    if nbytes:
        cpu_storage(new).copy_(cpu_storage(self))
    runtime.record_device_memory_op("storage.clone", nbytes, nbytes)
    return new


def _storage_to(self: torch.UntypedStorage, *, device: torch.device | str,
                non_blocking: bool = False) -> torch.UntypedStorage:
    """``UntypedStorage.to`` that can target npu (see :func:`patch_storage`)."""
    target = torch.device(device)
    if target.type != "npu" or self.device.type == "npu":
        return _original_to(self, device=target, non_blocking=non_blocking)
    if target.index not in (None, 0):
        raise RuntimeError(f"npu has one device (npu:0); got {target}")
    host = self if self.device.type == "cpu" else self.cpu()
    nbytes = host.nbytes()
    new = allocate(nbytes)
    if nbytes:
        cpu_storage(new).copy_(host)
    runtime.record_transfer("host_to_device", nbytes)
    return new


def _is_npu_device(device: object) -> bool:
    if device is None or isinstance(device, int):
        return False
    return torch.device(device).type == "npu"  # type: ignore[arg-type]


def _new_storage(cls: type, *args: object, device: object = None,
                 **kwargs: object) -> torch.UntypedStorage:
    """``UntypedStorage(...)``: on npu, a storage from :func:`allocate`.

    torch's constructor asks the C++ allocator of the device, which a Python backend
    has none of: ``UntypedStorage(4, device="npu")`` would kill the process.
    """
    if not _is_npu_device(device):
        return _original_new(cls, *args, device=device, **kwargs) if device is not None \
            else _original_new(cls, *args, **kwargs)
    target = torch.device(device)  # type: ignore[arg-type]
    if target.index not in (None, 0):
        raise RuntimeError(f"npu has one device (npu:0); got {target}")
    if kwargs or len(args) > 1:
        raise TypeError("UntypedStorage on npu takes a size or a sequence of bytes")
    data = args[0] if args else 0
    if isinstance(data, int):
        return allocate(data)
    host = _original_new(cls, data)  # a sequence of byte values, validated by torch
    new = allocate(host.nbytes())
    if host.nbytes():
        cpu_storage(new).copy_(host)
    runtime.record_transfer("host_to_device", host.nbytes())
    return new


def _storage_new(self: torch.UntypedStorage) -> torch.UntypedStorage:
    """``storage.new()``: an empty storage on the same device (crashes for npu unpatched)."""
    if self.device.type == "npu":
        return allocate(0)
    return _original_storage_new(self)


def _storage_resize(self: torch.UntypedStorage, size: int) -> torch.UntypedStorage:
    """``storage.resize_``: npu storages keep their size (torch would ask the C++
    allocator a Python backend does not have); tensors on npu do resize."""
    if self.device.type == "npu" and size != self.nbytes():
        raise NotImplementedError("npu storages cannot be resized in place; allocate a new "
                                  "one (torch.UntypedStorage(n, device='npu')) and copy_")
    return _original_resize(self, size) if self.device.type != "npu" else self


_original_resize = torch.UntypedStorage.resize_
_original_clone = torch.UntypedStorage.clone
_original_to = torch.UntypedStorage.to
_original_new = torch.UntypedStorage.__new__
_original_storage_new = torch.UntypedStorage.new


def patch_storage() -> None:
    """Route npu storages made by ``UntypedStorage(...)``, ``.new()``, ``.clone()`` and
    ``.to("npu")`` through :func:`allocate`, and give storages ``is_npu`` / ``.npu()``.

    torch builds these with the device's C++ allocator, which a Python backend cannot
    provide: unpatched they crash the process. ``copy.deepcopy``, ``torch.load`` and
    ``TypedStorage(n, device="npu")`` go through them.
    """
    torch.UntypedStorage.__new__ = _new_storage  # type: ignore[method-assign,assignment]
    torch.UntypedStorage.new = _storage_new  # type: ignore[method-assign]
    torch.UntypedStorage.resize_ = _storage_resize  # type: ignore[method-assign]
    torch.UntypedStorage.clone = _clone_storage  # type: ignore[method-assign]
    torch.UntypedStorage.to = _storage_to  # type: ignore[method-assign]
    if not hasattr(torch.UntypedStorage, "is_npu"):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=False, for_module=False, for_packed_sequence=False, for_storage=True)
