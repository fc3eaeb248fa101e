"""Registering the ``"npu"`` device with torch: done once per process."""

from __future__ import annotations

import torch

_done: set[str] = set()  # steps finished, so a retry after a failure resumes
_libraries: list[torch.library.Library] = []  # kept alive: dropping them unregisters


def register() -> None:
    """Rename PrivateUse1 to ``npu``, install ``torch.npu``, the kernels (compiled
    eager ops first), the host fallback and autocast. Safe to call again (does nothing once done)."""
    if "autocast" in _done:
        return
    name = torch._C._get_privateuse1_backend_name()
    if name not in ("privateuseone", "npu"):
        raise RuntimeError(f"cannot register the npu device: PrivateUse1 is already "
                           f"taken by {name!r}")
    if "device" not in _done:
        from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

        torch.utils.rename_privateuse1_backend("npu")  # our modules name it at import
        from torch_bridge import device, storage

        _setup_privateuseone_for_python_backend("npu", backend_module=device)
        storage.patch_storage()
        from torch_bridge import accelerator

        accelerator.install()  # torch.accelerator answers from torch.npu for npu
        _libraries.extend([torch.library.Library("aten", "IMPL"),
                           torch.library.Library("_", "IMPL")])
        _done.add("device")
    aten_impl, global_impl = _libraries
    if "kernels" not in _done:
        from torch_bridge import (  # noqa: F401 - attention and rnn register kernels
            attention, eager, kernels, rnn)

        kernels.install(aten_impl, global_impl)
        eager.install()  # ops the compiler lowers run on the simulator by default
        _done.add("kernels")
    from torch_bridge import autocast, dynamo, quantized, triton_launch

    autocast.install(aten_impl, global_impl)
    quantized.install()  # out_dtype int8 mm and tensor printing, as torchao uses them
    triton_launch.install_when_imported()  # Triton kernels on npu tensors
    dynamo.install_when_imported()  # torch.compile(backend="npu"), the device interface
    _done.add("autocast")


def is_registered() -> bool:
    return "autocast" in _done
