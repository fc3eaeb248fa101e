"""Cumulative ops along a dim: cumsum, cumprod, logcumsumexp, cummax/cummin (values and
indices). A running result is a log-step scan: step ``s`` combines each element with
the one ``s`` before it (two slices, one vector op, a concat), log2(length) steps; a
short last-dim cumsum is instead one masked sum (see :func:`lower_cumsum`)."""

from __future__ import annotations

import torch

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder, normalize_dim
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind
from compiler.lowerings.movement import lower_cat
from compiler.lowerings.registry import LoweringFn, lowering
from compiler.torch_types import ir_dtype

aten = torch.ops.aten


def scan(b: GraphBuilder, x: Value, dim: int, kind: BinaryKind) -> Value:
    """Inclusive running ``kind`` (an associative, commutative vector op) along ``dim``
    (Hillis-Steele: element i takes ``x[i] op x[i - s]`` for s = 1, 2, 4...)."""
    if not x.shape:
        return x
    dim = normalize_dim(dim, len(x.shape), b.source)
    n = x.shape[dim]
    s = 1
    while s < n:
        combined = b.binary(kind, b.slice(x, dim, s, n), b.slice(x, dim, 0, n - s))
        x = lower_cat(b, [b.slice(x, dim, 0, s), combined], dim)
        s *= 2
    return x


def _accumulator(b: GraphBuilder, x: Value, dtype: torch.dtype | None) -> Value:
    """The dtype torch accumulates in: the requested one, else floats as they are and
    integers and bools as i64."""
    if dtype is not None:
        return b.cast(x, ir_dtype(dtype, b.source))
    return x if x.dtype.is_float else b.cast(x, DType.i64)


_CUMSUM_MASK_LIMIT = 1 << 22
"""Largest rows x length x length a last-dim cumsum computes as masked sums."""


@lowering(aten.cumsum.default)
def lower_cumsum(b: GraphBuilder, x: Value, dim: int, *,
                 dtype: torch.dtype | None = None) -> Value:
    """Running sum. Along a short last dim (RoBERTa's position ids from the padding
    mask) element j sums the elements k <= j picked by a triangular mask: vector work
    over rows x length x length in one reduce. Otherwise a log-step scan of adds."""
    x = _accumulator(b, x, dtype)
    rank = len(x.shape)
    if rank == 0:
        return x
    length = x.shape[-1]
    rows = 1
    for n in x.shape[:-1]:
        rows *= n
    if normalize_dim(dim, rank, b.source) != rank - 1 \
            or rows * length * length > _CUMSUM_MASK_LIMIT:
        return scan(b, x, dim, BinaryKind.add)
    later = b.arange(length, (length, 1))  # j: the output position
    earlier = b.arange(length, (1, length))  # k: the summed position
    keep = b.binary(BinaryKind.le, earlier, later)
    table = b.view(x, x.shape[:-1] + (1, length))
    return b.reduce(ReduceKind.sum, b.select(keep, table, 0), (rank,), keepdim=False)


@lowering(aten.cumprod.default)
def lower_cumprod(b: GraphBuilder, x: Value, dim: int, *,
                  dtype: torch.dtype | None = None) -> Value:
    return scan(b, _accumulator(b, x, dtype), dim, BinaryKind.mul)


@lowering(aten.logcumsumexp.default, aten._logcumsumexp.default)
def lower_logcumsumexp(b: GraphBuilder, x: Value, dim: int) -> Value:
    """A scan of the vector engine's logaddexp (stable: no overflow of exp)."""
    return scan(b, x if x.dtype.is_float else b.cast(x, DType.f32), dim, BinaryKind.logaddexp)


def _running_extreme(kind: BinaryKind) -> LoweringFn:
    """cummax/cummin: the running extreme, and where it was last attained. Element j
    attains its own running extreme where ``x[j] == running[j]``; the running index is
    a running max of those positions. From the first NaN on, the values are NaN and the
    index is the latest NaN's position (as torch)."""
    def lower(b: GraphBuilder, x: Value, dim: int) -> tuple[Value, Value]:
        if not x.shape:
            return x, b.splat(0, (), DType.i64)
        d = normalize_dim(dim, len(x.shape), b.source)
        n = x.shape[d]
        values = scan(b, x, d, kind)
        shape = tuple(n if i == d else 1 for i in range(len(x.shape)))
        position = b.arange(n, shape)
        attained = b.binary(BinaryKind.eq, x, values)
        if x.dtype.is_float:  # a NaN is attained where it stands
            attained = b.binary(BinaryKind.logical_or, attained, b.binary(BinaryKind.ne, x, x))
        index = scan(b, b.select(attained, position, 0), d, BinaryKind.max)
        return values, index
    return lower


lowering(aten.cummax.default)(_running_extreme(BinaryKind.max))
lowering(aten.cummin.default)(_running_extreme(BinaryKind.min))
