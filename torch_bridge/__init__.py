"""The ``"npu"`` PyTorch device backed by the archsim simulator.

Importing this package registers the device (idempotent). Installing the package
also registers it at ``import torch`` through the ``torch.backends`` entry point
(:func:`_autoload`), unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``.

Modules: ``device`` (``torch.npu``), ``storage`` (device memory), ``kernels`` (the
kernel table: :func:`torch_bridge.kernels.register_npu_kernel`), ``eager`` (ops run
through the compiler and the simulator), ``fallback`` (host execution), ``runtime``
(config and device timeline), ``autocast``, ``compile_backend`` (``torch.compile(
backend="archsim")``), ``profiler`` (:class:`profile`, resolved on first use).
"""

from __future__ import annotations

import warnings
from typing import Any

_autoload_failure_warned = False


def _autoload() -> None:
    """Entry point called by ``import torch`` (group ``torch.backends``).

    Never raises: a failure here would break ``import torch`` for every program in
    the environment, so it is reported once as a warning instead.
    """
    global _autoload_failure_warned
    try:
        from torch_bridge._registration import register

        register()
    except Exception as exc:  # noqa: BLE001 - must not break `import torch`
        if not _autoload_failure_warned:
            _autoload_failure_warned = True
            warnings.warn(f"archsim npu device not registered: {type(exc).__name__}: {exc}",
                          RuntimeWarning, stacklevel=2)



# ``import torch`` calls ``_autoload`` through the entry point, which may happen while
# this module is still initializing (``import torch_bridge`` before torch): define it
# first and import torch here, before anything else imports it.
import torch  # noqa: E402,F401

from torch_bridge._registration import is_registered, register  # noqa: E402

__all__ = ["HostFallbackWarning", "is_registered", "profile", "register"]


def __getattr__(name: str) -> Any:
    if name == "profile":
        from torch_bridge.profiler import profile
        return profile
    if name == "HostFallbackWarning":
        from torch_bridge.fallback import HostFallbackWarning
        return HostFallbackWarning
    raise AttributeError(f"module 'torch_bridge' has no attribute {name!r}")


_autoload()  # `import torch_bridge` registers too; call register() to see errors raised
