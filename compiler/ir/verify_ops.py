"""The verifier's per-op checks (see :mod:`compiler.ir.verify`): the facts of a
configuration they need (:class:`Machine`) and, per op class, the shape and dtype rules
its operands must follow (:data:`OP_CHECKS`), each problem a message starting with the
field at fault.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from archsim.config.model import NpuConfig
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, DramTensor, Scalar, Shape, SramRef, numel
from compiler.ir.ops import (
    COMPARISON,
    Binary,
    Cast,
    Copy,
    Dequant,
    Dequantize,
    Gather,
    HostOp,
    HostTransfer,
    Load,
    NIBBLES,
    MatMul,
    Op,
    Reduce,
    MulAdd,
    Select,
    Store,
    Transpose,
    Unary,
    WIDENED_WEIGHTS,
    VCopy,
    VectorMatMul,
)
from compiler.ir.text import format_dram_ref, format_shape, format_type

__all__ = ["OP_CHECKS", "Machine", "range_text", "write_to_input"]


# ---------------------------------------------------------------- the machine


@dataclass(frozen=True, eq=False)
class Machine:
    """The facts of a configuration that the checks need."""

    name: str
    engines: frozenset[str]
    cores: int
    dma_engines: int
    matrix_arrays: int
    matrix_input: str
    accumulator: str
    spaces: dict[str, int]
    """Capacity in bytes of each SRAM space that exists."""

    @classmethod
    def from_config(cls, config: NpuConfig) -> "Machine":
        spaces = config.sram_capacities
        return cls(
            name=config.name,
            engines=frozenset(config.engines),
            cores=config.cores,
            dma_engines=config.core.dma.engines,
            matrix_arrays=config.core.matrix.arrays,
            matrix_input=config.core.matrix.input_dtype,
            accumulator=config.core.matrix.accumulator_dtype,
            spaces=spaces,
        )

    def describe_engines(self) -> str:
        """``core0..core1 each with dma0..dma1, mxu0, vpu; tdma, hdma, host``."""
        per_core = [range_text("dma", self.dma_engines),
                    range_text("mxu", self.matrix_arrays), "vpu"]
        return (f"{range_text('core', self.cores)} each with {', '.join(per_core)}; "
                f"tdma, hdma, host")

    def capacity(self, space: str) -> int | None:
        """Bytes of an existing SRAM space, else None."""
        return self.spaces.get(space)


def range_text(prefix: str, count: int) -> str:
    if count == 1:
        return f"{prefix}0"
    return f"{prefix}0..{prefix}{count - 1}"


def write_to_input(name: str) -> str:
    """The message for a write to an `in` tensor (a DRAM box or a host op's output)."""
    return (f"writes %{name}, whose role is 'in' (inputs are read-only; "
            f"declare it 'inout' to update it)")


# ---------------------------------------------------------------- per-op shape checks

_OpCheck = Callable[[Op, Machine, dict[str, DramTensor]], Iterator[str]]
OP_CHECKS: dict[type[Op], _OpCheck] = {}


def _checks(op_type: type[Op]) -> Callable[[_OpCheck], _OpCheck]:
    def register(check: _OpCheck) -> _OpCheck:
        OP_CHECKS[op_type] = check
        return check
    return register


def _typed(ref: SramRef) -> str:
    return format_type(ref.dtype, ref.shape)


def _broadcasts_to(src: Shape, dst: Shape) -> bool:
    """numpy broadcasting of ``src`` to exactly ``dst``."""
    if len(src) > len(dst):
        return False
    return all(s == d or s == 1 for s, d in zip(reversed(src), reversed(dst)))


def _same_dtype(field: str, ref: SramRef, other: str, dtype: DType) -> Iterator[str]:
    if ref.dtype != dtype:
        yield f"field {field}: dtype {ref.dtype} does not match {other}'s {dtype}"


def _dram_side(ref: DramRef, tensors: dict[str, DramTensor]) -> DramTensor | None:
    """The tensor of a well-formed box, else None (its problems are reported already)."""
    tensor = tensors.get(ref.tensor)
    if tensor is None or len(ref.slices) != len(tensor.shape):
        return None
    if any(s.step <= 0 for s in ref.slices):
        return None  # its shape is undefined
    return tensor


def _transfer_problems(field: str, sram: SramRef, other: str, other_shape: Shape,
                       other_dtype: DType) -> Iterator[str]:
    """Load/Store/Copy: equal element counts, no conversion."""
    if numel(sram.shape) != numel(other_shape):
        yield (f"field {field}: {_typed(sram)} has {numel(sram.shape)} elements but "
               f"{other} has {numel(other_shape)}")
    if sram.dtype != other_dtype:
        yield (f"field {field}: dtype {sram.dtype} does not match {other}'s {other_dtype} "
               f"(DMA does not convert; use a cast)")


@_checks(Load)
def _check_load(op: Load, machine: Machine, tensors: dict[str, DramTensor]) -> Iterator[str]:
    tensor = _dram_side(op.src, tensors)
    if tensor is not None:
        yield from _transfer_problems("dst", op.dst, f"source {format_dram_ref(op.src)}",
                                      op.src.shape, tensor.dtype)


@_checks(Store)
def _check_store(op: Store, machine: Machine, tensors: dict[str, DramTensor]
                 ) -> Iterator[str]:
    tensor = _dram_side(op.dst, tensors)
    if tensor is not None:
        yield from _transfer_problems("src", op.src, f"destination {format_dram_ref(op.dst)}",
                                      op.dst.shape, tensor.dtype)


@_checks(Copy)
def _check_copy(op: Copy, machine: Machine, tensors: dict[str, DramTensor]) -> Iterator[str]:
    yield from _transfer_problems("dst", op.dst, f"src {_typed(op.src)}", op.src.shape,
                                  op.src.dtype)


_INDEX_DTYPES: tuple[DType, ...] = (DType.i32, DType.i64)


@_checks(Gather)
def _check_gather(op: Gather, machine: Machine, tensors: dict[str, DramTensor]
                  ) -> Iterator[str]:
    if op.indices.dtype not in _INDEX_DTYPES or len(op.indices.shape) != 1:
        yield (f"field indices: {_typed(op.indices)} must be a 1-D vector of i32 or i64 "
               f"row numbers")
    tensor = _dram_side(op.table, tensors)
    if tensor is None:
        return
    table = format_dram_ref(op.table)
    if len(op.table.shape) != 2:
        yield (f"field table: {table} must be a 2-D box (rows x cols), "
               f"got rank {len(op.table.shape)}")
        return
    rows = op.indices.shape[0] if len(op.indices.shape) == 1 else numel(op.indices.shape)
    expected = (rows, op.table.shape[1])
    if op.dst.shape != expected:
        yield (f"field dst: shape {_typed(op.dst)} should be {format_shape(expected)} "
               f"({rows} indices x {op.table.shape[1]} columns of {table})")
    if op.dst.dtype != tensor.dtype:
        yield (f"field dst: dtype {op.dst.dtype} does not match table {table}'s "
               f"{tensor.dtype} (DMA does not convert; use a cast)")


@_checks(VectorMatMul)  # the same fields and shapes, on the vector unit
@_checks(MatMul)
def _check_matmul(op: MatMul | VectorMatMul, machine: Machine, tensors: dict[str, DramTensor]
                  ) -> Iterator[str]:
    packed = op.dequant is not None and bool(op.dequant.nibbles)
    flat = [(name, ref) for name, ref in (("b", op.b), ("out", op.out))
            if len(ref.shape) != (3 if packed and name == "b" else 2)]
    if len(op.a.shape) < 2:
        flat.insert(0, ("a", op.a))
    for name, ref in flat:
        yield (f"field {name}: matmul operands must be 2-D (a may have more leading dims, "
               f"which are its rows{'; packed int4 b is [blocks, k, bytes]' if packed else ''})"
               f", got {_typed(ref)}")
    if flat:
        return
    if (op.dequant is None) != (op.scales is None):
        yield ("field scales: weights dequantized on the way in need both scales and how "
               "(dequant SCALES group=G phase=P halves|pairs|bytes)")
    elif op.dequant is not None and op.scales is not None:
        if not op.a.dtype.is_float:
            yield f"field a: dequantized weights are widened for float a, got {op.a.dtype}"
        yield from _dequant_problems(op.b, op.scales, op.dequant, op.a.shape[-1], op.columns)
    elif op.a.dtype.is_int8:  # u8 x i8 as well as i8 x i8 (x86 VNNI's pairing)
        if not op.b.dtype.is_int8:
            yield f"field b: dtype {op.b.dtype} is not an 8-bit integer like a's {op.a.dtype}"
    elif not (op.a.dtype.is_float and op.b.dtype in WIDENED_WEIGHTS):  # weight-only int8 (and
        yield from _same_dtype("b", op.b, "a", op.a.dtype)  # an fp8 KV cache): b is
        # widened on the way in
    yield from _matmul_dtype_problems(op.a.dtype, machine)
    (m, k), k_b, n = (math.prod(op.a.shape[:-1]), op.a.shape[-1]), op.b.shape[-2], op.columns
    if k_b != k:
        yield f"field b: shape {_typed(op.b)} does not match a's k={k}"
    if op.out.shape != (m, n):
        yield f"field out: shape {_typed(op.out)} does not match [m,n]=[{m},{n}]"
    if op.a.dtype.is_int8:
        if op.out.dtype is not DType.i32:
            yield (f"field out: dtype {op.out.dtype} is not i32, the accumulator of "
                   f"{op.a.dtype} inputs")
    elif op.out.dtype.value != machine.accumulator:
        yield (f"field out: dtype {op.out.dtype} is not the matrix array's accumulator "
               f"dtype {machine.accumulator}")


def _dequant_problems(b: SramRef, scales: SramRef, dequant: Dequant, k: int, columns: int
                      ) -> Iterator[str]:
    """Narrow weights ``b`` dequantized (:class:`~compiler.ir.ops.Dequant`, by an
    array's input path or by the vector unit): packed int4 bytes or one-byte values; a
    scale (and a zero) per group and column."""
    if dequant.nibbles and b.dtype is not DType.u8:
        yield f"field b: packed int4 weights are u8 bytes (two codes each), got {b.dtype}"
    if not dequant.nibbles and b.dtype not in WIDENED_WEIGHTS:
        yield (f"field b: dequantized weights are one-byte values "
               f"({', '.join(d.value for d in WIDENED_WEIGHTS)}), got {b.dtype}")
    if dequant.nibbles not in ("", *NIBBLES):
        yield f"field dequant: nibbles {dequant.nibbles!r} is not one of {', '.join(NIBBLES)}"
    if dequant.group < 1 or not 0 <= dequant.phase < dequant.group:
        yield (f"field dequant: group {dequant.group} and phase {dequant.phase} need group "
               f">= 1 and 0 <= phase < group")
        return
    groups = (dequant.phase + k - 1) // dequant.group + 1
    if (scales.shape[:2] != (groups, columns) or len(scales.shape) != 3
            or scales.shape[2] not in (1, 2) or not scales.dtype.is_float):
        yield (f"field scales: {_typed(scales)} should be float [{groups},{columns},1] or "
               f"[{groups},{columns},2] (a scale, and a zero, per group of "
               f"{dequant.group} k rows and column)")


@_checks(Dequantize)
def _check_dequantize(op: Dequantize, machine: Machine, tensors: dict[str, DramTensor]
                      ) -> Iterator[str]:
    if len(op.dst.shape) != 2 or not op.dst.dtype.is_float:
        yield f"field dst: dequantized weights are a float [k, n] tile, got {_typed(op.dst)}"
        return
    (k, n), packed = op.dst.shape, bool(op.dequant.nibbles)
    stored = op.src.shape
    if packed and (len(stored) != 3 or stored[1] != k or 2 * stored[0] * stored[2] != n):
        yield (f"field src: packed int4 weights of a [{k},{n}] tile are bytes "
               f"[blocks, {k}, block/2] of {n} columns in all, got {_typed(op.src)}")
    elif not packed and stored != (k, n):
        yield f"field src: shape {_typed(op.src)} does not match dst's [{k},{n}]"
    yield from _dequant_problems(op.src, op.scales, op.dequant, k, n)


def _matmul_dtype_problems(dtype: DType, machine: Machine) -> Iterator[str]:
    """Float arrays take i8 inputs too: in their int8 mode (``core.matrix.rates``) or,
    without one, widened on the way in (exact) at the native rate."""
    if not (dtype.is_float or dtype.is_int8):
        yield f"field a: matmul inputs must be floating point, i8 or u8, got {dtype}"
    elif dtype.is_float and machine.matrix_input == "i8":
        yield f"field a: float matmul ({dtype}) on an i8 matrix array"


def _same_shape(field: str, ref: SramRef, other: str, shape: Shape) -> Iterator[str]:
    if ref.shape != shape:
        yield f"field {field}: shape {_typed(ref)} does not match {other}'s {format_shape(shape)}"


@_checks(Unary)
def _check_unary(op: Unary, machine: Machine, tensors: dict[str, DramTensor]
                 ) -> Iterator[str]:
    yield from _same_shape("dst", op.dst, "src", op.src.shape)
    yield from _same_dtype("dst", op.dst, "src", op.src.dtype)


@_checks(Cast)
def _check_cast(op: Cast, machine: Machine, tensors: dict[str, DramTensor]) -> Iterator[str]:
    yield from _same_shape("dst", op.dst, "src", op.src.shape)


def _broadcast_problems(field: str, value: SramRef | Scalar, dst: SramRef) -> Iterator[str]:
    if isinstance(value, SramRef) and not _broadcasts_to(value.shape, dst.shape):
        yield (f"field {field}: shape {_typed(value)} does not broadcast to dst's "
               f"{format_shape(dst.shape)}")


@_checks(Binary)
def _check_binary(op: Binary, machine: Machine, tensors: dict[str, DramTensor]
                  ) -> Iterator[str]:
    yield from _broadcast_problems("a", op.a, op.dst)
    yield from _broadcast_problems("b", op.b, op.dst)
    if op.kind in COMPARISON:
        if op.dst.dtype != DType.bool:
            yield f"field dst: {op.kind.value} produces bool, got {op.dst.dtype}"
        if isinstance(op.a, SramRef) and isinstance(op.b, SramRef):
            yield from _same_dtype("b", op.b, "a", op.a.dtype)
        return
    for name, value in (("a", op.a), ("b", op.b)):
        if isinstance(value, SramRef):
            yield from _same_dtype(name, value, "dst", op.dst.dtype)


@_checks(MulAdd)
def _check_muladd(op: MulAdd, machine: Machine, tensors: dict[str, DramTensor]
                  ) -> Iterator[str]:
    for name, value in (("acc", op.acc), ("a", op.a), ("b", op.b)):
        yield from _broadcast_problems(name, value, op.dst)
        if isinstance(value, SramRef):
            yield from _same_dtype(name, value, "dst", op.dst.dtype)


@_checks(Select)
def _check_select(op: Select, machine: Machine, tensors: dict[str, DramTensor]
                  ) -> Iterator[str]:
    yield from _broadcast_problems("cond", op.cond, op.dst)
    if op.cond.dtype != DType.bool:
        yield f"field cond: a select condition must be bool, got {op.cond.dtype}"
    for name, value in (("a", op.a), ("b", op.b)):
        yield from _broadcast_problems(name, value, op.dst)
        if isinstance(value, SramRef):
            yield from _same_dtype(name, value, "dst", op.dst.dtype)


@_checks(Reduce)
def _check_reduce(op: Reduce, machine: Machine, tensors: dict[str, DramTensor]
                  ) -> Iterator[str]:
    rank = len(op.src.shape)
    if not 0 <= op.axis < rank:
        yield f"field axis: {op.axis} is out of range for src {_typed(op.src)} (rank {rank})"
        return
    expected = op.src.shape[:op.axis] + (1,) + op.src.shape[op.axis + 1:]
    if op.dst.shape != expected:
        yield (f"field dst: shape {_typed(op.dst)} should be {format_shape(expected)} "
               f"(src {format_shape(op.src.shape)} reduced along axis {op.axis})")
    yield from _same_dtype("dst", op.dst, "src", op.src.dtype)


@_checks(Transpose)
def _check_transpose(op: Transpose, machine: Machine, tensors: dict[str, DramTensor]
                     ) -> Iterator[str]:
    rank = len(op.src.shape)
    if sorted(op.perm) != list(range(rank)):
        perm = ",".join(str(p) for p in op.perm)
        yield f"field perm: ({perm}) is not a permutation of the {rank} axes of src"
        return
    expected = tuple(op.src.shape[p] for p in op.perm)
    if op.dst.shape != expected:
        yield (f"field dst: shape {_typed(op.dst)} should be {format_shape(expected)} "
               f"(src {format_shape(op.src.shape)} transposed)")
    yield from _same_dtype("dst", op.dst, "src", op.src.dtype)


@_checks(VCopy)
def _check_vcopy(op: VCopy, machine: Machine, tensors: dict[str, DramTensor]
                 ) -> Iterator[str]:
    same_count = numel(op.src.shape) == numel(op.dst.shape)
    if not same_count and not _broadcasts_to(op.src.shape, op.dst.shape):
        yield (f"field dst: shape {_typed(op.dst)} neither has the {numel(op.src.shape)} "
               f"elements of src {_typed(op.src)} nor is a broadcast of it")
    yield from _same_dtype("dst", op.dst, "src", op.src.dtype)


@_checks(HostTransfer)
def _check_host_transfer(op: HostTransfer, machine: Machine,
                         tensors: dict[str, DramTensor]) -> Iterator[str]:
    return iter(())  # the DRAM box is checked with every other DRAM operand


@_checks(HostOp)
def _check_host_op(op: HostOp, machine: Machine, tensors: dict[str, DramTensor]
                   ) -> Iterator[str]:
    for field, names in (("inputs", op.inputs), ("outputs", op.outputs)):
        for name in names:
            tensor = tensors.get(name)
            if tensor is None:
                yield f"field {field}: unknown DRAM tensor %{name}"
            elif field == "outputs" and tensor.role == "in":
                yield f"field outputs: {write_to_input(name)}"
    if op.cycles < 0:
        yield f"field cycles: must be >= 0, got {op.cycles}"
