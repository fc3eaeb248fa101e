"""Functional mode: commands execute on real data in simulated DRAM and SRAM.

DRAM holds one numpy array per tensor; each SRAM space is a byte buffer viewed through
a command's regions. Values are computed in f32 for 16-bit floats and rounded back to
the destination dtype, as torch does on CPU. bf16 is stored as raw bits and converted
with :mod:`compiler.ir.bf16`. Each op kind's numpy function is in a table here;
:mod:`archsim.functional_steps` binds commands to these buffers and runs them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from archsim.errors import HostOpError, SimulationError
from compiler.ir import bf16, fp8
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, DramTensor, SramRef
from compiler.ir.ops import BinaryKind, HostOp, ReduceKind, UnaryKind

HostFunction = Callable[..., Any]
"""Computes a host op: takes input values (numpy) and returns one array or a tuple."""


# ---------------------------------------------------------------- value conversion


FP8_FORMATS: dict[DType, fp8.Fp8Format] = {DType.e4m3: fp8.E4M3, DType.e5m2: fp8.E5M2}
"""The 8-bit floats' formats (stored as raw bits, like bf16)."""
RAW_BITS = (DType.bf16, *FP8_FORMATS)
"""Float dtypes stored as raw bit patterns (numpy has no type for them)."""


def to_values(stored: np.ndarray, dtype: DType) -> np.ndarray:
    """Stored array -> values to compute on (16- and 8-bit floats widened to f32)."""
    if dtype is DType.bf16:
        return bf16.to_f32(stored)
    if dtype in FP8_FORMATS:
        return fp8.to_f32(stored, FP8_FORMATS[dtype])
    if dtype is DType.f16:
        return stored.astype(np.float32)
    return stored


def to_stored(values: np.ndarray | float, dtype: DType) -> np.ndarray:
    """Values -> the storage representation of ``dtype`` (rounding as torch does)."""
    values = np.asarray(values)
    if dtype is DType.bf16:
        return bf16.from_f32(values.astype(np.float32))
    if dtype in FP8_FORMATS:
        return fp8.from_f32(values.astype(np.float32), FP8_FORMATS[dtype])
    if dtype is DType.bool:
        return values.astype(np.bool_)
    return values.astype(dtype.storage)


class Memory:
    """DRAM tensors and SRAM spaces of one functional run."""

    def __init__(self, tensors: Mapping[str, DramTensor], space_sizes: Mapping[str, int],
                 inputs: Mapping[str, Any]) -> None:
        self.tensors = dict(tensors)
        self.space_sizes = dict(space_sizes)
        self.dram: dict[str, np.ndarray] = {}
        self.sram: dict[str, np.ndarray] = {}
        self._views: dict[SramRef, np.ndarray] = {}
        unknown = sorted(set(inputs) - set(tensors))
        if unknown:
            raise SimulationError(f"inputs name unknown DRAM tensors: {', '.join(unknown)} "
                                  f"(tensors: {', '.join(tensors)})")
        for name, t in tensors.items():
            if name in inputs:
                self.dram[name] = self.input_array(t, inputs[name])
            elif t.role in ("in", "inout"):
                raise SimulationError(f"input tensor {name!r} ({t.role}) was not given")
            else:
                self.dram[name] = np.zeros(t.shape, t.dtype.storage)

    @staticmethod
    def input_array(t: DramTensor, value: Any) -> np.ndarray:
        """``value`` as the stored array of input tensor ``t`` (a copy; its shape checked)."""
        array = np.asarray(value)
        if tuple(array.shape) != t.shape:
            raise SimulationError(f"input {t.name!r}: shape {list(array.shape)} does not match "
                                  f"the program's {list(t.shape)}")
        if t.dtype in RAW_BITS and array.dtype == t.dtype.storage:
            return array.copy()
        return np.ascontiguousarray(to_stored(array, t.dtype))

    def space(self, name: str) -> np.ndarray:
        """A space's bytes, allocated on first touch (as many as the program uses)."""
        buf = self.sram.get(name)
        if buf is None:
            buf = self.sram[name] = np.zeros(self.space_sizes[name], np.uint8)
        return buf

    def view(self, ref: SramRef) -> np.ndarray:
        """The region as an array over the space's bytes (made once per region:
        tiled loops touch the same few regions over and over)."""
        view = self._views.get(ref)
        if view is None:
            raw = self.space(ref.space)[ref.offset:ref.end].view(ref.dtype.storage)
            if ref.strides is None:
                view = raw.reshape(ref.shape)
            else:
                view = np.lib.stride_tricks.as_strided(
                    raw, ref.shape, tuple(s * raw.itemsize for s in ref.strides))
            self._views[ref] = view
        return view

    def box(self, ref: DramRef) -> tuple[slice, ...]:
        return tuple(slice(s.start, s.stop, s.step) for s in ref.slices)

    def output_values(self, copy: bool = True) -> dict[str, np.ndarray]:
        """Final DRAM contents as values (bf16 and fp8 as float32); ``copy=False`` hands
        out the arrays themselves (for a caller that drops this memory's arrays
        afterwards)."""
        return {name: (to_values(a, self.tensors[name].dtype)
                       if self.tensors[name].dtype in RAW_BITS else a.copy() if copy else a)
                for name, a in self.dram.items()}


# ---------------------------------------------------------------- numpy functions per kind


def _erf(x: np.ndarray) -> np.ndarray:
    """erf from the Numerical Recipes erfc approximation (fractional error < 1.2e-7,
    below f32 resolution); numpy has no erf."""
    x64 = np.asarray(x, dtype=np.float64)
    z = np.abs(x64)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = (-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277)))))))))
    erfc = t * np.exp(poly)
    return np.where(x64 >= 0, 1.0 - erfc, erfc - 1.0)


def _gelu(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))).astype(np.float32)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + np.tanh(inner))


UNARY: dict[UnaryKind, Callable[[np.ndarray], np.ndarray]] = {
    UnaryKind.neg: np.negative,
    UnaryKind.abs: np.abs,
    UnaryKind.relu: lambda x: np.maximum(x, 0),
    UnaryKind.exp: np.exp,
    UnaryKind.log: np.log,
    UnaryKind.sqrt: np.sqrt,
    UnaryKind.rsqrt: lambda x: 1.0 / np.sqrt(x),
    UnaryKind.reciprocal: lambda x: 1.0 / x,
    UnaryKind.tanh: np.tanh,
    UnaryKind.sigmoid: lambda x: 1.0 / (1.0 + np.exp(-x)),
    UnaryKind.gelu: _gelu,
    UnaryKind.gelu_tanh: _gelu_tanh,
    UnaryKind.silu: lambda x: x / (1.0 + np.exp(-x)),
    UnaryKind.sin: np.sin,
    UnaryKind.cos: np.cos,
    UnaryKind.erf: lambda x: _erf(x).astype(np.float32),
    UnaryKind.square: np.square,
    UnaryKind.logical_not: np.logical_not,
    UnaryKind.tan: np.tan,
    UnaryKind.acos: np.arccos,
    UnaryKind.asin: np.arcsin,
    UnaryKind.atan: np.arctan,
    UnaryKind.sinh: np.sinh,
    UnaryKind.cosh: np.cosh,
    UnaryKind.asinh: np.arcsinh,
    UnaryKind.acosh: np.arccosh,
    UnaryKind.atanh: np.arctanh,
    UnaryKind.expm1: np.expm1,
    UnaryKind.log1p: np.log1p,
    UnaryKind.log2: np.log2,
    UnaryKind.log10: np.log10,
    UnaryKind.exp2: np.exp2,
    UnaryKind.sign: np.sign,
    UnaryKind.trunc: np.trunc,
    UnaryKind.floor: np.floor,
    UnaryKind.ceil: np.ceil,
    UnaryKind.round: np.round,
    UnaryKind.frac: lambda x: x - np.trunc(x),
}

BINARY: dict[BinaryKind, Callable[[Any, Any], np.ndarray]] = {
    BinaryKind.add: np.add,
    BinaryKind.sub: np.subtract,
    BinaryKind.mul: np.multiply,
    BinaryKind.div: np.true_divide,
    BinaryKind.max: np.maximum,
    BinaryKind.min: np.minimum,
    BinaryKind.pow: np.power,
    BinaryKind.atan2: np.arctan2,
    BinaryKind.copysign: np.copysign,
    BinaryKind.remainder: np.remainder,
    BinaryKind.fmod: np.fmod,
    BinaryKind.hypot: np.hypot,
    BinaryKind.logaddexp: np.logaddexp,
    BinaryKind.eq: np.equal,
    BinaryKind.ne: np.not_equal,
    BinaryKind.lt: np.less,
    BinaryKind.le: np.less_equal,
    BinaryKind.gt: np.greater,
    BinaryKind.ge: np.greater_equal,
    BinaryKind.logical_and: np.logical_and,
    BinaryKind.logical_or: np.logical_or,
}

REDUCE: dict[ReduceKind, Callable[..., np.ndarray]] = {
    ReduceKind.sum: np.sum,
    ReduceKind.max: np.max,
    ReduceKind.min: np.min,
    ReduceKind.mean: np.mean,
}


def run_host_op(op: HostOp, memory: Memory, host_functions: Mapping[str, HostFunction]) -> None:
    fn = host_functions.get(op.name)
    if fn is None:
        known = ", ".join(sorted(host_functions)) or "none"
        raise SimulationError(f"host op {op.name!r} has no host function for functional mode "
                              f"(given: {known})")
    args = [to_values(memory.dram[name], memory.tensors[name].dtype) for name in op.inputs]
    try:
        results = fn(*args)
    except Exception as exc:
        raise HostOpError(op.name, exc) from exc
    if not isinstance(results, (tuple, list)):
        results = (results,)
    if len(results) != len(op.outputs):
        raise SimulationError(f"host op {op.name!r} returned {len(results)} values for "
                              f"{len(op.outputs)} outputs")
    for name, value in zip(op.outputs, results):
        t = memory.tensors[name]
        memory.dram[name] = np.ascontiguousarray(
            to_stored(np.broadcast_to(np.asarray(value), t.shape), t.dtype))
