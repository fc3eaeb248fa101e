"""Indexing by tensors and writes into slices: picks computed at run time become
indexed-gather DMAs (row numbers computed on the vector unit), and a value that is a
reshape of another is copied when a kernel must address it by its own dims."""

from __future__ import annotations

import torch

from compiler import graph as g
from compiler.graph import Value, base_of
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind
from compiler.lowerings.registry import lowering

aten = torch.ops.aten

INDEX_DTYPES = (DType.i32, DType.i64)


def gather_rows(b: GraphBuilder, table: Value, indices: Value) -> Value:
    """``table[indices]`` for a dense 2-D table: one indexed DMA per tile. Indices of any
    shape are flattened; the result has shape ``indices.shape + (cols,)``."""
    if len(table.shape) != 2 or base_of(table) is not table:
        raise NotImplementedError("row gather needs a dense 2-D table (not a view)")
    count = 1
    for n in indices.shape:
        count *= n
    if count == 0:
        raise NotImplementedError("row gather of no indices")
    if indices.dtype not in INDEX_DTYPES:
        indices = b.cast(indices, DType.i64)
    flat = indices if indices.shape == (count,) else b.view(indices, (count,))
    cols = table.shape[1]
    rows = b.add(g.Gather(), (table, flat), (count, cols), table.dtype, "gather")
    shape = indices.shape + (cols,)
    return rows if shape == rows.shape else b.view(rows, shape)


def dense(b: GraphBuilder, x: Value) -> Value:
    """``x`` itself if it owns its storage, else a copy that does: a cat of one, which the
    graph passes keep (an elementwise copy such as ``x + 0`` of a view gets the view
    moved below it again by view sinking, so the result would still be a view)."""
    return x if base_of(x) is x else b.add(g.Cat(0), (x,), x.shape, x.dtype, "cat")


def stored(b: GraphBuilder, x: Value) -> Value:
    """``x`` laid out as a tensor of its own shape in DRAM: ``x`` itself unless it is a
    reshape of another value, which is copied (a cat of one). Kernels that address
    their input by its dims (convolution windows, strided slices) need this."""
    base = base_of(x)
    return x if base is x or base.shape == x.shape else dense(b, x)


def index_rows(b: GraphBuilder, x: Value, given: list[tuple[int, Value]]) -> Value:
    """``x[..., i0, i1, ...]`` with index tensors computed at run time (CLIP's
    ``hidden[arange(B), ids.argmax(-1)]``, CodeGen's ``table[position_ids]``): the
    indexed dims moved to the front and flattened into rows, each pick's row number computed on the vector
    unit (negative indices wrapped as torch does), then one indexed DMA per tile. A
    table that is not a dense 2-D tensor is copied into one first (timed)."""
    k = len(given)
    dims = [d for d, _ in given]
    if dims != list(range(k)):  # indexed dims to the front, then the picks put back where
        rest = [d for d in range(len(x.shape)) if d not in dims]  # torch puts them: at the
        moved = b.permute(x, (*dims, *rest))                     # first indexed dim if the
        out = index_rows(b, moved, [(i, v) for i, (_, v) in enumerate(given)])  # dims are
        if dims != list(range(dims[0], dims[0] + k)):            # consecutive, else first
            return out
        picked = len(out.shape) - (len(x.shape) - k)
        before = list(range(picked, picked + dims[0]))
        return b.permute(out, (*before, *range(picked), *range(picked + dims[0],
                                                                len(out.shape))))
    if any(v.dtype not in INDEX_DTYPES for _, v in given):
        raise NotImplementedError("index by a mask or a non-integer tensor")
    rows = 1
    for n in x.shape[:k]:
        rows *= n
    flat: Value | None = None
    stride = 1
    for dim, index in reversed(given):
        size = x.shape[dim]
        index = b.cast(index, DType.i64)
        index = b.select(b.binary(BinaryKind.lt, index, 0), b.binary(BinaryKind.add, index, size),
                         index)
        term = index if stride == 1 else b.binary(BinaryKind.mul, index, stride)
        flat = term if flat is None else b.binary(BinaryKind.add, flat, term)
        stride *= size
    rest = tuple(x.shape[k:])
    cols = 1
    for n in rest:
        cols *= n
    # [rows, cols]: a 2-D tensor indexed on both dims is [numel, 1], not itself
    table = dense(b, x if x.shape == (rows, cols) else b.view(x, (rows, cols)))
    picked = gather_rows(b, table, flat)
    return b.view(picked, flat.shape + rest)


def gather_along(b: GraphBuilder, x: Value, dim: int, index: Value) -> Value:
    """``torch.gather`` along ``dim`` of an N-D tensor whose index matches it on every
    other dim (GPT-J's rotary table picked by position): ``dim`` moved to the front and
    the rest flattened into columns, it is the dim-0 gather of a 2-D table, one picked
    element per (row, column)."""
    if len(index.shape) != len(x.shape) or any(
            i != n for k, (i, n) in enumerate(zip(index.shape, x.shape)) if k != dim):
        raise NotImplementedError("gather with an index that differs from the input on "
                                  "dims other than the gathered one")
    order = (dim, *(k for k in range(len(x.shape)) if k != dim))
    moved_x, moved_index = b.permute(x, order), b.permute(index, order)
    cols = 1
    for n in moved_x.shape[1:]:
        cols *= n
    table = dense(b, b.view(moved_x, (x.shape[dim], cols)))
    picks = dense(b, b.view(moved_index, (index.shape[dim], cols)))
    if picks.dtype not in INDEX_DTYPES:
        picks = b.cast(picks, DType.i64)
    out = b.add(g.Gather(per_column=True), (table, picks), picks.shape, x.dtype, "gather")
    out = b.view(out, moved_index.shape)
    return b.permute(out, tuple(order.index(k) for k in range(len(order))))


@lowering(aten.slice_scatter.default)
def lower_slice_scatter(b: GraphBuilder, x: Value, src: Value, dim: int = 0,
                        start: int | None = None, end: int | None = None,
                        step: int = 1) -> Value:
    """``x`` with ``src`` written into ``x[start:end]`` along ``dim`` (BART's shifted
    decoder ids): the slices of ``x`` around it and ``src``, concatenated."""
    from compiler.lowerings.movement import lower_cat

    if step != 1:
        raise NotImplementedError("slice_scatter with a step")
    size = x.shape[dim]
    begin, stop, _ = slice(start, end).indices(size)
    stop = max(stop, begin)
    parts = [b.slice(x, dim, 0, begin), b.cast(src, x.dtype), b.slice(x, dim, stop, size)]
    return lower_cat(b, [p for p in parts if p.shape[dim]], dim)


@lowering(aten.copy.default)
def lower_copy(b: GraphBuilder, x: Value, src: Value, non_blocking: bool = False) -> Value:
    """Functional ``x.copy_(src)``: ``src`` broadcast to ``x``'s shape in ``x``'s dtype."""
    return b.broadcast(b.cast(src, x.dtype), x.shape)
