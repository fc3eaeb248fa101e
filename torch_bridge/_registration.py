"""Registering the ``"npu"`` device with torch: done once per process."""

from __future__ import annotations

import torch

_registered = False
_libraries: list[torch.library.Library] = []  # kept alive: dropping them unregisters


def register() -> None:
    """Rename PrivateUse1 to ``npu``, install ``torch.npu``, the kernels, the host
    fallback and autocast. Safe to call again (does nothing)."""
    global _registered
    if _registered:
        return
    if torch._C._get_privateuse1_backend_name() not in ("privateuseone", "npu"):
        raise RuntimeError(
            "cannot register the npu device: PrivateUse1 is already taken by "
            f"{torch._C._get_privateuse1_backend_name()!r}")
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    torch.utils.rename_privateuse1_backend("npu")  # our modules name the device at import
    from torch_bridge import autocast, device, kernels

    _setup_privateuseone_for_python_backend("npu", backend_module=device)
    aten_impl = torch.library.Library("aten", "IMPL")
    global_impl = torch.library.Library("_", "IMPL")
    _libraries.extend([aten_impl, global_impl])
    kernels.install(aten_impl, global_impl)
    autocast.install(aten_impl, global_impl)
    _registered = True


def is_registered() -> bool:
    return _registered
