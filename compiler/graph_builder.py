"""Helpers lowerings use to emit graph primitives: shape inference, broadcasting and
type promotion live here, once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from archsim.errors import LoweringError
from compiler import graph as g
from compiler.graph import Graph, Operand, Shape, Value
from compiler.ir.dtypes import DType
from compiler.ir.ops import (
    COMPARISON,
    FLOAT_ONLY,
    KEEPS_DTYPE,
    BinaryKind,
    ReduceKind,
    WIDENED_WEIGHTS,
    UnaryKind,
)

_FLOAT_RANK = {DType.f16: 1, DType.bf16: 1, DType.f32: 2}
_INT_RANK = {DType.bool: 0, DType.u8: 1, DType.i8: 1, DType.i32: 2, DType.i64: 3}
LOGICAL = frozenset({BinaryKind.logical_and, BinaryKind.logical_or})


def broadcast_shapes(*shapes: Shape, where: str = "") -> Shape:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        sizes = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(sizes) > 1:
            raise LoweringError(f"{where}: shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def promote(operands: Sequence[Operand]) -> DType:
    """torch-style result dtype: tensors decide; python scalars only lift the category."""
    dtypes = [x.dtype for x in operands if isinstance(x, Value)]
    floats = [d for d in dtypes if d.is_float]
    if floats:
        if len(set(floats)) == 1:
            return floats[0]
        return DType.f32
    has_float_scalar = any(isinstance(x, float) for x in operands if not isinstance(x, bool))
    if has_float_scalar:
        return DType.f32
    if {DType.u8, DType.i8} <= set(dtypes) and not set(dtypes) & {DType.i32, DType.i64}:
        return DType.i32  # torch's int16, the narrowest type holding both (no IR i16)
    if dtypes:
        return max(dtypes, key=lambda d: _INT_RANK.get(d, 0))
    return DType.i64


def normalize_dim(dim: int, rank: int, where: str = "") -> int:
    if not -max(rank, 1) <= dim < max(rank, 1):
        raise LoweringError(f"{where}: dim {dim} out of range for rank {rank}")
    return dim % max(rank, 1)


class GraphBuilder:
    """Appends primitive nodes to a graph; ``source`` names the aten node being lowered."""

    def __init__(self, graph: Graph,
                 constant_of: Callable[[Value], Any] | None = None) -> None:
        self.graph = graph
        self.source = ""
        self._count = 0
        self.constant_of: Callable[[Value], Any] = constant_of or (lambda value: None)
        """The torch tensor a value holds when the frontend folded it to a constant
        (indices written in the model, ``x[..., [-2], :]``), else None."""

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{self.source or hint}.{hint}{self._count}"

    def add(self, spec: g.Spec, inputs: Sequence[Operand], shape: Shape, dtype: DType,
            hint: str) -> Value:
        return self.graph.add(spec, tuple(inputs), [(tuple(shape), dtype)], self._name(hint),
                              self.source).out

    # -- elementwise ----------------------------------------------------------------
    def cast(self, x: Operand, dtype: DType) -> Operand:
        if not isinstance(x, Value):
            return x
        if x.dtype is dtype:
            return x
        return self.add(g.Cast(), (x,), x.shape, dtype, "cast")

    def unary(self, kind: UnaryKind, x: Value) -> Value:
        dtype = x.dtype
        if kind is not UnaryKind.logical_not and kind not in KEEPS_DTYPE \
                and not dtype.is_float:
            dtype = DType.f32
            x = self.cast(x, dtype)
        if kind is UnaryKind.logical_not:
            x = self.cast(x, DType.bool)
            dtype = DType.bool
        return self.add(g.Unary(kind), (x,), x.shape, dtype, kind.value)

    def binary(self, kind: BinaryKind, a: Operand, b: Operand) -> Value:
        if not isinstance(a, Value) and not isinstance(b, Value):
            raise LoweringError(f"{self.source}: binary {kind.value} of two scalars")
        compute = promote((a, b))
        if kind in FLOAT_ONLY and not compute.is_float:
            compute = DType.f32
        if kind in LOGICAL:
            compute = DType.bool
        a, b = self.cast(a, compute), self.cast(b, compute)
        shape = broadcast_shapes(*(x.shape for x in (a, b) if isinstance(x, Value)),
                                 where=self.source)
        out_dtype = DType.bool if kind in COMPARISON else compute
        a, b = _scalar(a, compute), _scalar(b, compute)
        return self.add(g.Binary(kind), (a, b), shape, out_dtype, kind.value)

    def select(self, cond: Value, a: Operand, b: Operand) -> Value:
        dtype = promote((a, b))
        a, b = self.cast(a, dtype), self.cast(b, dtype)
        cond = self.cast(cond, DType.bool)
        shape = broadcast_shapes(*(x.shape for x in (cond, a, b) if isinstance(x, Value)),
                                 where=self.source)
        return self.add(g.Select(), (cond, _scalar(a, dtype), _scalar(b, dtype)), shape, dtype,
                        "where")

    def broadcast(self, x: Value, shape: Shape) -> Value:
        shape = tuple(shape)
        if x.shape == shape:
            return x
        broadcast_shapes(x.shape, shape, where=self.source)
        return self.add(g.Broadcast(), (x,), shape, x.dtype, "expand")

    # -- reductions -------------------------------------------------------------------
    def reduce(self, kind: ReduceKind, x: Value, axes: Sequence[int], keepdim: bool,
               dtype: DType | None = None) -> Value:
        rank = len(x.shape)
        axes = tuple(sorted({normalize_dim(a, rank, self.source) for a in axes})) \
            if axes else tuple(range(rank))
        if dtype is not None:
            x = self.cast(x, dtype)
        elif kind is ReduceKind.mean and not x.dtype.is_float:
            x = self.cast(x, DType.f32)
        elif kind is ReduceKind.sum and x.dtype in (DType.bool, DType.u8, DType.i8, DType.i32):
            x = self.cast(x, DType.i64)  # torch sums integers in int64
        if rank == 0:
            return x
        kept = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
        out = self.add(g.Reduce(kind, axes), (x,), kept, x.dtype, kind.value)
        if keepdim:
            return out
        return self.view(out, tuple(n for i, n in enumerate(x.shape) if i not in axes))

    # -- layout -------------------------------------------------------------------------
    def view(self, x: Value, shape: Sequence[int]) -> Value:
        shape = _infer_shape(tuple(shape), x, self.source)
        if shape == x.shape:
            return x
        return self.add(g.View(), (x,), shape, x.dtype, "view")

    def permute(self, x: Value, perm: Sequence[int]) -> Value:
        rank = len(x.shape)
        perm = tuple(normalize_dim(p, rank, self.source) for p in perm)
        if perm == tuple(range(rank)):
            return x
        producer = x.producer
        if producer is not None and isinstance(producer.spec, g.Permute):
            # a permute of a permute is one (SDPA's math path permutes its output there
            # and back around a clone; composed, nothing moves)
            inner = producer.spec.perm
            return self.permute(producer.inputs[0], tuple(inner[p] for p in perm))
        kept = [d for d in perm if x.shape[d] != 1]
        if kept == sorted(kept):  # only moves size-1 dims: same element order
            return self.view(x, tuple(x.shape[d] for d in perm))
        return self.add(g.Permute(perm), (x,), tuple(x.shape[d] for d in perm), x.dtype,
                        "permute")

    def slice(self, x: Value, dim: int, start: int, stop: int, step: int = 1) -> Value:
        dim = normalize_dim(dim, len(x.shape), self.source)
        size = x.shape[dim]
        start, stop, _ = slice(start, stop, step).indices(size)
        stop = max(stop, start)
        if start == 0 and stop == size and step == 1:
            return x
        length = max(0, -(-(stop - start) // step))
        shape = x.shape[:dim] + (length,) + x.shape[dim + 1:]
        return self.add(g.Slice(dim, start, stop, step), (x,), shape, x.dtype, "slice")

    def matmul(self, a: Value, b: Value, trans_b: bool = False,
               out_dtype: DType | None = None, weight_only: bool = False) -> Value:
        """``a @ b`` in the operands' promoted dtype, or ``out_dtype`` (an int8 matmul's
        int32 result: the accumulator's dtype, nothing rounded). ``weight_only``: ``b``
        (int8 weights) stays as stored, read at its size and widened to ``a``'s dtype
        in the arrays' input path; the result is in ``a``'s dtype."""
        if weight_only:
            if not a.dtype.is_float or b.dtype is not DType.i8:
                raise LoweringError(f"{self.source}: a weight-only matmul takes float "
                                    f"activations and int8 weights, got {a.dtype.value} "
                                    f"and {b.dtype.value}")
            dtype = a.dtype
        elif out_dtype is DType.i32 and a.dtype.is_int8 and b.dtype.is_int8:
            dtype = a.dtype  # u8 x i8 too: the int8 mode multiplies them as stored
        else:
            dtype = promote((a, b))
            a, b = self.cast(a, dtype), self.cast(b, dtype)
        m, k = a.shape[-2:]
        n, kb = (b.shape[-2], b.shape[-1]) if trans_b else (b.shape[-1], b.shape[-2])
        if k != kb:
            raise LoweringError(f"{self.source}: matmul inner dims differ: {list(a.shape)} @ "
                                f"{list(b.shape)}{' (b transposed)' if trans_b else ''}")
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], where=self.source)
        return self.add(g.MatMul(trans_b), (a, b), (*batch, m, n), out_dtype or dtype,
                        "matmul")

    def matmul_dequant(self, a: Value, b: Value, scales: Value, spec: g.Dequantization,
                       trans_b: bool = False) -> Value:
        """``a [M, K] @ w`` (f32) with ``w`` narrow weights the arrays dequantize on the
        way in, per group of ``spec.group`` k rows and column (``scales [K / group, N, 1
        or 2]``): packed int4 bytes ``[N / block, K, block / 2]`` read at half a byte a
        weight, or one-byte values ``[K, N]`` (``[N, K]`` with ``trans_b``) read as stored
        (:class:`compiler.graph.Dequantization`)."""
        m, k = a.shape
        if spec.nibbles:
            blocks, k_b, half = b.shape
            n, stored = blocks * spec.block, f"u8 [N/{spec.block}, K, {spec.block // 2}]"
            fits = b.dtype is DType.u8 and 2 * half == spec.block and not trans_b
        else:
            n, k_b = (b.shape[0], b.shape[1]) if trans_b else (b.shape[1], b.shape[0])
            stored = "one-byte [N, K]" if trans_b else "one-byte [K, N]"
            fits = b.dtype in WIDENED_WEIGHTS
        if (not a.dtype.is_float or not fits or k_b != k or k % spec.group
                or scales.shape[:2] != (k // spec.group, n) or scales.shape[2] not in (1, 2)):
            raise LoweringError(
                f"{self.source}: a dequantizing matmul takes float a [M, K], {stored} weights "
                f"and scales [K/{spec.group}, N, 1 or 2]; got {a.dtype.value} {list(a.shape)},"
                f" {b.dtype.value} {list(b.shape)}, {list(scales.shape)}")
        return self.add(g.MatMul(trans_b, spec), (a, b, scales), (m, n), DType.f32, "matmul")

    def splat(self, value: float, shape: Shape, dtype: DType) -> Value:
        return self.add(g.Splat(float(value)), (), tuple(shape), dtype, "full")

    def arange(self, count: int, shape: Shape, scale: int = 1) -> Value:
        """A compile-time i64 tensor of ``0, scale, 2*scale...`` (``count`` of them,
        laid out as ``shape``): row offsets, column numbers."""
        value = self.add(g.Constant(), (), tuple(shape), DType.i64, "arange")
        self.graph.constants[value.id] = (np.arange(count, dtype=np.int64) * scale).reshape(
            shape)
        return value


def _scalar(x: Operand, dtype: DType) -> Operand:
    if isinstance(x, Value):
        return x
    if dtype.is_float:
        return float(x)
    if dtype is DType.bool:
        return bool(x)
    return int(x)


def _infer_shape(shape: Shape, x: Value, where: str) -> Shape:
    total = 1
    for n in x.shape:
        total *= n
    if shape.count(-1) > 1:
        raise LoweringError(f"{where}: view shape {list(shape)} has more than one -1")
    if -1 in shape:
        known = 1
        for n in shape:
            if n != -1:
                known *= n
        shape = tuple(total // known if n == -1 else n for n in shape)
    count = 1
    for n in shape:
        count *= n
    if count != total:
        raise LoweringError(f"{where}: cannot view {list(x.shape)} as {list(shape)}")
    return shape
