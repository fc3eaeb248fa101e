"""Quantized weights of the blocks ``archsim llm`` times (``--weights int8|int4|fp8``,
``--activations int8``); the format names are :func:`serving.plan.weight_format`'s.

- ``int8``: every ``nn.Linear`` of a block becomes :class:`Int8WeightOnlyLinear`: int8
  weights with one scale per output channel, run as ``torch._weight_int8pack_mm`` (what
  torchao's ``Int8WeightOnlyConfig`` and CPU stacks call). The compiler reads those
  weights at one byte each and widens them where ``core.matrix.dequant`` says (the
  arrays' input path or the vector unit, ``compiler.dequant_placement``); activations and the KV cache keep their dtypes.
- ``fp8``: :class:`Fp8Linear`, e4m3 weights with one f32 scale per output channel and
  the activations quantized to e4m3 per token on the fly (absmax / 448, on the vector
  unit), multiplied by ``torch._scaled_mm`` (f32 sums, both scales in the epilogue):
  vLLM's dynamic fp8 scheme. The arrays run it at their fp8 rate where they have one.
- ``int4``: :class:`Int4WeightOnlyLinear`, two weights a byte with a scale and a zero
  point per group of ``group_size`` input features (asymmetric, torchao's int4 scheme),
  run as torch's CPU int4 op ``_weight_int4pack_mm_for_cpu``
  (``compiler.lowerings.int4``).
- ``int8`` with ``--activations int8`` (W8A8): :class:`Int8DynamicLinear`, int8 weights
  per output channel and the activations quantized to int8 per token (absmax / 127, on
  the vector unit), ``torch._int_mm`` at the arrays' int8 rate, both scales in the
  epilogue: torchao's ``Int8DynamicActivationInt8WeightConfig``.

int8 and fp8 stream half the weight bytes of bf16, int4 a quarter (plus its scales).
"""

from __future__ import annotations

import torch
from torch import nn

from archsim.errors import ArchsimError
from serving.plan import WEIGHT_BYTES, weight_format


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


class Int8DynamicLinear(Int8WeightOnlyLinear):
    """W8A8: ``y = (x_int8 @ w_int8.T) * x_scale * w_scale + bias`` with int32 sums
    (``torch._int_mm``), the activations quantized per token (absmax / 127) when called
    and the weights per output channel, both scales f32."""

    @staticmethod
    def _scales(out_features: int, dtype: torch.dtype,
                device: torch.device | str) -> torch.Tensor:
        return torch.ones(out_features, dtype=torch.float32, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).float()
        x_scale = flat.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / self.QMAX
        x_int8 = torch.round(flat / x_scale).clamp(-128, 127).to(torch.int8)
        sums = torch._int_mm(x_int8, self.weight.t())
        return self._finish((sums.float() * x_scale * self.scales).to(x.dtype), x)


INT4_CODES = 15
"""The largest int4 code: a group's range [min, max] maps onto 0..15."""


class Int4WeightOnlyLinear(nn.Module):
    """``y = x @ w.T + bias`` with ``w = (q - 8) * scale + zero``: codes ``q`` in 0..15
    packed two a byte by ``_convert_weight_to_int4pack_for_cpu`` (``uint8 [N, K/2]``),
    a scale and a zero point per output channel and group of ``group_size`` inputs
    (``scales_and_zeros [K/group, N, 2]`` in the activations' dtype), asymmetric: a
    group's minimum is code 0, its maximum code 15."""

    def __init__(self, in_features: int, out_features: int, bias: nn.Parameter | None,
                 dtype: torch.dtype, group_size: int,
                 device: torch.device | str = "meta") -> None:
        super().__init__()
        if in_features % group_size:
            raise ArchsimError(f"int4 group size {group_size} does not divide the "
                               f"{in_features} input features")
        self.in_features, self.out_features = in_features, out_features
        self.group_size = group_size
        self.register_buffer("weight", torch.zeros(out_features, in_features // 2,
                                                   dtype=torch.uint8, device=device))
        self.register_buffer("scales_and_zeros", torch.zeros(
            in_features // group_size, out_features, 2, dtype=dtype, device=device))
        self.bias = bias

    @classmethod
    def of(cls, linear: nn.Linear, dtype: torch.dtype, group_size: int
           ) -> Int4WeightOnlyLinear:
        """``linear`` quantized per group (on meta: shapes only)."""
        n, k = linear.out_features, linear.in_features
        quantized = cls(k, n, linear.bias, dtype, group_size, linear.weight.device)
        if linear.weight.device.type == "meta":
            return quantized
        groups = linear.weight.detach().float().reshape(n, k // group_size, group_size)
        low, high = groups.amin(dim=-1), groups.amax(dim=-1)
        scale = ((high - low) / INT4_CODES).clamp(min=1e-6).to(dtype).float()
        codes = torch.round((groups - low[..., None]) / scale[..., None]).clamp(0, INT4_CODES)
        zero = (low + 8 * scale).to(dtype)
        quantized.weight.copy_(torch.ops.aten._convert_weight_to_int4pack_for_cpu(
            codes.reshape(n, k).to(torch.int32), 1))
        quantized.scales_and_zeros.copy_(torch.stack([scale.to(dtype), zero], dim=-1)
                                         .transpose(0, 1))
        return quantized

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.weight, self.group_size,
                                                       self.scales_and_zeros)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y + self.bias if self.bias is not None else y


QUANTIZED_LINEAR: dict[str, type[nn.Module]] = {
    "int8": Int8WeightOnlyLinear, "fp8": Fp8Linear, "int4": Int4WeightOnlyLinear,
    "int8-a8": Int8DynamicLinear}
"""The module each weight format (:func:`serving.plan.weight_format`) replaces
``nn.Linear`` with."""


def quantize_weights(module: nn.Module, weights: str, dtype: torch.dtype) -> nn.Module:
    """``module`` with every ``nn.Linear`` in ``weights`` format (in place): ``int8``,
    ``fp8``, ``int4-g<group size>`` or ``int8-a8``."""
    fmt = weight_format(weights)
    key = "int8-a8" if fmt.activations == "int8" else fmt.name
    for name, child in list(module.named_children()):
        if not isinstance(child, nn.Linear):
            quantize_weights(child, weights, dtype)
        elif fmt.name == "int4":
            setattr(module, name, Int4WeightOnlyLinear.of(child, dtype, fmt.group_size))
        else:
            setattr(module, name, QUANTIZED_LINEAR[key].of(child, dtype))
    return module


__all__ = ["E4M3_MAX", "Fp8Linear", "INT4_CODES", "Int4WeightOnlyLinear",
           "Int8DynamicLinear", "Int8WeightOnlyLinear", "QUANTIZED_LINEAR",
           "QuantizedLinear", "WEIGHT_BYTES", "quantize_weights"]
