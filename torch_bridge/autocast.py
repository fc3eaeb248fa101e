"""Autocast on npu: ``torch.autocast("npu", dtype=torch.bfloat16 | torch.float16)``.

Every op falls through the ``AutocastPrivateUse1`` key except those with a casting
rule, which follow CUDA's autocast lists:

- ``LOWER_PRECISION`` ops (matrix products, convolutions) run in the autocast dtype:
  their floating-point npu tensor arguments are cast to it;
- ``FP32`` ops (reductions, norms, softmax, losses, transcendentals that lose range)
  run in float32: their reduced-precision floating arguments are cast up;
- ``PROMOTE`` ops with several floating inputs run in the widest input dtype;
- ``REFUSED`` ops are unsafe in reduced precision and raise, as under CUDA autocast
  (``binary_cross_entropy``: use ``binary_cross_entropy_with_logits``).

Casts are ordinary differentiable ``.to`` calls, so autograd sees them. Unlike CUDA,
casts of weights are not cached across calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_AUTOCAST_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
_REDUCED = (torch.float16, torch.bfloat16)

LOWER_PRECISION: tuple[str, ...] = (
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "convolution", "prelu", "addmm", "addmv",
    "addr", "matmul", "einsum", "mm", "mv", "linear", "addbmm", "baddbmm", "bmm",
    "chain_matmul", "linalg_multi_dot", "scaled_dot_product_attention",
)
FP32: tuple[str, ...] = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm",
    "native_layer_norm", "group_norm", "frobenius_norm", "nuclear_norm",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
    "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss",
    "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "softmax", "log_softmax", "cross_entropy", "sum", "prod", "cumprod", "cumsum", "norm",
)
PROMOTE: tuple[str, ...] = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "index_put",
    "scatter_add", "tensordot",
)


REFUSED: dict[str, str] = {
    "binary_cross_entropy": (
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
        "autocast on npu; use binary_cross_entropy_with_logits or BCEWithLogitsLoss, "
        "which are safe (a sigmoid before BCE is folded into them)"),
}
"""Ops refused under npu autocast, with the message (CUDA autocast refuses the same)."""


def _refuse(message: str) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(message)

    return kernel


def _cast(value: Any, dtype: torch.dtype, only_reduced: bool) -> Any:
    """``value`` with floating npu tensors cast to ``dtype`` (recursing into lists)."""
    if isinstance(value, torch.Tensor):
        if not value.is_floating_point() or value.dtype == dtype or value.is_cpu:
            return value
        if only_reduced and value.dtype not in _REDUCED:
            return value
        return value.to(dtype)
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        return type(value)(_cast(v, dtype, only_reduced) for v in value)
    return value


def _widest(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.dtype | None:
    widest: torch.dtype | None = None
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            widest = value.dtype if widest is None else torch.promote_types(widest, value.dtype)
    return widest


def _rule(op: torch._ops.OpOverload, kind: str) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        if kind == "lower":
            dtype, only_reduced = torch.get_autocast_dtype("npu"), False
        elif kind == "fp32":
            dtype, only_reduced = torch.float32, True
        else:
            dtype, only_reduced = _widest(args, kwargs), False
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEY):
            if dtype is not None:
                args = tuple(_cast(a, dtype, only_reduced) for a in args)
                kwargs = {k: _cast(v, dtype, only_reduced) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def install(library: torch.library.Library, fallback_library: torch.library.Library) -> None:
    """Register the fallthrough and the casting rules for ``AutocastPrivateUse1``."""
    fallback_library.fallback(torch.library.fallthrough_kernel,
                              dispatch_key="AutocastPrivateUse1")
    for kind, names in (("lower", LOWER_PRECISION), ("fp32", FP32), ("promote", PROMOTE)):
        for name in names:
            packet = getattr(torch.ops.aten, name, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                if "out" in overload:
                    continue
                op = getattr(packet, overload)
                try:
                    if not torch._C._dispatch_has_kernel_for_dispatch_key(
                            op.name(), "AutocastPrivateUse1"):
                        library.impl(op, _rule(op, kind), "AutocastPrivateUse1")
                except RuntimeError:
                    continue  # listed but not registered in this build (einsum.sublist)
    for name, message in REFUSED.items():
        for overload in getattr(torch.ops.aten, name).overloads():
            op = getattr(getattr(torch.ops.aten, name), overload)
            if not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(),
                                                                  "AutocastPrivateUse1"):
                library.impl(op, _refuse(message), "AutocastPrivateUse1")


__all__ = ["FP32", "LOWER_PRECISION", "PROMOTE", "REFUSED", "install"]
