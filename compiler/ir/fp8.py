"""8-bit floats (OCP FP8: e4m3fn and e5m2) <-> float32 in numpy (numpy has no fp8 type).

fp8 values are kept as their raw bit patterns in ``uint8`` arrays, as bf16 keeps its in
``uint16`` (:mod:`compiler.ir.bf16`). Encoding rounds to nearest, ties to even, as
torch does, with torch's overflow rules:

- e4m3fn (4 exponent bits, bias 7, 3 mantissa bits; no infinities, S.1111.111 is NaN):
  saturates, so anything beyond the largest finite value 448 (infinities included)
  becomes +-448; NaN stays NaN.
- e5m2 (5 exponent bits, bias 15, 2 mantissa bits; IEEE-like with infinities): values
  that round past the largest finite 57344 become +-inf; NaN stays NaN.

Source: the OCP 8-bit floating point specification (v1.0, 2023) for the formats;
torch's ``Tensor.to(torch.float8_*)`` for the rounding and overflow behaviour (checked
on every code and on random values in tests/quant/test_fp8.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Fp8Format:
    """One fp8 format's layout and overflow rule."""

    exponent_bits: int
    mantissa_bits: int
    saturates: bool
    """Overflow goes to the largest finite value (e4m3fn) instead of infinity (e5m2)."""

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    def magnitude(self, code: int) -> float:
        """The value of a 7-bit unsigned code read as a plain binary float (subnormals
        at exponent 0, no special cases): the rounding grid."""
        exponent, mantissa = code >> self.mantissa_bits, code & ((1 << self.mantissa_bits) - 1)
        scale = 2.0 ** (1 - self.bias - self.mantissa_bits)
        if exponent == 0:
            return mantissa * scale
        return ((1 << self.mantissa_bits) + mantissa) * scale * 2.0 ** (exponent - 1)


E4M3 = Fp8Format(4, 3, saturates=True)
E5M2 = Fp8Format(5, 2, saturates=False)


def _special(fmt: Fp8Format, code: int) -> float | None:
    """The value of a special 7-bit code (NaN, infinity), or None for a finite one."""
    if fmt.saturates:
        return float("nan") if code == 0x7F else None
    if code >> fmt.mantissa_bits == (1 << fmt.exponent_bits) - 1:
        return float("inf") if code & ((1 << fmt.mantissa_bits) - 1) == 0 else float("nan")
    return None


def _tables(fmt: Fp8Format) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(decode table of all 256 codes as float32, finite magnitudes by code, largest
    finite code, overflow code)."""
    values = []
    for code in range(128):
        special = _special(fmt, code)
        values.append(fmt.magnitude(code) if special is None else special)
    finite = [code for code in range(128) if _special(fmt, code) is None]
    top = finite[-1]
    decode = np.array(values + [-v for v in values], dtype=np.float32)
    grid = np.array([fmt.magnitude(code) for code in range(top + 2)], dtype=np.float64)
    overflow = top if fmt.saturates else top + 1  # +inf follows the largest finite
    return decode, grid, top, overflow


_TABLES = {fmt: _tables(fmt) for fmt in (E4M3, E5M2)}


def to_f32(bits: np.ndarray, fmt: Fp8Format) -> np.ndarray:
    """Widen raw fp8 bits (uint8) to float32 values."""
    return _TABLES[fmt][0][np.asarray(bits, dtype=np.uint8)]


def from_f32(values: np.ndarray, fmt: Fp8Format) -> np.ndarray:
    """Round float32 values to fp8 (nearest, ties to even), returning raw bits (uint8)."""
    _, grid, top, overflow = _TABLES[fmt]
    x = np.asarray(values, dtype=np.float32).astype(np.float64)
    sign = np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    mag = np.abs(x)
    nan = np.isnan(mag)
    mag = np.where(nan, 0.0, mag)
    # neighbours on the grid (the code after the largest finite one is the overflow
    # point: 480 for e4m3fn, 65536 = inf for e5m2)
    hi = np.clip(np.searchsorted(grid, mag, side="left"), 0, top + 1)
    lo = np.clip(hi - 1, 0, None)
    below, above = mag - grid[lo], grid[hi] - mag
    take_hi = (above < below) | ((above == below) & (hi % 2 == 0))
    code = np.where(mag == grid[hi], hi, np.where(take_hi, hi, lo))
    code = np.where((code > top) | (mag > grid[top + 1]), overflow, code)
    nan_code = 0x7F
    code = np.where(nan, nan_code, code).astype(np.uint8)
    return code | sign


__all__ = ["E4M3", "E5M2", "Fp8Format", "from_f32", "to_f32"]
