"""Reordering and indexing along a dim: flip, roll (slices and a concat), and the index
ops with run-time indices — index_select, take, index_fill, index_copy, index_add — as
masked sums: each output position compares its index with the positions of the dim
(a vector compare) and sums the one element it picks (the others are zeros), vector
work over outer x picks x length x inner; an indexed-gather DMA is used instead for a
dense 2-D table along dim 0."""

from __future__ import annotations

from typing import Any

import torch

from compiler.graph import Value, base_of
from compiler.graph_builder import GraphBuilder, normalize_dim
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind
from compiler.lowerings.indexing import gather_rows
from compiler.lowerings.movement import lower_cat
from compiler.lowerings.registry import lowering

aten = torch.ops.aten

_MASK_LIMIT = 1 << 22
"""Largest outer x picks x length x inner an index op computes as masked sums."""
_FLIP_LIMIT = 64
"""Longest dim a flip reverses as one slice per element."""


@lowering(aten.flip.default)
def lower_flip(b: GraphBuilder, x: Value, dims: list[int]) -> Value:
    """Each flipped dim is its elements, one slice each, concatenated in reverse order
    (DMA copies); a dim longer than 64 as a masked sum over reversed positions."""
    for dim in dims:
        d = normalize_dim(dim, len(x.shape), b.source)
        n = x.shape[d]
        if n <= 1:
            continue
        if n > _FLIP_LIMIT:  # a masked sum picking n - 1 - j for each j
            reverse = b.binary(BinaryKind.sub, n - 1, b.arange(n, (n,)))
            x = select_along(b, x, d, reverse)
            continue
        x = lower_cat(b, [b.slice(x, d, i, i + 1) for i in reversed(range(n))], d)
    return x


@lowering(aten.roll.default)
def lower_roll(b: GraphBuilder, x: Value, shifts: list[int], dims: list[int] = ()) -> Value:
    """The last ``shift`` elements of a dim moved to its front: two slices, one concat
    (no dims: of the flattened tensor)."""
    if not dims:
        flat = lower_roll(b, b.view(x, (-1,)), [shifts[0]], [0])
        return b.view(flat, x.shape)
    for shift, dim in zip(shifts, dims):
        d = normalize_dim(dim, len(x.shape), b.source)
        n = x.shape[d]
        s = shift % n if n else 0
        if s:
            x = lower_cat(b, [b.slice(x, d, n - s, n), b.slice(x, d, 0, n - s)], d)
    return x


def _split(x: Value, d: int) -> tuple[int, int, int]:
    outer = inner = 1
    for n in x.shape[:d]:
        outer *= n
    for n in x.shape[d + 1:]:
        inner *= n
    return outer, x.shape[d], inner


def _wrapped(b: GraphBuilder, index: Value, n: int) -> Value:
    """Indices as i64 with negative ones counted from the end."""
    index = b.cast(index, DType.i64)
    return b.select(b.binary(BinaryKind.lt, index, 0), b.binary(BinaryKind.add, index, n),
                    index)


def _hits(b: GraphBuilder, index: Value, n: int) -> Value:
    """[picks, n] bool: pick j selects position k."""
    picks = b.view(_wrapped(b, index, n), (-1, 1))
    return b.binary(BinaryKind.eq, picks, b.arange(n, (1, n)))


def _picked(x: Value, d: int, index: Value) -> tuple[int, int, int, int]:
    """(outer, picks, n, inner) of an index op along dim ``d``, refused when the masked
    sums would be too big."""
    outer, n, inner = _split(x, d)
    picks = 1
    for m in index.shape:
        picks *= m
    if outer * picks * n * inner > _MASK_LIMIT:
        raise NotImplementedError(f"index op over {outer}x{picks}x{n}x{inner} is too big "
                                  f"for masked sums")
    return outer, picks, n, inner


def _summed(b: GraphBuilder, mask: Value, table: Value, axis: int, dtype: DType) -> Value:
    """Sum along ``axis`` of ``table`` where ``mask`` holds (zeros elsewhere), in
    ``dtype`` (bools and integers sum as i64, then cast back)."""
    picked = b.select(mask, table, 0)
    return b.cast(b.reduce(ReduceKind.sum, picked, (axis,), False), dtype)


def select_along(b: GraphBuilder, x: Value, dim: int, index: Value) -> Value:
    """``x.index_select(dim, index)`` as a masked sum over the dim's positions."""
    if not x.shape:  # torch keeps a 0-d tensor 0-d
        return x
    d = normalize_dim(dim, len(x.shape), b.source)
    outer, picks, n, inner = _picked(x, d, index)
    hit = b.view(_hits(b, index, n), (1, picks, n, 1))
    table = b.view(x, (outer, 1, n, inner))
    out = _summed(b, hit, table, 2, x.dtype)
    return b.view(out, x.shape[:d] + (picks,) + x.shape[d + 1:])


@lowering(aten.index_select.default)
def lower_index_select(b: GraphBuilder, x: Value, dim: int, index: Value) -> Value:
    """Rows of a dense 2-D table by an indexed-gather DMA; any other dim as masked sums."""
    if len(x.shape) == 2 and normalize_dim(dim, 2, b.source) == 0 and base_of(x) is x:
        return gather_rows(b, x, index)
    return select_along(b, x, dim, index)


@lowering(aten.take.default)
def lower_take(b: GraphBuilder, x: Value, index: Value) -> Value:
    """Elements of the flattened tensor (negative indices from the end)."""
    flat = b.view(x, (-1,)) if x.shape != (1,) else x
    out = select_along(b, flat, 0, index)
    return b.view(out, index.shape)


def _covered(b: GraphBuilder, x: Value, d: int, index: Value) -> Value:
    """Bool of the shape [1.., n, 1..] along ``d``: the positions ``index`` names."""
    n = x.shape[d]
    hit = b.cast(_hits(b, index, n), DType.f32)
    any_hit = b.binary(BinaryKind.gt, b.reduce(ReduceKind.max, hit, (0,), False), 0.0)
    return b.view(any_hit, tuple(n if i == d else 1 for i in range(len(x.shape))))


def _lifted(b: GraphBuilder, *values: Any) -> list[Any]:
    """0-d tensors as 1-element vectors (an index op on a 0-d tensor is one on [1])."""
    return [b.view(v, (1,)) if isinstance(v, Value) and not v.shape else v for v in values]


@lowering(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def lower_index_fill(b: GraphBuilder, x: Value, dim: int, index: Value, value: Any) -> Value:
    """``value`` where the dim's position is one of ``index``: a select."""
    lifted, = _lifted(b, x)
    d = normalize_dim(dim, len(lifted.shape), b.source)
    out = b.cast(b.select(_covered(b, lifted, d, index), value, lifted), x.dtype)
    return b.view(out, x.shape)


def _scattered(b: GraphBuilder, x: Value, dim: int, index: Value, source: Value
               ) -> tuple[Value, Value]:
    """``(sum of the source slices sent to each position of x's dim, which positions
    receive one)``, both shaped like ``x``."""
    d = normalize_dim(dim, len(x.shape), b.source)
    outer, picks, n, inner = _picked(x, d, index)
    hit = b.view(b.permute(_hits(b, index, n), (1, 0)), (1, n, picks, 1))
    table = b.view(source, (outer, 1, picks, inner))
    sums = b.view(_summed(b, hit, table, 2, source.dtype), x.shape)
    return sums, _covered(b, x, d, index)


@lowering(aten.index_copy.default)
def lower_index_copy(b: GraphBuilder, x: Value, dim: int, index: Value, source: Value
                     ) -> Value:
    """Positions named by ``index`` take the source's slices (masked sums), the others
    keep ``x``."""
    lifted, source = _lifted(b, x, source)
    sums, covered = _scattered(b, lifted, dim, index, source)
    return b.view(b.select(covered, b.cast(sums, x.dtype), lifted), x.shape)


@lowering(aten.index_add.default)
def lower_index_add(b: GraphBuilder, x: Value, dim: int, index: Value, source: Value, *,
                    alpha: Any = 1) -> Value:
    """``x`` plus ``alpha`` times the source slices summed per named position
    (repeated indices add up, as in torch)."""
    lifted, source = _lifted(b, x, source)
    sums = _scattered(b, lifted, dim, index, source)[0]
    if alpha != 1:
        sums = b.binary(BinaryKind.mul, sums, alpha)
    return b.view(b.cast(b.binary(BinaryKind.add, lifted, sums), x.dtype), x.shape)


@lowering(aten.put.default)
def lower_put(b: GraphBuilder, x: Value, index: Value, source: Value,
              accumulate: bool = False) -> Value:
    """index_copy (or index_add with ``accumulate``) on the flattened tensor."""
    flat, values = b.view(x, (-1,)), b.view(source, (-1,))
    if accumulate:
        out = lower_index_add(b, flat, 0, index, values)
    else:
        out = lower_index_copy(b, flat, 0, index, values)
    return b.view(out, x.shape)


_REDUCE_IDENTITY = {"amax": -float("inf"), "amin": float("inf"), "prod": 1.0, "mean": 0.0}


@lowering(aten.index_reduce.default)
def lower_index_reduce(b: GraphBuilder, x: Value, dim: int, index: Value, source: Value,
                       reduce: str, *, include_self: bool = True) -> Value:
    """Source slices reduced into the positions ``index`` names: the picks not sent to a
    position replaced by the reduction's identity (a select against the compare), then
    a max/min reduce, a product tree or a sum and count (mean) over the picks; the
    positions nothing is sent to keep ``x``."""
    from compiler.lowerings.reduce_more import product_last

    if not x.dtype.is_float:
        raise NotImplementedError("index_reduce of integers")
    lifted, source = _lifted(b, x, source)
    d = normalize_dim(dim, len(lifted.shape), b.source)
    outer, picks, n, inner = _picked(lifted, d, index)
    hit = b.view(b.permute(_hits(b, index, n), (1, 0)), (1, n, 1, picks))
    table = b.view(b.permute(b.view(source, (outer, picks, inner)), (0, 2, 1)),
                   (outer, 1, inner, picks))
    picked = b.select(hit, table, _REDUCE_IDENTITY[reduce])  # [outer, n, inner, picks]
    base = b.view(lifted, (outer, n, inner, 1))
    if reduce in ("amax", "amin"):
        kind = ReduceKind.max if reduce == "amax" else ReduceKind.min
        if include_self:
            picked = lower_cat(b, [picked, base], 3)
        out = b.reduce(kind, picked, (3,), False)
    elif reduce == "prod":
        if include_self:
            picked = lower_cat(b, [picked, base], 3)
        out = b.view(product_last(b, picked), (outer, n, inner))
    elif reduce == "mean":
        total = b.reduce(ReduceKind.sum, picked, (3,), False)
        count = b.reduce(ReduceKind.sum, b.cast(hit, x.dtype), (3,), False)  # [1, n, 1]
        if include_self:
            total = b.binary(BinaryKind.add, total, b.view(lifted, (outer, n, inner)))
            count = b.binary(BinaryKind.add, count, 1.0)
        out = b.binary(BinaryKind.div, total, b.binary(BinaryKind.max, count, 1.0))
    else:
        raise NotImplementedError(f"index_reduce {reduce!r}")
    covered = _covered(b, lifted, d, index)
    return b.view(b.select(covered, b.view(out, lifted.shape), lifted), x.shape)
