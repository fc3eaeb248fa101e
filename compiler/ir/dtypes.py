"""Element types of the scheduled IR.

A closed set. Each dtype knows its size and the numpy dtype that stores it; bf16 has
no numpy type and is stored as its raw 16-bit pattern (``uint16``), converted by
:mod:`compiler.ir.bf16` when computed on; the 8-bit floats e4m3 (``float8_e4m3fn``) and
e5m2 (``float8_e5m2``) likewise as ``uint8``, converted by :mod:`compiler.ir.fp8`.
"""

from __future__ import annotations

import enum

import numpy as np


class DType(enum.Enum):
    f32 = "f32"
    f16 = "f16"
    bf16 = "bf16"
    e4m3 = "e4m3"
    e5m2 = "e5m2"
    i8 = "i8"
    u8 = "u8"  # unsigned bytes: u8 x i8 matmuls, packed int4 weights (two a byte)
    i32 = "i32"
    i64 = "i64"
    bool = "bool"

    __hash__ = object.__hash__  # members are singletons; Enum's own hash runs in Python

    itemsize: int
    """Bytes per element (set below for every member; a plain attribute because it
    sits on the simulator's hot path)."""

    @property
    def storage(self) -> np.dtype:
        """The numpy dtype holding this type's bytes (raw bits for bf16)."""
        return _STORAGE[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.f32, DType.f16, DType.bf16, DType.e4m3, DType.e5m2)

    @property
    def is_int8(self) -> bool:
        """An 8-bit integer, signed or unsigned: the arrays' int8 mode multiplies either
        (u8 x i8 is what x86 VNNI and torchao's CPU path feed ``torch._int_mm``)."""
        return self in (DType.i8, DType.u8)

    @property
    def rate_name(self) -> str:
        """The name of this dtype's matrix rate (``core.matrix.rates``): ``fp8`` for
        both 8-bit floats, ``i8`` for both 8-bit integers, else the dtype's own name."""
        if self in (DType.e4m3, DType.e5m2):
            return "fp8"
        return "i8" if self is DType.u8 else self.value

    @classmethod
    def parse(cls, text: str) -> "DType":
        try:
            return cls(text)
        except ValueError:
            known = ", ".join(d.value for d in cls)
            raise ValueError(f"unknown dtype {text!r} (known: {known})") from None

    def __str__(self) -> str:
        return self.value


_ITEMSIZE = {
    DType.f32: 4, DType.f16: 2, DType.bf16: 2, DType.e4m3: 1, DType.e5m2: 1, DType.i8: 1,
    DType.u8: 1, DType.i32: 4, DType.i64: 8, DType.bool: 1,
}

_STORAGE = {
    DType.f32: np.dtype(np.float32), DType.f16: np.dtype(np.float16),
    DType.bf16: np.dtype(np.uint16), DType.e4m3: np.dtype(np.uint8),
    DType.e5m2: np.dtype(np.uint8), DType.i8: np.dtype(np.int8),
    DType.u8: np.dtype(np.uint8), DType.i32: np.dtype(np.int32), DType.i64: np.dtype(np.int64),
    DType.bool: np.dtype(np.bool_),
}

for _member in DType:
    _member.itemsize = _ITEMSIZE[_member]
