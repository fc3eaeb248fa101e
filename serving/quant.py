"""Weight-only quantization of the blocks ``archsim llm`` times (``--weights int8``).

Every ``nn.Linear`` of a block becomes :class:`Int8WeightOnlyLinear`: int8 weights with
one scale per output channel, run as ``torch._weight_int8pack_mm`` (what torchao's
``Int8WeightOnlyConfig`` and CPU stacks call). The compiler reads those weights at one
byte each and widens them in the arrays' input path (``compiler.lowerings.matmul``), so
a decode step streams half the bytes of bf16 weights; activations and the KV cache keep
their dtypes.
"""

from __future__ import annotations

import torch
from torch import nn

from archsim.errors import ArchsimError
from serving.plan import WEIGHT_BYTES


class Int8WeightOnlyLinear(nn.Module):
    """``y = x @ (w_int8 * scale).T + bias``, the weights stored int8 with per-output-
    channel scales in the activations' dtype."""

    def __init__(self, in_features: int, out_features: int, bias: nn.Parameter | None,
                 dtype: torch.dtype, device: torch.device | str = "meta") -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", torch.zeros(out_features, in_features,
                                                   dtype=torch.int8, device=device))
        self.register_buffer("scales", torch.ones(out_features, dtype=dtype, device=device))
        self.bias = bias

    @classmethod
    def of(cls, linear: nn.Linear, dtype: torch.dtype) -> Int8WeightOnlyLinear:
        """``linear`` quantized symmetrically per output channel (on meta: shapes)."""
        quantized = cls(linear.in_features, linear.out_features, linear.bias, dtype,
                        linear.weight.device)
        if linear.weight.device.type != "meta":
            weight = linear.weight.detach().float()
            scales = weight.abs().amax(dim=1).clamp(min=1e-12) / 127
            quantized.weight.copy_(torch.round(weight / scales[:, None]).clamp(-128, 127))
            quantized.scales.copy_(scales.to(dtype))
        return quantized

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        y = torch._weight_int8pack_mm(flat, self.weight, self.scales)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y + self.bias if self.bias is not None else y


def quantize_weights(module: nn.Module, weights: str, dtype: torch.dtype) -> nn.Module:
    """``module`` with every ``nn.Linear`` in weight-only ``weights`` format (in place)."""
    if weights not in WEIGHT_BYTES:
        raise ArchsimError(f"unknown weight format {weights!r}: expected one of "
                           f"{', '.join(WEIGHT_BYTES)}")
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            setattr(module, name, Int8WeightOnlyLinear.of(child, dtype))
        else:
            quantize_weights(child, weights, dtype)
    return module


__all__ = ["Int8WeightOnlyLinear", "WEIGHT_BYTES", "quantize_weights"]
