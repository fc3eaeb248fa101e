"""``torch.accelerator`` for the ``"npu"`` device.

On torch 2.13, ``torch.accelerator.synchronize`` and the memory functions call C++
device hooks (``DeviceGuardImplInterface::synchronizeDevice``, a
``CachingDeviceAllocator``) that a backend registered from Python cannot provide:
unpatched, ``synchronize`` raises "Backend doesn't support synchronizing all streams
on device" and ``memory_allocated`` fails an internal assert; ``get_device_capability``
raises and ``set_device_index(1)`` is silently accepted. :func:`install` wraps
those functions so that, when the device they are asked about is ``npu``, they answer
from ``torch.npu``; for any other device they call torch's own. ``torch.Stream`` and
``torch.Event(device="npu")`` work without help; pinned host memory
(``pin_memory(device="npu")``) needs C++ hooks (``PrivateUse1HooksInterface``) and is
not available: npu tensors are copied from ordinary host memory.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

SUPPORTED_DTYPES: frozenset[torch.dtype] = frozenset({
    torch.bool, torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.int8,
    torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
    torch.float64, torch.complex32, torch.complex64, torch.complex128,
    torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz,
    torch.float8_e8m0fnu,
})
"""Dtypes npu tensors can be made in and converted between (quantized, bit-packed and
sub-byte dtypes cannot: CPU has no copy kernel for them, or they need a C++ quantizer)."""


def _capability(device: Any = None) -> dict[str, Any]:
    torch.npu.get_device_capability(device)  # raises for a missing device
    return {"supported_dtypes": set(SUPPORTED_DTYPES)}


_NPU_ANSWERS: dict[str, Callable[..., Any]] = {
    "synchronize": lambda device=None: torch.npu.synchronize(device),
    "memory_allocated": lambda device=None: torch.npu.memory_allocated(),
    "max_memory_allocated": lambda device=None: torch.npu.max_memory_allocated(),
    "memory_reserved": lambda device=None: torch.npu.memory_reserved(),
    "max_memory_reserved": lambda device=None: torch.npu.max_memory_reserved(),
    "memory_stats": lambda device=None: torch.npu.memory_stats(),
    "reset_peak_memory_stats": lambda device=None: torch.npu.reset_peak_memory_stats(),
    "empty_cache": lambda device=None: torch.npu.empty_cache(),
    "get_memory_info": lambda device=None: torch.npu.mem_get_info(),
    "get_device_capability": _capability,
    "set_device_index": lambda device: torch.npu.set_device(device),
}
"""torch.accelerator functions answered by torch.npu for the npu device (the C++ hooks
they call cannot be provided from Python)."""


def _is_npu(device: Any) -> bool:
    if device is None or isinstance(device, int):
        current = torch.accelerator.current_accelerator()
        return current is not None and current.type == "npu"
    return torch.device(device).type == "npu"


def _wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    answer = _NPU_ANSWERS[name]

    @functools.wraps(original)
    def wrapper(device: Any = None, /, *args: Any, **kwargs: Any) -> Any:
        if _is_npu(device):
            return answer(device, *args, **kwargs)
        return original(device, *args, **kwargs)

    wrapper.__archsim_wrapped__ = True  # type: ignore[attr-defined]
    return wrapper


def install() -> None:
    """Wrap the ``torch.accelerator`` functions listed in :data:`_NPU_ANSWERS` (once)."""
    for name in _NPU_ANSWERS:
        original = getattr(torch.accelerator, name, None)
        if original is None or getattr(original, "__archsim_wrapped__", False):
            continue
        setattr(torch.accelerator, name, _wrap(name, original))
