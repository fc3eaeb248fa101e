"""The scheduled IR: pure data, no torch. See DESIGN.md "The scheduled IR"."""

from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, DramTensor, Scalar, Slice, SramRef, numel, sram_space
from compiler.ir.ops import (
    ALL_OPS,
    Binary,
    BinaryKind,
    Cast,
    Command,
    Copy,
    Dequant,
    Dequantize,
    Gather,
    HostOp,
    HostTransfer,
    Load,
    MatMul,
    MulAdd,
    Op,
    Program,
    Reduce,
    ReduceKind,
    Select,
    Store,
    Transpose,
    Unary,
    UnaryKind,
    VCopy,
    VectorMatMul,
    engine_core,
    engine_kind,
)

__all__ = [
    "ALL_OPS", "Binary", "BinaryKind", "Cast", "Command", "Copy", "Dequant", "Dequantize", "DType", "DramRef",
    "DramTensor", "Gather", "HostOp", "HostTransfer", "Load", "MatMul", "MulAdd", "Op", "Program", "Reduce",
    "ReduceKind", "Scalar", "Select", "Slice", "SramRef", "Store", "Transpose", "Unary",
    "UnaryKind", "VCopy", "VectorMatMul", "engine_core", "engine_kind", "numel", "sram_space",
]
