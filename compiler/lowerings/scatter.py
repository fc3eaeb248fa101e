"""scatter, scatter_add, scatter_reduce along any dim and segment_reduce, as masked
vector work: with the scattered dim moved last, every output position is compared with
every index of its row (positions x indices per row) and the sources whose index names
it are reduced (sum, mean, max, min, product) or the last one written is kept. Index tensors smaller than
the output in other dims cover the leading part of those dims; the rest keeps ``self``.
Problems over :data:`MAX_PAIRS` comparisons stay on the host."""

from __future__ import annotations

import math

import torch

from compiler import graph as g
from compiler.graph import Value
from compiler.graph_builder import GraphBuilder, normalize_dim
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind
from compiler.lowerings.movement import lower_scatter_value as _last_dim_value
from compiler.lowerings.registry import lowering
from compiler.lowerings.sorting import _back, _last

aten = torch.ops.aten
MAX_PAIRS = 1 << 22
"""Most positions x indices compared by one scatter."""
MAX_PRODUCT_INDICES = 64
"""Longest index row a product scatter multiplies in one at a time."""


def _scatter(b: GraphBuilder, x: Value, dim: int, index: Value, src: Value | float,
             reduce: str, include_self: bool = True) -> Value:
    rank = len(x.shape)
    if rank == 0 and not index.shape:  # one element: as a 1-element row
        one = [b.view(v, (1,)) if isinstance(v, Value) else v for v in (x, index, src)]
        return b.view(_scatter(b, one[0], 0, one[1], one[2], reduce, include_self), ())
    if len(index.shape) != rank:
        raise NotImplementedError("scatter with a lower-rank index")
    d = normalize_dim(dim, rank, b.source)
    if isinstance(src, Value):
        for axis, n in enumerate(index.shape):
            src = b.slice(src, axis, 0, n)
    part = x
    for axis, n in enumerate(index.shape):
        if axis != d:
            part = b.slice(part, axis, 0, n)
    out = _rows(b, part, d, index, src, reduce, include_self)
    for axis in reversed(range(rank)):  # the rows the index does not reach keep self
        if axis != d and index.shape[axis] < x.shape[axis]:
            rest = x  # dims after ``axis`` are whole by now, the ones before not yet
            for a in range(axis):
                if a != d:
                    rest = b.slice(rest, a, 0, index.shape[a])
            rest = b.slice(rest, axis, index.shape[axis], x.shape[axis])
            shape = list(out.shape)
            shape[axis] = x.shape[axis]
            out = b.add(g.Cat(axis), (out, rest), tuple(shape), x.dtype, "cat")
    return out


def _rows(b: GraphBuilder, x: Value, d: int, index: Value, src: Value | float, reduce: str,
          include_self: bool) -> Value:
    """The scatter on rows of equal leading shape (``index`` may be shorter along ``d``)."""
    moved, _ = _last(b, x, d)
    idx, _ = _last(b, b.cast(index, DType.i64), d)
    n, k = moved.shape[-1], idx.shape[-1]
    rows = 1
    for s in moved.shape[:-1]:
        rows *= s
    if rows * n * k > MAX_PAIRS:
        raise NotImplementedError("scatter too wide for masked reductions")
    lead = moved.shape[:-1]
    positions = b.arange(n, (1,) * len(lead) + (n, 1))
    hit = b.binary(BinaryKind.eq, b.view(idx, lead + (1, k)), positions)   # [..., n, k]
    if isinstance(src, Value):
        values, _ = _last(b, b.cast(src, x.dtype), d)
        values = b.view(values, lead + (1, k))
    else:
        values = src
    zero = 0.0 if x.dtype.is_float else 0
    count = b.reduce(ReduceKind.sum, hit, (-1,), keepdim=False)
    some = b.binary(BinaryKind.gt, count, 0)
    if reduce == "set":  # the last write wins, as CPU's sequential loop
        order = b.arange(k, (1,) * len(lead) + (1, k))
        last = b.reduce(ReduceKind.max, b.select(hit, order, -1), (-1,), keepdim=True)
        pick = b.binary(BinaryKind.logical_and, hit, b.binary(BinaryKind.eq, order, last))
        got = b.reduce(ReduceKind.sum, b.select(pick, values, zero), (-1,), keepdim=False)
        out = b.select(some, got, moved)
    elif reduce == "mean" and not x.dtype.is_float:
        raise NotImplementedError("integer mean scatter (floor division)")
    elif reduce in ("sum", "mean"):
        total = b.reduce(ReduceKind.sum, b.select(hit, values, zero), (-1,), keepdim=False)
        if include_self:
            total = b.binary(BinaryKind.add, total, moved)
        if reduce == "mean":
            total = b.binary(BinaryKind.div, total, b.binary(BinaryKind.add, count,
                                                              1 if include_self else 0))
        out = b.select(some, total, moved) if not include_self or reduce == "mean" else total
    elif reduce in ("amax", "amin"):
        kind = ReduceKind.max if reduce == "amax" else ReduceKind.min
        fill = float("-inf") if reduce == "amax" else float("inf")
        best = b.reduce(kind, b.select(hit, values, fill), (-1,), keepdim=False)
        if include_self:
            best = b.binary(BinaryKind.max if reduce == "amax" else BinaryKind.min, best, moved)
        out = b.select(some, best, moved)
    elif reduce == "prod":
        if k > MAX_PRODUCT_INDICES:
            raise NotImplementedError("product scatter of a long index row")
        total = moved if include_self else b.splat(1.0, moved.shape, moved.dtype)
        for j in range(k):
            term = b.slice(values, -1, j, j + 1) if isinstance(values, Value) else values
            column = b.view(b.slice(hit, -1, j, j + 1), lead + (n,))
            total = b.binary(BinaryKind.mul, total, b.select(
                column, b.view(term, lead + (1,)) if isinstance(term, Value) else term, 1.0))
        out = b.select(some, total, moved)
    else:
        raise NotImplementedError(f"scatter reduce {reduce!r}")
    return _back(b, b.cast(out, x.dtype), d)


@lowering(aten.scatter.src)
def lower_scatter_src(b: GraphBuilder, x: Value, dim: int, index: Value, src: Value) -> Value:
    return _scatter(b, x, dim, index, src, "set")


@lowering(aten.scatter.value)
def lower_scatter_value(b: GraphBuilder, x: Value, dim: int, index: Value,
                        value: float) -> Value:
    """One index per row along the last dim keeps its select (movement); others mask."""
    try:
        return _last_dim_value(b, x, dim, index, value)
    except NotImplementedError:
        return _scatter(b, x, dim, index, value, "set")


@lowering(aten.scatter.value_reduce)
def lower_scatter_value_reduce(b: GraphBuilder, x: Value, dim: int, index: Value,
                               value: float, *, reduce: str) -> Value:
    return _scatter(b, x, dim, index, value, {"add": "sum", "multiply": "prod"}[reduce])


@lowering(aten.scatter_add.default)
def lower_scatter_add(b: GraphBuilder, x: Value, dim: int, index: Value, src: Value) -> Value:
    return _scatter(b, x, dim, index, src, "sum")


@lowering(aten.scatter.reduce)
def lower_scatter_reduce_old(b: GraphBuilder, x: Value, dim: int, index: Value, src: Value, *,
                             reduce: str) -> Value:
    return _scatter(b, x, dim, index, src, {"add": "sum", "multiply": "prod"}[reduce])


@lowering(aten.scatter_reduce.two)
def lower_scatter_reduce(b: GraphBuilder, x: Value, dim: int, index: Value, src: Value,
                         reduce: str, *, include_self: bool = True) -> Value:
    return _scatter(b, x, dim, index, src, reduce, include_self)


@lowering(aten.segment_reduce.default)
def lower_segment_reduce(b: GraphBuilder, data: Value, reduce: str, *,
                         lengths: Value | None = None, indices: Value | None = None,
                         offsets: Value | None = None, axis: int = 0, unsafe: bool = False,
                         initial: float | None = None) -> Value:
    """Segments along ``axis`` (lengths or offsets per leading index): each segment's
    [start, end) range compared with the positions, the masked elements reduced;
    ``initial`` joins every segment (and fills the empty ones), as CPU."""
    given = lengths if lengths is not None else offsets
    if given is None or not data.dtype.is_float:
        raise NotImplementedError("segment_reduce without lengths/offsets or not float")
    d = normalize_dim(axis, len(data.shape), b.source)
    lead, n, rest = data.shape[:d], data.shape[d], data.shape[d + 1:]
    if given.shape[:-1] != lead:
        raise NotImplementedError("segment_reduce with lengths not shaped like the lead")
    r = len(lead)
    if lengths is not None:
        k = lengths.shape[-1]
        size = b.cast(lengths, DType.i64)
        earlier = b.binary(BinaryKind.lt, b.arange(k, (1, k)), b.arange(k, (k, 1)))  # j < k
        starts = b.reduce(ReduceKind.sum, b.select(earlier, b.view(size, lead + (1, k)), 0),
                          (r + 1,), keepdim=False)
        ends = b.binary(BinaryKind.add, starts, size)
    else:
        k = given.shape[-1] - 1
        bounds = b.cast(given, DType.i64)
        starts, ends = b.slice(bounds, r, 0, k), b.slice(bounds, r, 1, k + 1)
    if k * max(1, math.prod(data.shape)) > MAX_PAIRS:
        raise NotImplementedError("segment_reduce too wide for masked reductions")
    ones = (1,) * len(rest)
    place = b.arange(n, (1,) * r + (1, n) + ones)
    inside = b.binary(BinaryKind.logical_and,
                      b.binary(BinaryKind.ge, place, b.view(starts, lead + (k, 1) + ones)),
                      b.binary(BinaryKind.lt, place, b.view(ends, lead + (k, 1) + ones)))
    rows = b.view(data, lead + (1, n) + rest)
    count = b.view(b.cast(b.binary(BinaryKind.sub, ends, starts), data.dtype),
                   lead + (k,) + ones)
    init = None if initial is None else float(initial)
    if reduce in ("sum", "mean"):
        out = b.reduce(ReduceKind.sum, b.select(inside, rows, 0.0), (r + 1,), keepdim=False)
        if init is not None:
            out = b.binary(BinaryKind.add, out, init)
        if reduce == "mean":
            out = b.binary(BinaryKind.div, out, count)
    elif reduce in ("max", "min"):
        kind = ReduceKind.max if reduce == "max" else ReduceKind.min
        fill = float("-inf") if reduce == "max" else float("inf")
        out = b.reduce(kind, b.select(inside, rows, fill), (r + 1,), keepdim=False)
        if init is not None:
            out = b.binary(BinaryKind.max if reduce == "max" else BinaryKind.min, out, init)
    elif reduce == "prod" and n <= MAX_PRODUCT_INDICES:
        out = b.splat(1.0 if init is None else init, lead + (k,) + rest, data.dtype)
        for i in range(n):
            out = b.binary(BinaryKind.mul, out, b.select(
                b.view(b.slice(inside, r + 1, i, i + 1), lead + (k,) + ones),
                b.slice(data, d, i, i + 1), 1.0))
    else:
        raise NotImplementedError(f"segment_reduce {reduce!r}")
    if init is not None:
        out = b.select(b.binary(BinaryKind.eq, count, 0.0), init, out)
    return b.cast(out, data.dtype)


@lowering(aten.index_put.default)
def lower_index_put(b: GraphBuilder, x: Value, indices: list[Value | None], values: Value | float,
                    accumulate: bool = False) -> Value:
    """``x[..., index, ...] = values`` (``+=`` with ``accumulate``) for one integer index
    tensor on one dim, the dims before it taken whole (``None``): MoE routing's inverse
    permutation ``inv[perm] = arange(S)`` on dim 0, a static KV cache's
    ``k.index_copy_(2, cache_position, new)``. The scatter along that dim of the values
    broadcast over the picked positions; repeated indices keep the last write as CPU
    does (or add up), negative ones wrap."""
    d = next((i for i, index in enumerate(indices) if index is not None), len(indices))
    if d == len(indices) or d >= len(x.shape) or any(i is not None for i in indices[d + 1:]) \
            or not isinstance(indices[d], Value) or indices[d].dtype not in (DType.i32, DType.i64):
        raise NotImplementedError("index_put with other than one integer index on one dim")
    index, before, after = indices[d], x.shape[:d], x.shape[d + 1:]
    count = math.prod(index.shape)
    flat = b.cast(b.view(index, (count,)), DType.i64)
    flat = b.select(b.binary(BinaryKind.lt, flat, 0), b.binary(BinaryKind.add, flat, x.shape[d]),
                    flat)
    picked = before + (count,) + after
    spread = b.broadcast(b.view(flat, (1,) * len(before) + (count,) + (1,) * len(after)), picked)
    src: Value | float = values
    if isinstance(values, Value):
        src = b.view(b.broadcast(b.cast(values, x.dtype), before + index.shape + after), picked)
    return _scatter(b, x, d, spread, src, "sum" if accumulate else "set")
