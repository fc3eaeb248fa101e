"""What tracing a Triton kernel records: per program instance, the operations on
*data* (values read from memory, and everything computed from them) in program order.

Index arithmetic (program ids, ``tl.arange``, pointer offsets, masks) is not recorded:
the interpreter computes it concretely, and it reaches the record only as the pointer
and mask arrays of loads and stores, or as a constant operand of a data operation.
Each recorded value has an id; operands that are not recorded values are constants,
held as arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compiler.ir.dtypes import DType

# Triton scalar type names -> IR dtypes.
TL_DTYPES: dict[str, DType] = {
    "fp32": DType.f32, "fp16": DType.f16, "bf16": DType.bf16, "int8": DType.i8,
    "int32": DType.i32, "int64": DType.i64, "int1": DType.bool,
}


@dataclass(frozen=True)
class Const:
    """A constant operand: an index-derived array (a causal mask, ``tl.zeros``, a splat
    scalar argument) known at trace time."""

    array: np.ndarray
    dtype: DType

    @property
    def uniform(self) -> bool:
        flat = self.array.reshape(-1)
        return flat.size > 0 and bool(np.all(flat == flat[0]))

    @property
    def value(self) -> float:
        return float(self.array.reshape(-1)[0])


Operand = int | Const
"""A recorded value's id, or a constant."""


@dataclass(frozen=True)
class TraceOp:
    """One operation on data. ``kind`` keys the lowering table; ``out`` is the id of
    the value it defines (None for stores); ``attrs`` holds what the kind needs (pointer
    offsets, masks, an axis...)."""

    kind: str
    out: int | None
    args: tuple[Operand, ...]
    shape: tuple[int, ...]
    dtype: DType | None
    attrs: dict[str, Any]
    line: int
    where: str = ""
    """``kernel NAME (file:line[, in helper])`` of the construct, for errors."""


@dataclass
class ProgramTrace:
    """The recorded operations of one program instance (grid point)."""

    pid: tuple[int, int, int]
    ops: list[TraceOp] = field(default_factory=list)


@dataclass(frozen=True)
class Pointer:
    """A kernel argument that is a tensor: where it lives in the traced address space."""

    name: str
    base: int
    shape: tuple[int, ...]
    dtype: DType

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def end(self) -> int:
        return self.base + self.numel * self.dtype.itemsize


@dataclass
class KernelTrace:
    """A whole launch: the kernel's name and file, its tensor arguments, the grid and
    one :class:`ProgramTrace` per program instance."""

    name: str
    filename: str
    pointers: tuple[Pointer, ...]
    grid: tuple[int, int, int]
    programs: list[ProgramTrace]
    consulted: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Arguments whose values the trace was specialized to -> what they decided (loop
    bounds, branches, addresses); empty for a trace that holds for any data."""

    def written(self) -> tuple[str, ...]:
        """Tensor arguments some program stores to, in argument order."""
        names = {op.attrs["access"].pointer for program in self.programs for op in program.ops
                 if op.kind == "store" and op.attrs["access"] is not None}
        return tuple(p.name for p in self.pointers if p.name in names)


def ir_dtype(tl_dtype: Any) -> DType | None:
    """The IR dtype of a Triton dtype (None for pointers and unsupported types)."""
    return TL_DTYPES.get(getattr(tl_dtype, "name", str(tl_dtype)))
