"""Conversions between torch dtypes and IR dtypes (the only place that maps them)."""

from __future__ import annotations

import numpy as np
import torch

from archsim.errors import LoweringError
from compiler.ir.dtypes import DType

TORCH_TO_IR: dict[torch.dtype, DType] = {
    torch.float32: DType.f32, torch.float16: DType.f16, torch.bfloat16: DType.bf16,
    torch.float8_e4m3fn: DType.e4m3, torch.float8_e5m2: DType.e5m2,
    torch.int8: DType.i8, torch.uint8: DType.u8, torch.int32: DType.i32, torch.int64: DType.i64,
    torch.bool: DType.bool,
}
IR_TO_TORCH: dict[DType, torch.dtype] = {v: k for k, v in TORCH_TO_IR.items()}


def ir_dtype(dtype: torch.dtype, where: str = "") -> DType:
    try:
        return TORCH_TO_IR[dtype]
    except KeyError:
        raise LoweringError(f"{where}: dtype {dtype} has no IR equivalent "
                            f"(supported: {', '.join(map(str, TORCH_TO_IR))})") from None


def torch_dtype(dtype: DType) -> torch.dtype:
    return IR_TO_TORCH[dtype]


def to_torch(array: np.ndarray, dtype: DType) -> torch.Tensor:
    """Simulator values (bf16 as float32) -> a torch tensor of ``dtype``."""
    return torch.from_numpy(np.ascontiguousarray(array)).to(torch_dtype(dtype))


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A torch tensor -> numpy values the simulator accepts (bf16 and fp8 widened to
    float32: exact)."""
    tensor = tensor.detach().cpu()
    if tensor.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        tensor = tensor.float()
    return tensor.contiguous().numpy()
