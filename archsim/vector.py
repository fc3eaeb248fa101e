"""The vector engine: ``lanes`` elements per cycle, scaled by each op class's cost.

compute = ceil(elements / lanes) * cost(op class)
          (+ ceil(log2(axis length)) tree steps for a reduction)
          (a matmul on the vector unit: its element operations, :func:`matvec_ops`)
cycles  = pipeline_latency + max(compute, ceil(sram bytes / sram_bandwidth))

``elements`` is the larger of what the op reads and writes; the class costs come from
``config.core.vector.costs`` (cycles per element per lane). Every vector op is a pass
over SRAM: it loads its operands from the scratchpad and stores its result back, so
when ``sram_bandwidth_bytes_per_cycle`` is set an op also takes at least the bytes it
reads and writes over that bandwidth. A multi-pass kernel (layer norm: reduce, center,
square, reduce, scale) pays one pass per op, as it does on hardware whose vector
registers hold a small part of a tile. The exception is a ``chained`` op (a matmul's
or conv's fused epilogue past its first op, see :data:`compiler.ir.ops.CHAINED_DOC`):
its first input is in registers and its result is the pass's one write, already
charged, so it moves only its other inputs' bytes.
"""

from __future__ import annotations

import math

from archsim.config.model import VectorConfig, ceil_div
from archsim.timing import CommandTiming
from compiler.ir.access import sram_operands
from compiler.ir.operands import numel
from compiler.ir.ops import (
    COMPARISON,
    DIVIDE,
    TRANSCENDENTAL,
    Binary,
    BinaryKind,
    Cast,
    Dequantize,
    MulAdd,
    Op,
    Reduce,
    Select,
    Transpose,
    Unary,
    UnaryKind,
    VCopy,
    VectorMatMul,
)


def kind_class(kind: UnaryKind | BinaryKind) -> str:
    """The cost class of a unary or binary op of ``kind`` (the IR's and the graph's
    ops share these kinds)."""
    if kind in TRANSCENDENTAL:
        return "transcendental"
    return "divide" if kind in DIVIDE else "elementwise"


def op_class(op: Op) -> str:
    """The cost class of a vector op: a field name of ``VectorCostsConfig``."""
    if isinstance(op, (Unary, Binary)):
        return kind_class(op.kind)
    if isinstance(op, (Select, MulAdd, VectorMatMul)):
        return "elementwise"
    if isinstance(op, Reduce):
        return "reduce"
    if isinstance(op, Cast):
        return "cast"
    if isinstance(op, (Transpose, VCopy)):
        return "copy"
    if isinstance(op, Dequantize):
        return "elementwise"
    raise TypeError(f"not a vector op: {type(op).__name__}")


_FORWARDED: dict[type[Op], tuple[str, str]] = {
    Unary: ("src", "dst"), Binary: ("a", "dst"), MulAdd: ("acc", "dst"), Cast: ("src", "dst")}
"""Per op class that can be chained: the fields that stay in registers when it is."""


ARITHMETIC: dict[type[Op], int] = {MulAdd: 2}
"""Arithmetic operations an element of an op class takes where it is not one: a fused
multiply-add issues as one instruction (its time) but multiplies and adds (its FLOPs and
its energy)."""


def matvec_ops(m: int, k: int, n: int, unpack: int, groups: int) -> int:
    """Element operations of an ``m x k x n`` matmul on the vector unit
    (:class:`~compiler.ir.ops.VectorMatMul`): a multiply-add per weight and row, each
    weight unpacked and widened once first (``unpack`` operations), and with grouped
    weights two multiply-adds a group, column and row applying the group's scale and
    zero to its sums."""
    return m * k * n + k * n * unpack + 2 * m * groups * n


def _matvec(op: VectorMatMul) -> tuple[int, int, int]:
    """(rows, element operations, arithmetic operations) of a vector-unit matmul."""
    m, k, n = math.prod(op.a.shape[:-1]), op.a.shape[-1], op.columns
    if op.dequant is not None:
        unpack, groups = op.dequant.unpack_ops, op.scales.shape[0]
    else:  # weight-only int8 widened, or weights in a's dtype
        unpack, groups = int(op.b.dtype is not op.a.dtype), 0
    ops = matvec_ops(m, k, n, unpack, groups)
    return m, ops, ops + m * k * n + 2 * m * groups * n  # a multiply-add is two


def elements(op: Op) -> int:
    """Elements a vector op processes: the larger of what it reads and writes (a
    matmul: its element operations)."""
    if type(op) is VectorMatMul:
        return _matvec(op)[1]
    return max(numel(ref.shape) for _, ref in sram_operands(op))


def arithmetic_ops(op: Op) -> int:
    """Arithmetic operations a vector op does (its energy): its elements, times
    :data:`ARITHMETIC` where an element takes more than one."""
    if type(op) is VectorMatMul:
        return _matvec(op)[2]
    return elements(op) * ARITHMETIC.get(type(op), 1)


def streamed_bytes(op: Op) -> int:
    """Scratchpad bytes a vector op reads and writes (a chained op's forwarded operands
    stay in registers)."""
    forwarded = _FORWARDED.get(type(op))
    skip = forwarded if forwarded and op.chained else ()
    return sum(ref.nbytes for name, ref in sram_operands(op) if name not in skip)


class VectorEngine:
    """The vector unit of a core (engine ``coreN.vpu``)."""

    def __init__(self, name: str, config: VectorConfig) -> None:
        self.name = name
        self.config = config

    def timing(self, op: Op) -> CommandTiming:
        count = elements(op)
        cls = op_class(op)
        cost = getattr(self.config.costs, cls)
        compute = ceil_div(count, self.config.lanes) * cost
        if isinstance(op, Dequantize):  # its element ops, in one pass over the tile
            compute *= op.dequant.vector_passes
        if isinstance(op, Reduce):
            length = op.src.shape[op.axis]
            compute += math.ceil(math.log2(length)) if length > 1 else 0
        bandwidth = self.config.sram_bandwidth_bytes_per_cycle
        if bandwidth:
            compute = max(compute, ceil_div(streamed_bytes(op), bandwidth))
        cycles = self.config.pipeline_latency_cycles + compute
        if type(op) is VectorMatMul:  # the matmul's FLOPs, as the arrays count them
            flops = 2 * math.prod(op.a.shape) * op.columns
        elif cls in ("cast", "copy") or (isinstance(op, Binary) and op.kind in COMPARISON):
            flops = 0
        else:
            flops = count * ARITHMETIC.get(type(op), 1)
        return CommandTiming(fixed_cycles=cycles, flops=flops)
