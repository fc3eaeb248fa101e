"""bfloat16 <-> float32 conversion in numpy (numpy has no bf16 type).

bf16 values are kept as their raw bit patterns in ``uint16`` arrays.
Rounding is round-to-nearest-even, as torch does; NaNs stay NaN.
"""

from __future__ import annotations

import numpy as np


def to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen raw bf16 bits (uint16) to float32 values."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def from_f32(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bf16, returning raw bits (uint16)."""
    as_f32 = np.ascontiguousarray(values, dtype=np.float32)
    bits = as_f32.view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    rounded = ((bits + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(as_f32)
    if nan.any():
        rounded[nan] = np.uint16(0x7FC0)
    return rounded
