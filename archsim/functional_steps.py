"""Functional execution of commands, each bound once to the buffers it touches.

A *binder* turns one op and a :class:`~archsim.functional.Memory` into a *step*: a
closure with the op's SRAM views, value conversions and numpy function resolved, so
running it is only the arithmetic. The simulator's functional mode binds and runs a
command when it completes; :class:`BoundProgram` binds a whole program once and runs it
again on new inputs (an eager device replaying a cached op: the buffers stay, only the
data changes). Both go through the same binders, so they compute the same numbers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from archsim.errors import SimulationError
from archsim.functional import (BINARY, REDUCE, UNARY, HostFunction, Memory, run_host_op,
                                to_stored, to_values)
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramTensor, Scalar, SramRef
from compiler.ir.ops import (Binary, Cast, Command, Copy, Dequant, Dequantize, Gather, HostOp,
                             HostTransfer, Load, MatMul, MulAdd, Op, Reduce, ReduceKind, Select, Store,
                             Transpose, Unary, VCopy, VectorMatMul)

Step = Callable[[], None]
Binder = Callable[[Any, Memory], Step]

_WIDENED = (DType.bf16, DType.f16, DType.e4m3, DType.e5m2)


def _reader(memory: Memory, x: SramRef | Scalar) -> Callable[[], Any]:
    """A function returning an operand's current values (a scalar stays a number)."""
    if isinstance(x, Scalar):
        value = x.value
        return lambda: value
    view, dtype = memory.view(x), x.dtype
    if dtype in _WIDENED:
        return lambda: to_values(view, dtype)
    return lambda: view


def _writer(memory: Memory, ref: SramRef) -> Callable[[Any], None]:
    """A function storing values into a region (broadcast to its shape, rounded to its
    dtype as torch does)."""
    view, shape, dtype = memory.view(ref), ref.shape, ref.dtype
    storage = None if dtype in _WIDENED or dtype is DType.bool else np.dtype(dtype.storage)

    def write(values: Any) -> None:
        if getattr(values, "shape", None) != shape:
            values = np.broadcast_to(values, shape)
        if storage is not None and values.dtype == storage:  # (np.dtype == None: float64)
            view[...] = values
        else:
            view[...] = to_stored(values, dtype)
    return write


def _with_float32_scalars(x: Any, other: Any) -> Any:
    """Keep f32 math in f32 when the other operand is a Python scalar."""
    if isinstance(x, float) and isinstance(other, np.ndarray) and other.dtype == np.float32:
        return np.float32(x)
    return x


def _bind_load(op: Load, memory: Memory) -> Step:
    dram, name, box = memory.dram, op.src.tensor, memory.box(op.src)
    dst, shape = memory.view(op.dst), op.dst.shape

    def load() -> None:
        dst[...] = dram[name][box].reshape(shape)
    return load


def _bind_store(op: Store, memory: Memory) -> Step:
    dram, name, box = memory.dram, op.dst.tensor, memory.box(op.dst)
    src = memory.view(op.src)

    def store() -> None:
        target = dram[name]
        target[box] = src.reshape(target[box].shape)
    return store


def _bind_copy(op: Copy | VCopy, memory: Memory) -> Step:
    src, dst, shape = memory.view(op.src), memory.view(op.dst), op.dst.shape
    same_size = math.prod(op.src.shape) == math.prod(shape)

    def copy() -> None:
        data = src.copy()
        dst[...] = data.reshape(shape) if same_size else np.broadcast_to(data, shape)
    return copy


def _bind_gather(op: Gather, memory: Memory) -> Step:
    """Rows of the table box by index; an index outside the box raises IndexError,
    which is reported as a SimulationError naming the command."""
    dram, name, box = memory.dram, op.table.tensor, memory.box(op.table)
    indices_view, dst = memory.view(op.indices), memory.view(op.dst)

    def gather() -> None:
        table = dram[name][box]
        indices = indices_view.astype(np.int64)
        bad = np.flatnonzero((indices < 0) | (indices >= table.shape[0]))
        if bad.size:
            i = int(bad[0])
            raise IndexError(f"index {int(indices[i])} (position {i} of field indices) is "
                             f"out of range for the {table.shape[0]} rows of the table box")
        dst[...] = table[indices]
    return gather


@functools.lru_cache(maxsize=None)
def _nibble_map(nibbles: str, h: int) -> tuple[np.ndarray, np.ndarray]:
    """For a block of ``h`` bytes in layout ``nibbles``, each of its ``2h`` columns'
    byte and bit shift (worked out once per layout, not per command)."""
    where = [Dequant(1, 0, nibbles).byte_of(r, h) for r in range(2 * h)]
    return (np.array([c for c, _ in where]),
            np.array([4 * nibble for _, nibble in where], dtype=np.uint8))


def dequantized(b: np.ndarray, scales: np.ndarray, dequant: Dequant,
                dtype: DType) -> np.ndarray:
    """The ``[k, n]`` weights an array's input path makes of ``b`` (values ``[k, n]``,
    or packed int4 bytes ``[blocks, k, h]``) and their groups' scales (and zeros)
    ``[groups, n, 1 or 2]`` (f32 values), rounded to the array's input ``dtype``
    (:class:`~compiler.ir.ops.Dequant`)."""
    if dequant.nibbles:
        blocks, k, h = b.shape
        columns, shifts = _nibble_map(dequant.nibbles, h)
        codes = (b[:, :, columns] >> shifts) & 15  # [blocks, k, 2h]
        values = codes.transpose(1, 0, 2).reshape(k, blocks * 2 * h).astype(np.float32) - 8
    else:
        values = b.astype(np.float32)
    rows = (dequant.phase + np.arange(values.shape[0])) // dequant.group
    plane = scales[rows]  # [k, n, 1 or 2]
    weights = values * plane[..., 0]
    if plane.shape[-1] == 2:
        weights = weights + plane[..., 1]
    return to_values(to_stored(weights.astype(np.float32), dtype), dtype)


def _bind_matmul(op: MatMul | VectorMatMul, memory: Memory) -> Step:
    """An array's matmul; or the vector unit's, whose dequantized weights stay f32 (it
    applies the scales to its sums, :class:`~compiler.ir.ops.VectorMatMul`)."""
    integer = op.a.dtype.is_int8
    read_a, read_b, k = _reader(memory, op.a), _reader(memory, op.b), op.a.shape[-1]
    if op.dequant is not None and op.scales is not None:
        read_stored, read_scales, dequant = read_b, _reader(memory, op.scales), op.dequant
        dtype = op.a.dtype if type(op) is MatMul else DType.f32

        def read_b() -> np.ndarray:
            return dequantized(read_stored(), read_scales(), dequant, dtype)
    read_out, write = _reader(memory, op.out), _writer(memory, op.out)
    accumulate = op.accumulate

    def matmul() -> None:
        if integer:  # int8 products summed in float64 are exact (|sum| < 2**53) and
            # take BLAS; numpy's integer matmul has none (100x slower)
            product = (read_a().astype(np.float64).reshape(-1, k)
                       @ read_b().astype(np.float64)).astype(np.int64)
            if accumulate:
                product += read_out().astype(np.int64)
            write(product.astype(np.int32))  # wraps as an int32 accumulator does
            return
        product = read_a().astype(np.float32).reshape(-1, k) @ read_b().astype(np.float32)
        if accumulate:
            product = read_out().astype(np.float32) + product
        write(product)
    return matmul


def _in_place(dst: SramRef, *operands: SramRef | Scalar) -> bool:
    """Whether a ufunc can write straight into ``dst``: f32 everywhere, same shapes
    (a float scalar is taken as f32, as the general path does)."""
    if dst.dtype is not DType.f32 or all(isinstance(x, Scalar) for x in operands):
        return False
    return all(isinstance(x.value, float) if isinstance(x, Scalar)
               else x.dtype is DType.f32 and x.shape == dst.shape for x in operands)


def _bind_unary(op: Unary, memory: Memory) -> Step:
    fn, read, write = UNARY[op.kind], _reader(memory, op.src), _writer(memory, op.dst)
    if isinstance(fn, np.ufunc) and _in_place(op.dst, op.src):
        src, dst = memory.view(op.src), memory.view(op.dst)
        return lambda: fn(src, out=dst)
    return lambda: write(fn(read()))


def _bind_binary(op: Binary, memory: Memory) -> Step:
    fn, write = BINARY[op.kind], _writer(memory, op.dst)
    if _in_place(op.dst, op.a, op.b):
        a, b, dst = (np.float32(x.value) if isinstance(x, Scalar) else memory.view(x)
                     for x in (op.a, op.b, op.dst))
        return lambda: fn(a, b, out=dst)
    read_a, read_b = _reader(memory, op.a), _reader(memory, op.b)

    def binary() -> None:
        a, b = read_a(), read_b()
        write(fn(_with_float32_scalars(a, b), _with_float32_scalars(b, a)))
    return binary


def _bind_muladd(op: MulAdd, memory: Memory) -> Step:
    read_acc, read_a, read_b = (_reader(memory, x) for x in (op.acc, op.a, op.b))
    write, dtype = _writer(memory, op.dst), op.dst.dtype

    def muladd() -> None:
        a, b = read_a(), read_b()
        product = np.multiply(a, _with_float32_scalars(b, a))
        write(read_acc() + to_values(to_stored(product, dtype), dtype))
    return muladd


def _bind_select(op: Select, memory: Memory) -> Step:
    cond, write = _reader(memory, op.cond), _writer(memory, op.dst)
    read_a, read_b = _reader(memory, op.a), _reader(memory, op.b)
    return lambda: write(np.where(cond(), read_a(), read_b()))


def _bind_cast(op: Cast, memory: Memory) -> Step:
    read, write = _reader(memory, op.src), _writer(memory, op.dst)
    return lambda: write(read())


def _bind_dequantize(op: Dequantize, memory: Memory) -> Step:
    read, read_scales = _reader(memory, op.src), _reader(memory, op.scales)
    write, dequant, dtype = _writer(memory, op.dst), op.dequant, op.dst.dtype
    return lambda: write(dequantized(read(), read_scales(), dequant, dtype))


def _bind_reduce(op: Reduce, memory: Memory) -> Step:
    fn, read, write = REDUCE[op.kind], _reader(memory, op.src), _writer(memory, op.dst)
    summing = op.kind in (ReduceKind.sum, ReduceKind.mean)
    axis = op.axis

    def reduce() -> None:
        values = read()
        if summing and values.dtype.kind == "f":
            write(fn(values, axis=axis, keepdims=True, dtype=np.float32))
        else:
            write(fn(values, axis=axis, keepdims=True))
    return reduce


def _bind_transpose(op: Transpose, memory: Memory) -> Step:
    read, write, perm = _reader(memory, op.src), _writer(memory, op.dst), op.perm
    return lambda: write(np.transpose(read(), perm))


def _bind_host_transfer(op: HostTransfer, memory: Memory) -> Step:
    """Timing only: DRAM already holds the caller's inputs."""
    return lambda: None


BINDERS: dict[type[Op], Binder] = {
    Load: _bind_load,
    Store: _bind_store,
    Copy: _bind_copy,
    VCopy: _bind_copy,
    Gather: _bind_gather,
    MatMul: _bind_matmul,
    VectorMatMul: _bind_matmul,
    Unary: _bind_unary,
    Binary: _bind_binary,
    MulAdd: _bind_muladd,
    Select: _bind_select,
    Cast: _bind_cast,
    Dequantize: _bind_dequantize,
    Reduce: _bind_reduce,
    Transpose: _bind_transpose,
    HostTransfer: _bind_host_transfer,
}


def bind(op: Op, memory: Memory, host_functions: Mapping[str, HostFunction]) -> Step:
    """One op as a step over ``memory`` (a host op calls its host function)."""
    if isinstance(op, HostOp):
        return lambda: run_host_op(op, memory, host_functions)
    return BINDERS[type(op)](op, memory)


def _failed(command: Command, exc: Exception) -> SimulationError:
    return SimulationError(f"command {command.id} ({command.engine} {command.op.mnemonic}) "
                           f"failed in functional mode: {type(exc).__name__}: {exc}")


class FunctionalExecutor:
    """Executes commands on a :class:`Memory`, one at a time (binding each as it runs)."""

    def __init__(self, memory: Memory, host_functions: Mapping[str, HostFunction]) -> None:
        self.memory = memory
        self.host_functions = host_functions

    def execute(self, op: Op) -> None:
        with np.errstate(all="ignore"):  # IEEE results (inf, nan) as torch gives them
            bind(op, self.memory, self.host_functions)()

    def execute_command(self, command: Command) -> None:
        """Execute one command; a failure is a SimulationError naming it (cause chained)."""
        try:
            self.execute(command.op)
        except SimulationError:
            raise
        except Exception as exc:
            raise _failed(command, exc) from exc


class BoundProgram:
    """A program's commands bound once, in a dependency-respecting ``order``, to buffers
    kept between runs; :meth:`run` feeds new inputs, zeroes everything else (as a fresh
    :class:`Memory` would be) and runs the steps."""

    def __init__(self, tensors: Mapping[str, DramTensor], sram_sizes: Mapping[str, int],
                 commands: Sequence[Command], order: Sequence[int]) -> None:
        self.tensors = dict(tensors)
        blank = {name: np.zeros(t.shape, t.dtype.storage) for name, t in self.tensors.items()
                 if t.role in ("in", "inout")}
        self.memory = Memory(self.tensors, sram_sizes, blank)
        self.fed = [(name, t, t.role in ("in", "inout")) for name, t in self.tensors.items()]
        self.host_functions: dict[str, HostFunction] = {}
        self.commands = [commands[i] for i in order]
        self.steps = [bind(c.op, self.memory, self.host_functions) for c in self.commands]

    def run(self, inputs: Mapping[str, Any],
            host_functions: Mapping[str, HostFunction]) -> dict[str, np.ndarray]:
        """Final DRAM contents (as :meth:`Memory.output_values`) after running on
        ``inputs``; errors are those of a fresh functional run."""
        memory, dram = self.memory, self.memory.dram
        if not inputs.keys() <= self.tensors.keys():
            unknown = sorted(set(inputs) - set(self.tensors))
            raise SimulationError(f"inputs name unknown DRAM tensors: {', '.join(unknown)} "
                                  f"(tensors: {', '.join(self.tensors)})")
        for name, t, required in self.fed:
            value = inputs.get(name)
            if value is not None:
                dram[name] = memory.input_array(t, value)
            elif required:
                raise SimulationError(f"input tensor {name!r} ({t.role}) was not given")
            else:
                dram[name] = np.zeros(t.shape, t.dtype.storage)
        for buffer in memory.sram.values():
            buffer.fill(0)
        if host_functions is not self.host_functions:
            self.host_functions.clear()
            self.host_functions.update(host_functions)
        step_number = 0
        try:
            with np.errstate(all="ignore"):  # IEEE results (inf, nan) as torch gives them
                for step_number, step in enumerate(self.steps):
                    step()
        except SimulationError:
            raise
        except Exception as exc:
            raise _failed(self.commands[step_number], exc) from exc
        return memory.output_values(copy=False)  # every run puts new arrays in DRAM


__all__ = ["BINDERS", "BoundProgram", "FunctionalExecutor", "Step", "bind"]
