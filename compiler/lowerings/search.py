"""Searching by counting, on the vector unit: every value compared with every boundary
(or test element, or other element of its row), the comparisons summed or reduced.
searchsorted/bucketize count the boundaries before each value (a binary search's
answer on a sorted sequence, whatever the order); isin asks whether any test element
equals it; mode counts equal elements per row. Problems over :data:`MAX_PAIRS`
comparisons stay on the host."""

from __future__ import annotations

from typing import Any

import torch

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind, UnaryKind
from compiler.lowerings.registry import lowering
from compiler.lowerings.sorting import _back, _last

aten = torch.ops.aten
MAX_PAIRS = 1 << 24
"""Most value x boundary comparisons one op may take."""


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for n in shape:
        count *= n
    return count


def _check(a: Value, b_: Value | tuple[int, ...]) -> None:
    other = b_.shape if isinstance(b_, Value) else b_
    if _numel(a.shape) * max(_numel(other), 1) > MAX_PAIRS:
        raise NotImplementedError("too many comparisons for a counting search")


def _count_before(b: GraphBuilder, seq: Value, values: Value, right: bool,
                  int32: bool) -> Value:
    """How many elements of each row of ``seq`` are < (right: <=) each value."""
    _check(values, seq)
    if len(seq.shape) <= 1:
        bounds = b.view(seq, (1,) * len(values.shape) + (seq.shape[-1] if seq.shape else 1,))
        mine = b.view(values, values.shape + (1,))
    else:
        bounds = b.view(seq, seq.shape[:-1] + (1, seq.shape[-1]))
        mine = b.view(values, values.shape + (1,))
    before = b.binary(BinaryKind.le if right else BinaryKind.lt, bounds, mine)
    if values.dtype.is_float:  # a NaN value goes after every number
        nan = b.binary(BinaryKind.ne, mine, mine)
        number = b.binary(BinaryKind.eq, bounds, bounds)
        before = b.binary(BinaryKind.logical_or, before,
                          b.binary(BinaryKind.logical_and, nan, number))
    count = b.reduce(ReduceKind.sum, before, (-1,), keepdim=False)
    return b.cast(count, DType.i32 if int32 else DType.i64)


@lowering(aten.searchsorted.Tensor)
def lower_searchsorted(b: GraphBuilder, seq: Value, values: Value, *, out_int32: bool = False,
                       right: bool = False, side: str | None = None,
                       sorter: Value | None = None) -> Value:
    """The count does not depend on the sequence's order, so ``sorter`` is not read."""
    if len(seq.shape) > 1 and seq.shape[:-1] != values.shape[:-1]:
        raise NotImplementedError("searchsorted with mismatched leading dims")
    return _count_before(b, seq, values, right or side == "right", out_int32)


@lowering(aten.bucketize.Tensor)
def lower_bucketize(b: GraphBuilder, values: Value, boundaries: Value, *,
                    out_int32: bool = False, right: bool = False) -> Value:
    return _count_before(b, boundaries, values, right, out_int32)


@lowering(aten.isin.Tensor_Tensor)
def lower_isin(b: GraphBuilder, elements: Value, test: Value, *, assume_unique: bool = False,
               invert: bool = False) -> Value:
    _check(elements, test)
    flat = b.view(test, (1,) * len(elements.shape) + (_numel(test.shape),))
    hit = b.binary(BinaryKind.eq, b.view(elements, elements.shape + (1,)), flat)
    found = b.binary(BinaryKind.gt, b.reduce(ReduceKind.sum, hit, (-1,), keepdim=False), 0)
    return b.unary(UnaryKind.logical_not, found) if invert else found


@lowering(aten.mode.default)
def lower_mode(b: GraphBuilder, x: Value, dim: int = -1,
               keepdim: bool = False) -> tuple[Value, Value]:
    """The most frequent value of each row (the smallest among equally frequent ones)
    and its last position, as CPU's mode."""
    if not x.shape:
        return x, b.splat(0, (), DType.i64)
    moved, d = _last(b, x, dim)
    n = moved.shape[-1]
    _check(moved, (n,))
    same = b.binary(BinaryKind.eq, b.view(moved, moved.shape + (1,)),
                    b.view(moved, moved.shape[:-1] + (1, n)))
    counts = b.reduce(ReduceKind.sum, same, (-1,), keepdim=False)
    top = b.reduce(ReduceKind.max, counts, (-1,), keepdim=True)
    big: Any = float("inf") if x.dtype.is_float else 2 ** 62
    value = b.reduce(ReduceKind.min, b.select(b.binary(BinaryKind.eq, counts, top), moved, big),
                     (-1,), keepdim=True)
    where = b.arange(n, (1,) * (len(moved.shape) - 1) + (n,))
    index = b.reduce(ReduceKind.max, b.select(b.binary(BinaryKind.eq, moved, value), where, -1),
                     (-1,), keepdim=True)
    values, index = b.cast(_back(b, value, d), x.dtype), _back(b, index, d)
    if keepdim:
        return values, index
    shape = x.shape[:d] + x.shape[d + 1:]
    return b.view(values, shape), b.view(index, shape)

