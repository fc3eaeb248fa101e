"""The float64 reference of quantized CPU ops that have no float64 kernel.

When a result is off from torch on CPU by more than its dtype's tolerance, the numbers
contract asks whether it is as close to the computation in float64 as torch's own
result is (:func:`torch_bridge.numerics.check_close`): rounding in another order, not
a wrong number. torch's weight-only quantized matmuls take float32/16-bit activations
only, so a model using them had no float64 reference, and a float32 int4 head of 4,224
x 2,048 was refused for a sum order 1.4x over float32's tolerance. Under
:func:`float64_reference` those ops with float64 activations multiply in float64 by
their weights dequantized in float64 from the packed codes. The codes are read with
the compiler's own table of the CPU packing, so each result is checked against torch's
float32 kernel on the same inputs first (:data:`AGREEMENT`): a table wrong for the
program and the reference alike makes the reference refuse, and the first error stands.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from compiler.lowerings.int4 import ZERO_CODE, cpu_layout

aten = torch.ops.aten

def int4_codes(packed: torch.Tensor, k: int) -> torch.Tensor:
    """The codes (0..15) of CPU-packed ``[N, K/2]`` bytes as ``[N, K]``, in the CPU
    kernel's blocked layout (:func:`compiler.lowerings.int4.cpu_layout`): a full block
    of ``R`` rows is ``[K, R/2]`` bytes holding rows ``c`` and ``R/2 + c`` (halves) or
    ``2c`` and ``2c + 1`` (pairs); a partial last block holds pairs."""
    layout = cpu_layout()
    n, rows = packed.shape[0], layout.block_rows
    blocks = []
    for b0 in range(0, n, rows):
        count = min(rows, n - b0)
        data = packed[b0:b0 + count].reshape(k, count // 2)
        low, high = data % 16, data // 16
        both = torch.cat([low, high], 1) if layout.halves and count == rows else \
            torch.stack([low, high], 2).reshape(k, count)
        blocks.append(both.t())
    return torch.cat(blocks)


def _int4_mm(x: torch.Tensor, packed: torch.Tensor, group: int,
             scales_zeros: torch.Tensor) -> torch.Tensor:
    """``_weight_int4pack_mm_for_cpu`` in float64: ``x @ W^T`` with ``W[n, k] =
    (code - 8) * scale + zero`` of its group (``x`` is ``[M, K]``)."""
    k = x.shape[1]
    sz = scales_zeros.double()
    scale = sz[..., 0].t().repeat_interleave(group, 1)  # [N, K]
    zero = sz[..., 1].t().repeat_interleave(group, 1)
    w = (int4_codes(packed, k).double() - ZERO_CODE) * scale + zero
    return x @ w.t()


def _int8_mm(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``_weight_int8pack_mm`` in float64: ``(x @ W^T) * scales``."""
    return (x @ weight.double().t()) * scales.double()


RULES: dict[Any, Callable[..., torch.Tensor]] = {
    aten._weight_int4pack_mm_for_cpu.default: _int4_mm,
    aten._weight_int8pack_mm.default: _int8_mm,
}
"""Quantized ops without a float64 kernel, and how to compute each in float64."""


AGREEMENT = 1e-3
"""How far (relative to the largest value) a rule's result, rounded to float32, may be
from torch's own float32 kernel on the same inputs: a sum order is ~1e-6, a weight
decoded wrong is the values themselves."""


class RuleDisagrees(RuntimeError):
    """A rule disagrees with torch's own kernel: it cannot serve as the reference."""


def _narrow(value: Any) -> Any:
    return value.float() if isinstance(value, torch.Tensor) and \
        value.dtype is torch.float64 else value


class _Float64Reference(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        rule = RULES.get(func)
        if rule is None or args[0].dtype is not torch.float64:
            return func(*args, **(kwargs or {}))
        out = rule(*args, **(kwargs or {}))
        # the rule decodes the weights with the compiler's tables (the CPU packing):
        # checked against torch's own kernel, so a table that is wrong for the
        # program and the reference alike cannot pass a wrong result
        torchs = func(*[_narrow(a) for a in args], **(kwargs or {}))
        scale = float(torchs.abs().max()) if torchs.numel() else 0.0
        if not torch.allclose(out.float(), torchs, rtol=0, atol=AGREEMENT * max(scale, 1e-30)):
            raise RuleDisagrees(f"{func}: the float64 rule disagrees with torch's float32 "
                                 "kernel")
        return out


def float64_reference() -> _Float64Reference:
    """A context: within it, the ops of :data:`RULES` given float64 activations compute
    in float64 instead of raising."""
    return _Float64Reference()


__all__ = ["AGREEMENT", "RULES", "RuleDisagrees", "float64_reference", "int4_codes"]
