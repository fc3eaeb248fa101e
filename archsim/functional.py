"""Functional mode: commands execute on real data in simulated DRAM and SRAM.

DRAM holds one numpy array per tensor; each SRAM space is a byte buffer viewed through
a command's regions. Values are computed in f32 for 16-bit floats and rounded back to
the destination dtype, as torch does on CPU. bf16 is stored as raw bits and converted
with :mod:`compiler.ir.bf16`. Dispatch is a table from op class to executor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from archsim.errors import SimulationError
from compiler.ir import bf16
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, DramTensor, Scalar, SramRef
from compiler.ir.ops import (
    Binary,
    BinaryKind,
    Cast,
    Command,
    Copy,
    Gather,
    HostOp,
    HostTransfer,
    Load,
    MatMul,
    Op,
    Reduce,
    ReduceKind,
    Select,
    Store,
    Transpose,
    Unary,
    UnaryKind,
    VCopy,
)

HostFunction = Callable[..., Any]
"""Computes a host op: takes input values (numpy) and returns one array or a tuple."""


# ---------------------------------------------------------------- value conversion


def to_values(stored: np.ndarray, dtype: DType) -> np.ndarray:
    """Stored array -> values to compute on (16-bit floats widened to f32)."""
    if dtype is DType.bf16:
        return bf16.to_f32(stored)
    if dtype is DType.f16:
        return stored.astype(np.float32)
    return stored


def to_stored(values: np.ndarray | float, dtype: DType) -> np.ndarray:
    """Values -> the storage representation of ``dtype`` (rounding as torch does)."""
    values = np.asarray(values)
    if dtype is DType.bf16:
        return bf16.from_f32(values.astype(np.float32))
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
                self.dram[name] = self._input(t, inputs[name])
            elif t.role in ("in", "inout"):
                raise SimulationError(f"input tensor {name!r} ({t.role}) was not given")
            else:
                self.dram[name] = np.zeros(t.shape, t.dtype.storage)

    @staticmethod
    def _input(t: DramTensor, value: Any) -> np.ndarray:
        array = np.asarray(value)
        if tuple(array.shape) != t.shape:
            raise SimulationError(f"input {t.name!r}: shape {list(array.shape)} does not match "
                                  f"the program's {list(t.shape)}")
        if t.dtype is DType.bf16 and array.dtype == np.uint16:
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

    def read(self, ref: SramRef) -> np.ndarray:
        return to_values(self.view(ref), ref.dtype)

    def write(self, ref: SramRef, values: np.ndarray) -> None:
        if getattr(values, "shape", None) != ref.shape:
            values = np.broadcast_to(values, ref.shape)
        self.view(ref)[...] = to_stored(values, ref.dtype)

    def box(self, ref: DramRef) -> tuple[slice, ...]:
        return tuple(slice(s.start, s.stop, s.step) for s in ref.slices)

    def output_values(self) -> dict[str, np.ndarray]:
        """Final DRAM contents as values (bf16 as float32)."""
        return {name: (bf16.to_f32(a) if self.tensors[name].dtype is DType.bf16 else a.copy())
                for name, a in self.dram.items()}


# ---------------------------------------------------------------- executors


def _operand(memory: Memory, x: SramRef | Scalar) -> np.ndarray | float:
    return x.value if isinstance(x, Scalar) else memory.read(x)


def _load(op: Load, memory: Memory) -> None:
    data = memory.dram[op.src.tensor][memory.box(op.src)]
    memory.view(op.dst)[...] = data.reshape(op.dst.shape)


def _store(op: Store, memory: Memory) -> None:
    box = memory.box(op.dst)
    target = memory.dram[op.dst.tensor]
    target[box] = memory.view(op.src).reshape(target[box].shape)


def _copy(op: Copy | VCopy, memory: Memory) -> None:
    data = memory.view(op.src).copy()
    if data.size == math.prod(op.dst.shape):
        memory.view(op.dst)[...] = data.reshape(op.dst.shape)
    else:
        memory.view(op.dst)[...] = np.broadcast_to(data, op.dst.shape)


def _gather(op: Gather, memory: Memory) -> None:
    """Rows of the table box by index; an index outside the box raises IndexError,
    which the simulator reports as a SimulationError naming the command."""
    table = memory.dram[op.table.tensor][memory.box(op.table)]
    indices = memory.view(op.indices).astype(np.int64)
    bad = np.flatnonzero((indices < 0) | (indices >= table.shape[0]))
    if bad.size:
        i = int(bad[0])
        raise IndexError(f"index {int(indices[i])} (position {i} of field indices) is out of "
                         f"range for the {table.shape[0]} rows of the table box")
    memory.view(op.dst)[...] = table[indices]


def _matmul(op: MatMul, memory: Memory) -> None:
    integer = op.a.dtype is DType.i8
    acc_type = np.int32 if integer else np.float32
    a = memory.read(op.a).astype(acc_type).reshape(-1, op.a.shape[-1])
    b = memory.read(op.b).astype(acc_type)
    product = a @ b
    if op.accumulate:
        product = memory.read(op.out).astype(acc_type) + product
    memory.write(op.out, product)


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


def _with_float32_scalars(x: np.ndarray | float, other: np.ndarray | float) -> Any:
    """Keep f32 math in f32 when the other operand is a Python scalar."""
    if isinstance(x, float) and isinstance(other, np.ndarray) and other.dtype == np.float32:
        return np.float32(x)
    return x


def _unary(op: Unary, memory: Memory) -> None:
    with np.errstate(all="ignore"):
        memory.write(op.dst, UNARY[op.kind](memory.read(op.src)))


def _binary(op: Binary, memory: Memory) -> None:
    a, b = _operand(memory, op.a), _operand(memory, op.b)
    a, b = _with_float32_scalars(a, b), _with_float32_scalars(b, a)
    with np.errstate(all="ignore"):
        memory.write(op.dst, BINARY[op.kind](a, b))


def _select(op: Select, memory: Memory) -> None:
    a, b = _operand(memory, op.a), _operand(memory, op.b)
    memory.write(op.dst, np.where(memory.read(op.cond), a, b))


def _cast(op: Cast, memory: Memory) -> None:
    memory.write(op.dst, memory.read(op.src))


def _reduce(op: Reduce, memory: Memory) -> None:
    values = memory.read(op.src)
    kwargs: dict[str, Any] = {"axis": op.axis, "keepdims": True}
    if op.kind in (ReduceKind.sum, ReduceKind.mean) and values.dtype.kind == "f":
        kwargs["dtype"] = np.float32
    memory.write(op.dst, REDUCE[op.kind](values, **kwargs))


def _transpose(op: Transpose, memory: Memory) -> None:
    memory.write(op.dst, np.transpose(memory.read(op.src), op.perm))


def _host_transfer(op: HostTransfer, memory: Memory) -> None:
    """Timing only: DRAM already holds the caller's inputs."""


EXECUTORS: dict[type[Op], Callable[[Any, Memory], None]] = {
    Load: _load,
    Store: _store,
    Copy: _copy,
    Gather: _gather,
    VCopy: _copy,
    MatMul: _matmul,
    Unary: _unary,
    Binary: _binary,
    Select: _select,
    Cast: _cast,
    Reduce: _reduce,
    Transpose: _transpose,
    HostTransfer: _host_transfer,
}


def run_host_op(op: HostOp, memory: Memory, host_functions: Mapping[str, HostFunction]) -> None:
    fn = host_functions.get(op.name)
    if fn is None:
        known = ", ".join(sorted(host_functions)) or "none"
        raise SimulationError(f"host op {op.name!r} has no host function for functional mode "
                              f"(given: {known})")
    args = [to_values(memory.dram[name], memory.tensors[name].dtype) for name in op.inputs]
    results = fn(*args)
    if not isinstance(results, (tuple, list)):
        results = (results,)
    if len(results) != len(op.outputs):
        raise SimulationError(f"host op {op.name!r} returned {len(results)} values for "
                              f"{len(op.outputs)} outputs")
    for name, value in zip(op.outputs, results):
        t = memory.tensors[name]
        memory.dram[name] = np.ascontiguousarray(
            to_stored(np.broadcast_to(np.asarray(value), t.shape), t.dtype))


class FunctionalExecutor:
    """Executes commands on a :class:`Memory`."""

    def __init__(self, memory: Memory, host_functions: Mapping[str, HostFunction]) -> None:
        self.memory = memory
        self.host_functions = host_functions

    def execute(self, op: Op) -> None:
        if isinstance(op, HostOp):
            run_host_op(op, self.memory, self.host_functions)
            return
        EXECUTORS[type(op)](op, self.memory)

    def execute_command(self, command: Command) -> None:
        """Execute one command; a failure is a SimulationError naming it (cause chained)."""
        try:
            self.execute(command.op)
        except SimulationError:
            raise
        except Exception as exc:
            raise SimulationError(f"command {command.id} ({command.engine} "
                                  f"{command.op.mnemonic}) failed in functional mode: "
                                  f"{type(exc).__name__}: {exc}") from exc
