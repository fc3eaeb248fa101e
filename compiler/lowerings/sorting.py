"""Sorting on the vector unit (NaN counts as the largest value; equal values keep their
order, so sorts are stable). Short rows sort by rank: every element compared with every
other along the sorted dim (n x n per row), its rank = how many come before it, then
each output slot picks the element of its rank with an equality mask against the slot
numbers. Longer rows go through a bitonic network of compare-exchange stages on
(value, position) pairs. Sorts beyond :data:`MAX_BITONIC` elements stay on the host
(visibly)."""

from __future__ import annotations

import numpy as np
import torch

from compiler import graph as g
from compiler.graph import Value
from compiler.graph_builder import GraphBuilder, normalize_dim
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind, UnaryKind
from compiler.lowerings.registry import lowering
from compiler.lowerings.windows import pad_dim, table

aten = torch.ops.aten
RANK_UP_TO = 32
"""Rows up to this long sort by rank (n x n comparisons); longer ones by a bitonic
network."""
MAX_SORTED = 1024
"""Longest row sorted by rank."""
MAX_COMPARISONS = 1 << 22
"""Most rows x n x n comparisons one rank sort may take."""
MAX_BITONIC = 1 << 12
"""Most elements (rows x row length padded to a power of two) one bitonic sort takes:
the network's steps grow as log^2 of the length and each is a few vector ops per element,
so compiling and simulating 4,096 elements already takes seconds on a laptop-class CPU
(8,000 took 17 s); longer sorts stay on the host, visibly, rather than stall an eager
call."""


def _last(b: GraphBuilder, x: Value, dim: int) -> tuple[Value, int]:
    """``x`` with ``dim`` moved last (and the normalized dim)."""
    rank = len(x.shape)
    dim = normalize_dim(dim, rank, b.source)
    perm = [d for d in range(rank) if d != dim] + [dim]
    return b.permute(x, perm), dim


def _back(b: GraphBuilder, x: Value, dim: int) -> Value:
    """Undo :func:`_last`."""
    rank = len(x.shape)
    perm = list(range(rank - 1))
    perm.insert(dim, rank - 1)
    return b.permute(x, perm)


def _ranks(b: GraphBuilder, x: Value, descending: bool) -> Value:
    """Each element's place along the last dim in a stable sort."""
    n = x.shape[-1]
    rows = 1
    for s in x.shape[:-1]:
        rows *= s
    if n > MAX_SORTED or rows * n * n > MAX_COMPARISONS:
        raise NotImplementedError(f"sorting {rows} rows of {n} exceeds the device's "
                                  f"rank-sort bound ({MAX_SORTED} per row, "
                                  f"{MAX_COMPARISONS} comparisons)")
    mine = b.view(x, x.shape + (1,))                    # [..., i, 1]
    other = b.view(x, x.shape[:-1] + (1, n))            # [..., 1, j]
    first, second = (mine, other) if descending else (other, mine)
    before = b.binary(BinaryKind.lt, first, second)     # other strictly before mine
    same = b.binary(BinaryKind.eq, mine, other)
    if x.dtype.is_float:
        nan_mine = b.binary(BinaryKind.ne, mine, mine)
        nan_other = b.binary(BinaryKind.ne, other, other)
        nan_first = nan_mine if not descending else nan_other
        nan_second = nan_other if not descending else nan_mine
        # NaN is the largest: it comes after every number ascending, before descending
        before = b.binary(BinaryKind.logical_or, before, b.binary(
            BinaryKind.logical_and, nan_first, b.unary(UnaryKind.logical_not, nan_second)))
        same = b.binary(BinaryKind.logical_or, same,
                        b.binary(BinaryKind.logical_and, nan_mine, nan_other))
    earlier = table(b, np.tril(np.ones((n, n), dtype=bool), -1), DType.bool)  # j < i
    ahead = b.binary(BinaryKind.logical_or, before,
                     b.binary(BinaryKind.logical_and, same, earlier))
    return b.reduce(ReduceKind.sum, ahead, (-1,), keepdim=False)


def _by_rank(b: GraphBuilder, x: Value, rank: Value, slots: np.ndarray) -> tuple[Value, Value]:
    """(values, positions) of the elements whose ranks are ``slots``, in that order."""
    n, count = x.shape[-1], len(slots)
    lead = x.shape[:-1]
    hit = b.binary(BinaryKind.eq, b.view(rank, lead + (n, 1)),
                   table(b, slots.reshape((1,) * len(lead) + (1, count)), DType.i64))
    zero = 0.0 if x.dtype.is_float else 0
    values = b.reduce(ReduceKind.sum, b.select(hit, b.view(x, lead + (n, 1)), zero), (-2,),
                      keepdim=False)
    where = b.arange(n, (1,) * len(lead) + (n, 1))
    index = b.reduce(ReduceKind.sum, b.select(hit, where, 0), (-2,), keepdim=False)
    return b.cast(values, x.dtype), index


def _after(b: GraphBuilder, a: Value, ai: Value, c: Value, ci: Value,
           descending: bool) -> Value:
    """Whether (value a, position ai) sorts after (c, ci): NaN largest, ties by
    position (so the order is total and the sort stable)."""
    first, second = (c, a) if descending else (a, c)
    after = b.binary(BinaryKind.gt, first, second)
    same = b.binary(BinaryKind.eq, a, c)
    if a.dtype.is_float:
        nan_a, nan_c = b.binary(BinaryKind.ne, a, a), b.binary(BinaryKind.ne, c, c)
        nan_1, nan_2 = (nan_c, nan_a) if descending else (nan_a, nan_c)
        after = b.binary(BinaryKind.logical_or, after, b.binary(
            BinaryKind.logical_and, nan_1, b.unary(UnaryKind.logical_not, nan_2)))
        same = b.binary(BinaryKind.logical_or, same,
                        b.binary(BinaryKind.logical_and, nan_a, nan_c))
    later = b.binary(BinaryKind.logical_and, same, b.binary(BinaryKind.gt, ai, ci))
    return b.binary(BinaryKind.logical_or, after, later)


def _bitonic(b: GraphBuilder, x: Value, descending: bool) -> tuple[Value, Value]:
    """A bitonic sorting network over the last dim, padded to a power of two (with
    values that sort after every element); each compare-exchange stage is vector work
    on the two halves of every block: log2(n) * (log2(n) + 1) / 2 stages."""
    n = x.shape[-1]
    lead = x.shape[:-1]
    size = 1 << max(1, (n - 1).bit_length())
    rows = 1
    for s in lead:
        rows *= s
    if rows * size > MAX_BITONIC:
        raise NotImplementedError(f"sorting {rows} rows of {n} exceeds the device's "
                                  f"bitonic-sort bound ({MAX_BITONIC} elements)")
    fill = (float("-inf") if descending else float("nan")) if x.dtype.is_float else \
        (-(2 ** 62) if descending else 2 ** 62)
    values = pad_dim(b, x, -1, 0, size - n, fill) if size > n else x
    index = b.broadcast(b.arange(size, (1,) * len(lead) + (size,)), lead + (size,))
    k = 2
    while k <= size:
        j = k // 2
        while j >= 1:
            blocks = size // (2 * j)
            split = lead + (blocks, 2, j)
            v, i = b.view(values, split), b.view(index, split)
            lo_v, hi_v = b.slice(v, -2, 0, 1), b.slice(v, -2, 1, 2)
            lo_i, hi_i = b.slice(i, -2, 0, 1), b.slice(i, -2, 1, 2)
            starts = np.arange(blocks)[:, None] * 2 * j + np.arange(j)[None, :]
            down = table(b, ((starts & k) != 0).reshape((1,) * len(lead) + (blocks, 1, j)),
                         DType.bool)
            swap = b.binary(BinaryKind.ne, _after(b, lo_v, lo_i, hi_v, hi_i, descending),
                            down)
            values = b.view(b.add(g.Cat(len(split) - 2), (b.select(swap, hi_v, lo_v),
                                                          b.select(swap, lo_v, hi_v)),
                                  split, values.dtype, "cat"), lead + (size,))
            index = b.view(b.add(g.Cat(len(split) - 2), (b.select(swap, hi_i, lo_i),
                                                         b.select(swap, lo_i, hi_i)),
                                 split, DType.i64, "cat"), lead + (size,))
            j //= 2
        k *= 2
    return b.slice(values, -1, 0, n), b.slice(index, -1, 0, n)


def _sorted(b: GraphBuilder, x: Value, dim: int, descending: bool,
            slots: np.ndarray | None = None) -> tuple[Value, Value]:
    if not x.shape:
        return x, b.splat(0, (), DType.i64)
    moved, dim = _last(b, x, dim)
    if x.dtype is DType.bool:
        moved = b.cast(moved, DType.i32)
    n = moved.shape[-1]
    if n > RANK_UP_TO:
        values, index = _bitonic(b, moved, descending)
        if slots is not None:
            values = b.slice(values, -1, int(slots[0]), int(slots[-1]) + 1)
            index = b.slice(index, -1, int(slots[0]), int(slots[-1]) + 1)
    else:
        rank = _ranks(b, moved, descending)
        values, index = _by_rank(b, moved, rank, np.arange(n) if slots is None else slots)
    return b.cast(_back(b, values, dim), x.dtype), _back(b, index, dim)


@lowering(aten.sort.default)
def lower_sort(b: GraphBuilder, x: Value, dim: int = -1,
               descending: bool = False) -> tuple[Value, Value]:
    return _sorted(b, x, dim, descending)


@lowering(aten.sort.stable)
def lower_sort_stable(b: GraphBuilder, x: Value, *, stable: bool | None = None, dim: int = -1,
                      descending: bool = False) -> tuple[Value, Value]:
    return _sorted(b, x, dim, descending)


@lowering(aten.topk.default)
def lower_topk(b: GraphBuilder, x: Value, k: int, dim: int = -1, largest: bool = True,
               sorted: bool = True) -> tuple[Value, Value]:
    """The first ``k`` slots of a sort (largest first, or smallest first)."""
    return _sorted(b, x, dim, largest, np.arange(int(k)))


@lowering(aten.kthvalue.default)
def lower_kthvalue(b: GraphBuilder, x: Value, k: int, dim: int = -1,
                   keepdim: bool = False) -> tuple[Value, Value]:
    """The k-th smallest: the one slot of rank ``k - 1``."""
    if not x.shape:
        return x, b.splat(0, (), DType.i64)
    values, index = _sorted(b, x, dim, False, np.array([int(k) - 1]))
    if keepdim:
        return values, index
    d = normalize_dim(dim, len(x.shape), b.source)
    shape = x.shape[:d] + x.shape[d + 1:]
    return b.view(values, shape), b.view(index, shape)


def _median(b: GraphBuilder, x: Value, dim: int, ignore_nan: bool) -> tuple[Value, Value]:
    """The lower median along ``dim`` (kept, size 1) and where it is: the element whose
    rank is the middle slot, a per-row slot when NaNs count (median: the first NaN;
    nanmedian: the middle of the numbers)."""
    moved, dim = _last(b, x, dim)
    n = moved.shape[-1]
    rank = _ranks(b, moved, False)
    slot: Value | int = (n - 1) // 2
    if x.dtype.is_float:
        nans = b.reduce(ReduceKind.sum, b.binary(BinaryKind.ne, moved, moved), (-1,), True)
        numbers = b.binary(BinaryKind.sub, n, nans)
        if ignore_nan:
            half = b.binary(BinaryKind.div, b.binary(BinaryKind.sub, numbers, 1), 2.0)
            slot = b.binary(BinaryKind.max, b.cast(b.unary(UnaryKind.floor, half), DType.i64),
                            0)
        else:
            slot = b.select(b.binary(BinaryKind.gt, nans, 0), numbers, (n - 1) // 2)
    hit = b.binary(BinaryKind.eq, rank, slot)
    zero = 0.0 if x.dtype.is_float else 0
    values = b.reduce(ReduceKind.sum, b.select(hit, moved, zero), (-1,), True)
    where = b.arange(n, (1,) * (len(moved.shape) - 1) + (n,))
    index = b.reduce(ReduceKind.sum, b.select(hit, where, 0), (-1,), True)
    return b.cast(_back(b, values, dim), x.dtype), _back(b, index, dim)


def _median_dim(ignore_nan: bool):
    def lower(b: GraphBuilder, x: Value, dim: int = -1,
              keepdim: bool = False) -> tuple[Value, Value]:
        if not x.shape:
            return x, b.splat(0, (), DType.i64)
        values, index = _median(b, x, dim, ignore_nan)
        if keepdim:
            return values, index
        d = normalize_dim(dim, len(x.shape), b.source)
        shape = x.shape[:d] + x.shape[d + 1:]
        return b.view(values, shape), b.view(index, shape)
    return lower


def _median_all(ignore_nan: bool):
    def lower(b: GraphBuilder, x: Value) -> Value:
        if not x.shape:
            return x
        return b.view(_median(b, b.view(x, (-1,)), 0, ignore_nan)[0], ())
    return lower


lowering(aten.median.dim)(_median_dim(False))
lowering(aten.nanmedian.dim)(_median_dim(True))
lowering(aten.median.default)(_median_all(False))
lowering(aten.nanmedian.default)(_median_all(True))
