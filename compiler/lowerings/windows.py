"""Helpers shared by pooling, resampling and padding: compile-time tables, padding of
any dims, picking positions along one axis (strided slices, runs of slices, or an
indexed-gather DMA when the positions are irregular), and windows of taps."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler import graph as g
from compiler.graph import Value
from compiler.graph_builder import GraphBuilder, normalize_dim
from compiler.ir.dtypes import DType
from compiler.lowerings.indexing import dense
from compiler.lowerings.movement import consecutive_runs


def table(b: GraphBuilder, array: np.ndarray, dtype: DType) -> Value:
    """A compile-time tensor (index or weight table) kept in DRAM with the program."""
    array = np.ascontiguousarray(np.asarray(array).astype(dtype.storage))
    value = b.add(g.Constant(), (), tuple(array.shape), dtype, "table")
    b.graph.constants[value.id] = array
    return value


def pad_dim(b: GraphBuilder, x: Value, dim: int, lo: int, hi: int, value: float) -> Value:
    """Constant padding of one dim; negative amounts crop (a slice). Padding is a copy
    with the fill concatenated on either side."""
    dim = normalize_dim(dim, len(x.shape), b.source)
    if lo < 0 or hi < 0:
        x = b.slice(x, dim, max(-lo, 0), x.shape[dim] - max(-hi, 0))
        lo, hi = max(lo, 0), max(hi, 0)
    if not lo and not hi:
        return x
    parts = []
    for amount in (lo, None, hi):
        if amount is None:
            parts.append(x)
        elif amount:
            shape = x.shape[:dim] + (amount,) + x.shape[dim + 1:]
            parts.append(b.splat(value, shape, x.dtype))
    shape = x.shape[:dim] + (x.shape[dim] + lo + hi,) + x.shape[dim + 1:]
    return b.add(g.Cat(dim), parts, shape, x.dtype, "cat")


def pad_trailing(b: GraphBuilder, x: Value, pads: Sequence[tuple[int, int]],
                 value: float) -> Value:
    """Constant padding of the last ``len(pads)`` dims (``pads[i]`` = (before, after) of
    dim ``rank - len(pads) + i``). The last two dims are padded by the DMA's pad
    (one copy); further dims by concatenation."""
    rank = len(x.shape)
    first = rank - len(pads)
    cropped = [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
    for i, (lo, hi) in enumerate(pads):
        if lo < 0 or hi < 0:
            x = pad_dim(b, x, first + i, min(lo, 0), min(hi, 0), value)
    tail = cropped[-2:] if rank >= 2 and len(cropped) >= 2 else []
    for i, (lo, hi) in enumerate(cropped[:len(cropped) - len(tail)]):
        x = pad_dim(b, x, first + i, lo, hi, value)
    if tail and any(lo or hi for lo, hi in tail):
        (top, bottom), (left, right) = tail
        shape = x.shape[:-2] + (x.shape[-2] + top + bottom, x.shape[-1] + left + right)
        x = b.add(g.Pad((top, bottom, left, right), float(value)), (x,), shape, x.dtype,
                  "pad")
    return x


def take(b: GraphBuilder, x: Value, dim: int, index: Sequence[int] | np.ndarray) -> Value:
    """``x.index_select(dim, index)`` for positions known at compile time: one strided
    slice when they step evenly, a few slices concatenated when they come in runs, else
    the axis moved to the front and its rows gathered by an indexed DMA."""
    dim = normalize_dim(dim, len(x.shape), b.source)
    picks = [int(i) for i in index]
    n = len(picks)
    if n == 1 or (n > 1 and picks[1] > picks[0]
                  and all(picks[i + 1] - picks[i] == picks[1] - picks[0] for i in range(n - 1))):
        step = picks[1] - picks[0] if n > 1 else 1
        return b.slice(x, dim, picks[0], picks[-1] + 1, step)
    runs = consecutive_runs(picks)
    if len(runs) <= 4:
        parts = [b.slice(x, dim, lo, hi) for lo, hi in runs]
        shape = x.shape[:dim] + (n,) + x.shape[dim + 1:]
        return b.add(g.Cat(dim), parts, shape, x.dtype, "cat")
    rank = len(x.shape)
    perm = (dim,) + tuple(d for d in range(rank) if d != dim)
    moved = b.permute(x, perm)
    rest = 1
    for s in moved.shape[1:]:
        rest *= s
    flat = b.view(moved, (moved.shape[0], rest))
    flat = dense(b, flat)
    rows = b.add(g.Gather(), (flat, table(b, np.array(picks), DType.i64)), (n, rest),
                 flat.dtype, "gather")
    out = b.view(rows, (n,) + moved.shape[1:])
    inverse = [0] * rank
    for i, p in enumerate(perm):
        inverse[p] = i
    return b.permute(out, inverse)


def strided_tap(b: GraphBuilder, x: Value, dim: int, tap: int, count: int, stride: int,
                dilation: int) -> Value:
    """The ``tap``-th element of each of ``count`` windows along ``dim``: a strided slice."""
    start = tap * dilation
    return b.slice(x, dim, start, start + (count - 1) * stride + 1, stride)
