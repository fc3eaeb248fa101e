"""What quantization libraries (torchao) need from the ``npu`` device beyond aten kernels.

- ``out_dtype(aten.mm, torch.int32, int8, int8)``, the higher-order op torchao's
  ``safe_int_mm`` calls on any device but CPU: torch's dense rule runs it as
  ``torch._int_mm`` on CUDA/XPU only and elsewhere promotes both operands to int32 and
  calls ``mm``, which no array runs. On npu tensors it is ``torch._int_mm`` (int8 x int8
  -> int32 at the array's int8 rate, bit-exact); any other ``out_dtype`` call keeps
  torch's rule.
- Printing an npu tensor: torch formats a tensor element by element (an integer tensor
  reads every element with ``.item()``, each a host round trip). torchao's
  ``safe_int_mm`` formats its input on every call (it tests ``"FakeTensor" in
  input.__repr__()``), so a dynamically quantized linear layer would pay one host read per
  activation element. An npu tensor is copied to the host once and formatted there, the
  way torch already does for XLA and lazy tensors: one device-to-host transfer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._C import DispatchKey

_installed = False


def _int_mm_or_torch_rule(op: torch._ops.OpOverload, output_dtype: torch.dtype,
                          *args: Any) -> torch.Tensor:
    from torch._higher_order_ops.out_dtype import out_dtype_fallback

    if (op is torch.ops.aten.mm.default and output_dtype == torch.int32 and len(args) == 2
            and all(isinstance(a, torch.Tensor) and a.dtype == torch.int8 for a in args)):
        return torch._int_mm(*args)
    return out_dtype_fallback(op, output_dtype, *args)


def _formatting_on_host(format_data: Callable[..., str]) -> Callable[..., str]:
    def format_npu_on_host(self: torch.Tensor, *args: Any, **kwargs: Any) -> str:
        if self.device.type == "npu":
            self = self.to("cpu")
        return format_data(self, *args, **kwargs)

    format_npu_on_host.__wrapped__ = format_data  # type: ignore[attr-defined]
    return format_npu_on_host


def install() -> None:
    """Register the npu rule for ``out_dtype`` and host-side printing (once)."""
    global _installed
    if _installed:
        return
    import torch._tensor_str as tensor_str
    from torch._higher_order_ops.out_dtype import out_dtype

    out_dtype.py_impl(DispatchKey.PrivateUse1)(_int_mm_or_torch_rule)
    # the data part only: the caller (_str_intern) still names the npu device
    tensor_str._tensor_str = _formatting_on_host(tensor_str._tensor_str)
    _installed = True
