"""``torch.accelerator`` for the ``"npu"`` device.

On torch 2.13, ``torch.accelerator.synchronize`` and the memory functions call C++
device hooks (``DeviceGuardImplInterface::synchronizeDevice``, a
``CachingDeviceAllocator``) that a backend registered from Python cannot provide:
unpatched, ``synchronize`` raises "Backend doesn't support synchronizing all streams
on device" and ``memory_allocated`` fails an internal assert. :func:`install` wraps
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

_WRAPPED = ("synchronize", "memory_allocated", "max_memory_allocated", "memory_reserved",
            "max_memory_reserved", "memory_stats", "reset_peak_memory_stats",
            "empty_cache", "get_memory_info")
"""torch.accelerator functions answered by torch.npu for the npu device."""

_NPU_NAMES = {"get_memory_info": "mem_get_info"}


def _is_npu(device: Any) -> bool:
    if device is None:
        current = torch.accelerator.current_accelerator()
        return current is not None and current.type == "npu"
    if isinstance(device, int):
        return _is_npu(None)
    return torch.device(device).type == "npu"


def _wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    npu_name = _NPU_NAMES.get(name, name)

    @functools.wraps(original)
    def wrapper(device: Any = None, /, *args: Any, **kwargs: Any) -> Any:
        if _is_npu(device):
            return getattr(torch.npu, npu_name)(*args, **kwargs)
        return original(device, *args, **kwargs)

    wrapper.__archsim_wrapped__ = True  # type: ignore[attr-defined]
    return wrapper


def install() -> None:
    """Wrap the ``torch.accelerator`` functions listed in :data:`_WRAPPED` (once)."""
    for name in _WRAPPED:
        original = getattr(torch.accelerator, name, None)
        if original is None or getattr(original, "__archsim_wrapped__", False):
            continue
        setattr(torch.accelerator, name, _wrap(name, original))
