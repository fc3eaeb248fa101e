"""Quantized weights of the blocks ``archsim llm`` times (``--weights int8|fp8``).

- ``int8``: every ``nn.Linear`` of a block becomes :class:`Int8WeightOnlyLinear`: int8
  weights with one scale per output channel, run as ``torch._weight_int8pack_mm`` (what
  torchao's ``Int8WeightOnlyConfig`` and CPU stacks call). The compiler reads those
  weights at one byte each and widens them in the arrays' input path
  (``compiler.lowerings.matmul``); activations and the KV cache keep their dtypes.
- ``fp8``: :class:`Fp8Linear`, e4m3 weights with one f32 scale per output channel and
  the activations quantized to e4m3 per token on the fly (absmax / 448, on the vector
  unit), multiplied by ``torch._scaled_mm`` (f32 sums, both scales in the epilogue):
  vLLM's dynamic fp8 scheme. The arrays run it at their fp8 rate where they have one.

Either way a decode step streams half the weight bytes of bf16.
"""

from __future__ import annotations

import torch
from torch import nn

from archsim.errors import ArchsimError
from serving.plan import WEIGHT_BYTES


class QuantizedLinear(nn.Module):
    """A linear layer whose weights are stored in a narrow type (``STORED``), quantized
    symmetrically per output channel (absmax / ``QMAX``); subclasses say how the scales
    are kept and how the layer runs."""

    STORED: torch.dtype
    QMAX: float

    def __init__(self, in_features: int, out_features: int, bias: nn.Parameter | None,
                 dtype: torch.dtype, device: torch.device | str = "meta") -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", torch.zeros(out_features, in_features,
                                                   dtype=self.STORED, device=device))
        self.register_buffer("scales", self._scales(out_features, dtype, device))
        self.bias = bias

    @staticmethod
    def _scales(out_features: int, dtype: torch.dtype,
                device: torch.device | str) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def _encode(scaled: torch.Tensor) -> torch.Tensor:
        """Weights divided by their channel's scale, in the stored type."""
        raise NotImplementedError

    @classmethod
    def of(cls, linear: nn.Linear, dtype: torch.dtype) -> QuantizedLinear:
        """``linear`` quantized per output channel (on meta: shapes only)."""
        quantized = cls(linear.in_features, linear.out_features, linear.bias, dtype,
                        linear.weight.device)
        if linear.weight.device.type != "meta":
            weight = linear.weight.detach().float()
            scales = weight.abs().amax(dim=1).clamp(min=1e-12) / cls.QMAX
            quantized.weight.copy_(cls._encode(weight / scales[:, None]))
            quantized.scales.copy_(scales.reshape(quantized.scales.shape))
        return quantized

    def _finish(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y + self.bias if self.bias is not None else y


class Int8WeightOnlyLinear(QuantizedLinear):
    """``y = x @ (w_int8 * scale).T + bias``, the weights stored int8 with per-output-
    channel scales in the activations' dtype."""

    STORED, QMAX = torch.int8, 127.0

    @staticmethod
    def _scales(out_features: int, dtype: torch.dtype,
                device: torch.device | str) -> torch.Tensor:
        return torch.ones(out_features, dtype=dtype, device=device)

    @staticmethod
    def _encode(scaled: torch.Tensor) -> torch.Tensor:
        return torch.round(scaled).clamp(-128, 127)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        return self._finish(torch._weight_int8pack_mm(flat, self.weight, self.scales), x)


E4M3_MAX = 448.0
"""The largest finite float8_e4m3fn value: absmax maps to it."""


class Fp8Linear(QuantizedLinear):
    """``y = (x_fp8 @ w_fp8.T) * x_scale * w_scale + bias``: e4m3 weights with per-output-
    channel f32 scales, activations quantized to e4m3 per token when called."""

    STORED, QMAX = torch.float8_e4m3fn, E4M3_MAX

    @staticmethod
    def _scales(out_features: int, dtype: torch.dtype,
                device: torch.device | str) -> torch.Tensor:
        return torch.ones(1, out_features, dtype=torch.float32, device=device)

    @staticmethod
    def _encode(scaled: torch.Tensor) -> torch.Tensor:
        return scaled.to(torch.float8_e4m3fn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).float()
        x_scale = flat.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / E4M3_MAX
        x_fp8 = (flat / x_scale).to(torch.float8_e4m3fn)
        y = torch._scaled_mm(x_fp8, self.weight.t(), x_scale, self.scales, out_dtype=x.dtype)
        return self._finish(y, x)


QUANTIZED_LINEAR: dict[str, type[QuantizedLinear]] = {
    "int8": Int8WeightOnlyLinear, "fp8": Fp8Linear}
"""The module each ``--weights`` format replaces ``nn.Linear`` with."""


def quantize_weights(module: nn.Module, weights: str, dtype: torch.dtype) -> nn.Module:
    """``module`` with every ``nn.Linear`` in ``weights`` format (in place)."""
    if weights not in QUANTIZED_LINEAR:
        raise ArchsimError(f"unknown weight format {weights!r}: expected one of "
                           f"{', '.join(QUANTIZED_LINEAR)}")
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            setattr(module, name, QUANTIZED_LINEAR[weights].of(child, dtype))
        else:
            quantize_weights(child, weights, dtype)
    return module


__all__ = ["E4M3_MAX", "Fp8Linear", "Int8WeightOnlyLinear", "QUANTIZED_LINEAR",
           "QuantizedLinear", "WEIGHT_BYTES", "quantize_weights"]
