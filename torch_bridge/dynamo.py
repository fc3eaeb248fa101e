"""What dynamo knows about npu: the backend name ``"npu"`` and the device interface.

``torch.compile(backend="npu")`` is ``backend="archsim"`` under the device's name, as
torch_openreg and torch-npu register theirs; an installed archsim also declares it in
the ``torch_dynamo_backends`` entry points. ``torch._dynamo`` takes a second to
import, so nothing here imports it: :func:`install_when_imported` registers both
right after something else does (``torch.compile`` does).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any

import torch

BACKEND_NAME = "npu"


def _interface() -> type:
    """The ``DeviceInterface`` for npu, answering from ``torch.npu``."""
    from torch._dynamo.device_interface import DeviceInterface

    from torch_bridge import device as npu

    class NpuInterface(DeviceInterface):
        device = npu.device
        Event = torch.Event  # dynamo captures only torch.Event / torch.Stream subclasses
        Stream = torch.Stream

        class Worker:
            @staticmethod
            def set_device(device: int) -> None:
                npu.set_device(device)

            @staticmethod
            def current_device() -> int:
                return npu.current_device()

            @staticmethod
            def get_device_properties(device: torch.types.Device = None) -> Any:
                return npu.get_device_properties(device)

        current_device = staticmethod(npu.current_device)
        set_device = staticmethod(npu.set_device)
        device_count = staticmethod(npu.device_count)
        is_available = staticmethod(npu.is_available)
        synchronize = staticmethod(npu.synchronize)
        get_compute_capability = staticmethod(npu.get_device_capability)
        is_bf16_supported = staticmethod(npu.is_bf16_supported)
        memory_allocated = staticmethod(npu.memory_allocated)

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            npu.set_device(device)
            return 0

        exchange_device = maybe_exchange_device

        @staticmethod
        def current_stream() -> torch.Stream:
            return torch.Stream(device="npu")

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return 0

    return NpuInterface


def install() -> None:
    """Register the ``"npu"`` backend (unless already known) and the device interface."""
    from torch._dynamo.backends.registry import _BACKENDS, register_backend
    from torch._dynamo.device_interface import register_interface_for_device

    from torch_bridge.compile_backend import archsim_backend

    if BACKEND_NAME not in _BACKENDS:
        register_backend(compiler_fn=archsim_backend, name=BACKEND_NAME)
    register_interface_for_device(BACKEND_NAME, _interface())
    register_interface_for_device(f"{BACKEND_NAME}:0", _interface())


def install_when_imported() -> None:
    """Install now if ``torch._dynamo`` is loaded, else as soon as it is."""
    if "torch._dynamo" in sys.modules:
        install()
        return
    if not any(isinstance(f, _AfterDynamoImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamoImport())


class _AfterDynamoImport(importlib.abc.MetaPathFinder):
    """Runs :func:`install` right after ``import torch._dynamo`` completes."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch._dynamo":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_install(module: Any) -> None:
            exec_module(module)
            install()

        spec.loader.exec_module = exec_and_install  # type: ignore[method-assign]
        return spec


__all__ = ["BACKEND_NAME", "install", "install_when_imported"]
