"""Data movement: views are free aliases when contiguous; permute, slice, expand, cat and
pad are DMA/vector copies scheduled by the kernels; embedding and index_select are
indexed-gather DMAs."""

from __future__ import annotations

from typing import Any

import torch

from compiler import graph as g
from compiler.graph import Value, base_of
from compiler.graph_builder import GraphBuilder, normalize_dim
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind, UnaryKind
from compiler.lowerings.indexing import (INDEX_DTYPES, gather_along, index_rows,
                                          gather_rows, stored)
from compiler.lowerings.registry import lowering

aten = torch.ops.aten


@lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def lower_view(b: GraphBuilder, x: Value, shape: list[int]) -> Value:
    return b.view(x, tuple(shape))


@lowering(aten.as_strided.default)
def lower_as_strided(b: GraphBuilder, x: Value, size: list[int], stride: list[int],
                     storage_offset: int | None = None) -> Value:
    """``as_strided`` that only adds or drops size-1 dims of a vector (the adaptive 1-D
    pool's decomposition puts a mean of ``[1, C]`` into ``[1, C, 1, 1]`` this way): the
    one longer dim has stride 1 and the whole vector, no offset — the same elements in
    the same order as ``x``'s, whatever the strides of the size-1 dims. Other strides
    fall back (they address ``x``'s storage, which the graph does not model)."""
    long = [(int(n), s) for n, s in zip(size, stride) if n != 1]
    count = 1
    for n in x.shape:
        count *= n
    if storage_offset or sum(n != 1 for n in x.shape) > 1 or len(long) > 1 \
            or (long and (long[0][1] != 1 or long[0][0] != count)):
        raise NotImplementedError("as_strided other than adding or dropping size-1 dims")
    return b.view(x, tuple(int(n) for n in size))


@lowering(aten.flatten.using_ints)
def lower_flatten(b: GraphBuilder, x: Value, start_dim: int = 0, end_dim: int = -1) -> Value:
    """``torch.flatten`` (kept whole when a program is exported without decompositions,
    as ``archsim run`` does): a view."""
    if not x.shape:
        return b.view(x, (1,))
    start = normalize_dim(start_dim, len(x.shape), b.source)
    end = normalize_dim(end_dim, len(x.shape), b.source)
    merged = 1
    for n in x.shape[start:end + 1]:
        merged *= n
    return b.view(x, x.shape[:start] + (merged,) + x.shape[end + 1:])


@lowering(aten.alias.default, aten.detach.default, aten.clone.default,
          aten.contiguous.default, aten.lift_fresh_copy.default)
def lower_identity(b: GraphBuilder, x: Value, *args: Any, **kwargs: Any) -> Value:
    return x


@lowering(aten.unsqueeze.default)
def lower_unsqueeze(b: GraphBuilder, x: Value, dim: int) -> Value:
    dim = normalize_dim(dim, len(x.shape) + 1, b.source)
    return b.view(x, x.shape[:dim] + (1,) + x.shape[dim:])


@lowering(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def lower_squeeze(b: GraphBuilder, x: Value, dims: Any = None) -> Value:
    rank = len(x.shape)
    if dims is None:
        dims = range(rank)
    elif isinstance(dims, int):
        dims = [dims]
    drop = {normalize_dim(d, rank, b.source) for d in dims}
    return b.view(x, tuple(n for i, n in enumerate(x.shape) if not (i in drop and n == 1)))


@lowering(aten.permute.default)
def lower_permute(b: GraphBuilder, x: Value, perm: list[int]) -> Value:
    return b.permute(x, perm)


@lowering(aten.t.default)
def lower_t(b: GraphBuilder, x: Value) -> Value:
    return b.permute(x, (1, 0)) if len(x.shape) == 2 else x


@lowering(aten.transpose.int)
def lower_transpose(b: GraphBuilder, x: Value, dim0: int, dim1: int) -> Value:
    rank = len(x.shape)
    perm = list(range(rank))
    d0, d1 = normalize_dim(dim0, rank, b.source), normalize_dim(dim1, rank, b.source)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return b.permute(x, perm)


@lowering(aten.expand.default)
def lower_expand(b: GraphBuilder, x: Value, size: list[int], *, implicit: bool = False) -> Value:
    rank = len(size)
    padded = (1,) * (rank - len(x.shape)) + x.shape
    shape = tuple(p if s == -1 else s for s, p in zip(size, padded))
    if shape == padded:
        return b.view(x, shape)
    return b.broadcast(x, shape)


@lowering(aten.repeat_interleave.self_int)
def lower_repeat_interleave(b: GraphBuilder, x: Value, repeats: int, dim: int | None = None,
                            *, output_size: int | None = None) -> Value:
    """Each slice along ``dim`` ``repeats`` times in a row (grouped-query attention's
    K/V heads): a broadcast along a new axis after ``dim``, merged into it."""
    if dim is None:
        x, dim = b.view(x, (-1,)), 0
    d = normalize_dim(dim, len(x.shape), b.source)
    split = x.shape[:d + 1] + (1,) + x.shape[d + 1:]
    wide = b.broadcast(b.view(x, split), split[:d + 1] + (repeats,) + split[d + 2:])
    return b.view(wide, x.shape[:d] + (x.shape[d] * repeats,) + x.shape[d + 1:])


@lowering(aten.slice.Tensor)
def lower_slice(b: GraphBuilder, x: Value, dim: int = 0, start: int | None = None,
                end: int | None = None, step: int = 1) -> Value:
    size = x.shape[normalize_dim(dim, len(x.shape), b.source)]
    start = 0 if start is None else start
    end = size if end is None else min(end, size)
    return b.slice(stored(b, x) if step != 1 else x, dim, start, end, step)


@lowering(aten.select.int)
def lower_select(b: GraphBuilder, x: Value, dim: int, index: int) -> Value:
    dim = normalize_dim(dim, len(x.shape), b.source)
    index = index % x.shape[dim]
    sliced = b.slice(x, dim, index, index + 1)
    return b.view(sliced, x.shape[:dim] + x.shape[dim + 1:])


@lowering(aten.split_with_sizes.default)
def lower_split_with_sizes(b: GraphBuilder, x: Value, sizes: list[int],
                           dim: int = 0) -> tuple[Value, ...]:
    out, start = [], 0
    for size in sizes:
        out.append(b.slice(x, dim, start, start + size))
        start += size
    return tuple(out)


@lowering(aten.split.Tensor)
def lower_split(b: GraphBuilder, x: Value, split_size: int, dim: int = 0) -> tuple[Value, ...]:
    total = x.shape[normalize_dim(dim, len(x.shape), b.source)]
    sizes = [min(split_size, total - s) for s in range(0, total, split_size)]
    return lower_split_with_sizes(b, x, sizes, dim)


@lowering(aten.cat.default)
def lower_cat(b: GraphBuilder, tensors: list[Value], dim: int = 0) -> Value:
    parts = [t for t in tensors if isinstance(t, Value) and t.shape != (0,)]
    if len(parts) == 1:
        return parts[0]
    dim = normalize_dim(dim, len(parts[0].shape), b.source)
    rotated = rotate_half_source(parts, dim)
    if rotated is not None:
        return b.add(g.RotateHalf(), (rotated,), rotated.shape, rotated.dtype, "rotate_half")
    dtype = parts[0].dtype
    parts = [b.cast(p, dtype) for p in parts]
    shape = list(parts[0].shape)
    shape[dim] = sum(p.shape[dim] for p in parts)
    return b.add(g.Cat(dim), parts, tuple(shape), dtype, "cat")


def rotate_half_source(parts: list[Value], dim: int) -> Value | None:
    """``x`` when ``parts`` along the last dim ``dim`` are ``(-x[..., h:], x[..., :h])``
    with ``h`` half of ``x``'s last dim (rotary's ``rotate_half``), else None. The
    slices and the negation become dead code: a :class:`compiler.graph.RotateHalf` reads
    ``x`` whole, in the scratchpad, where a cat would copy its two halves through DRAM
    after a kernel apiece stored them there."""
    if len(parts) != 2 or not parts[0].shape or dim != len(parts[0].shape) - 1:
        return None
    negated, low = (p.producer for p in parts)
    if negated is None or low is None or not isinstance(negated.spec, g.Unary) or \
            negated.spec.kind is not UnaryKind.neg:
        return None
    high = negated.inputs[0].producer
    if high is None or not isinstance(high.spec, g.Slice) or \
            not isinstance(low.spec, g.Slice):
        return None
    x = high.inputs[0]
    if low.inputs[0] is not x or x.dtype is not parts[0].dtype or \
            x.dtype is not parts[1].dtype:
        return None
    size = x.shape[dim]
    half = size // 2
    if size % 2 or high.spec != g.Slice(dim, half, size, 1) or \
            low.spec != g.Slice(dim, 0, half, 1):
        return None
    return x


@lowering(aten.constant_pad_nd.default)
def lower_constant_pad(b: GraphBuilder, x: Value, pad: list[int], value: float = 0.0) -> Value:
    pad = list(pad)
    while len(pad) > 4 and pad[-2:] == [0, 0]:  # MobileBERT pads [0, 0, 0, 1, 0, 0]
        pad = pad[:-2]
    pad += [0] * (4 - len(pad))
    if len(pad) > 4 or any(p < 0 for p in pad) or len(x.shape) < 2:
        raise NotImplementedError("constant_pad_nd beyond the last two dims or negative")
    left, right, top, bottom = pad[:4]
    return pad2d(b, x, (top, bottom, left, right), value)


def pad2d(b: GraphBuilder, x: Value, pads: tuple[int, int, int, int], value: float) -> Value:
    if not any(pads):
        return x
    top, bottom, left, right = pads
    shape = x.shape[:-2] + (x.shape[-2] + top + bottom, x.shape[-1] + left + right)
    return b.add(g.Pad(pads, float(value)), (x,), shape, x.dtype, "pad")


@lowering(aten.upsample_nearest2d.default, aten.upsample_nearest2d.vec)
def lower_upsample_nearest2d(b: GraphBuilder, x: Value, output_size: Any = None,
                             *scales: Any) -> Value:
    """Nearest upsampling by whole factors (``interpolate(scale_factor=2)``, U-Nets and
    FPNs): each pixel broadcast over a factor x factor block. Other sizes are not
    lowered."""
    n, c, h, w = x.shape
    if output_size:
        out_h, out_w = output_size
    else:
        factors = scales[-1] if scales and isinstance(scales[-1], (list, tuple)) else scales
        if len(factors) < 2 or any(f is None for f in factors[:2]):
            raise NotImplementedError("upsample without an output size or scales")
        out_h, out_w = int(h * factors[0]), int(w * factors[1])
    if out_h % h or out_w % w:
        raise NotImplementedError("nearest upsampling by a fractional factor")
    fh, fw = out_h // h, out_w // w
    blocks = b.broadcast(b.view(x, (n, c, h, 1, w, 1)), (n, c, h, fh, w, fw))
    return b.view(blocks, (n, c, out_h, out_w))


@lowering(aten.repeat.default)
def lower_repeat(b: GraphBuilder, x: Value, repeats: list[int]) -> Value:
    """``x.repeat(r0, r1, ...)``: each dim of size s becomes r copies of it, as a
    broadcast of [.., 1, s, ..] to [.., r, s, ..] (GPT-J's position table)."""
    repeats = [int(r) for r in repeats]
    shape = (1,) * (len(repeats) - len(x.shape)) + tuple(x.shape)
    if len(repeats) < len(x.shape):
        raise NotImplementedError("repeat with fewer repeats than dims")  # torch raises
    split = tuple(n for s in shape for n in (1, s))
    blown = tuple(n for r, s in zip(repeats, shape) for n in (r, s))
    out = b.broadcast(b.view(x, split), blown)
    return b.view(out, tuple(r * s for r, s in zip(repeats, shape)))


@lowering(aten.embedding.default)
def lower_embedding(b: GraphBuilder, weight: Value, indices: Value, padding_idx: int = -1,
                    scale_grad_by_freq: bool = False, sparse: bool = False) -> Value:
    return gather_rows(b, weight, indices)


@lowering(aten.index.Tensor)
def lower_index(b: GraphBuilder, x: Value, indices: list[Value | None]) -> Value:
    """``x[..., idx, ...]`` with one index tensor whose values are written in the model
    (Falcon's ``qkv[..., [-2], :]``): slices of ``x`` along that dim, one per run of
    consecutive indices, concatenated. Data-dependent indices are not lowered here."""
    given = [(d, v) for d, v in enumerate(indices) if v is not None]
    if not given or not all(isinstance(v, Value) for _, v in given):
        raise NotImplementedError("index with no index tensors")
    values = b.constant_of(given[0][1]) if len(given) == 1 else None
    if values is None or values.dim() != 1 or values.is_floating_point() or values.numel() == 0 \
            or (values.is_meta and values.numel() != 1):
        return index_rows(b, x, given)
    dim, index = given[0]
    size = x.shape[dim]
    if values.is_meta:  # a one-element constant of a shapes-only export: its slice costs
        values = torch.zeros(1, dtype=torch.int64)  # the same wherever it is
    picks = [int(v) + size if int(v) < 0 else int(v) for v in values.tolist()]
    if any(not 0 <= p < size for p in picks):
        raise NotImplementedError("index out of range")  # torch raises; the host says so
    parts = [b.slice(x, dim, lo, hi) for lo, hi in consecutive_runs(picks)]
    return parts[0] if len(parts) == 1 else lower_cat(b, parts, dim)


def consecutive_runs(picks: list[int]) -> list[list[int]]:
    """``[start, stop)`` of each run of consecutive positions in ``picks``, in order."""
    runs: list[list[int]] = []
    for p in picks:
        if runs and p == runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([p, p + 1])
    return runs


@lowering(aten.gather.default)
def lower_gather(b: GraphBuilder, x: Value, dim: int, index: Value,
                 sparse_grad: bool = False) -> Value:
    if len(x.shape) != 2 or len(index.shape) != 2:
        last = normalize_dim(dim, max(len(x.shape), 1), b.source) == len(x.shape) - 1
        if x.shape and last and x.shape[:-1] == index.shape[:-1]:
            # along the last dim, one row of picks per row (quantile's picks from sorted
            # rows): the 2-D masked-sum gather on the rows flattened
            rows = b.view(x, (-1, x.shape[-1]))
            picks = b.view(index, (-1, index.shape[-1]))
            try:
                return b.view(_gather_one_per_row(b, rows, picks), index.shape)
            except NotImplementedError:
                pass  # too wide for masked sums: a per-column gather
        return gather_along(b, x, normalize_dim(dim, len(x.shape), b.source), index)
    if normalize_dim(dim, 2, b.source) == 1:
        return _gather_one_per_row(b, x, index)
    if base_of(x) is not x or index.shape[1] > x.shape[1] or 0 in index.shape:
        raise NotImplementedError("gather needs a dense table at least as wide as the index")
    if index.dtype not in INDEX_DTYPES:
        index = b.cast(index, DType.i64)
    return b.add(g.Gather(per_column=True), (x, index), index.shape, x.dtype, "gather")


_GATHER_MASK_LIMIT = 1 << 22
"""Largest rows x picks x columns a dim-1 gather computes as masked sums."""


def _gather_one_per_row(b: GraphBuilder, x: Value, index: Value) -> Value:
    """``x[i, index[i, j]]`` (nll_loss picking each row's target, BERT's token-type ids
    picked by position): each row masked to its picked column against the column
    numbers, then summed — vector work over rows x picks x columns, where an indexed
    DMA would need the table as one-element rows. Exact: one term is kept, the others
    are zeros."""
    rows, cols = x.shape
    picks = index.shape[1]
    if index.shape[0] != rows:
        raise NotImplementedError("gather along dim 1 needs an index with the input's rows")
    if rows * picks * cols > _GATHER_MASK_LIMIT:
        raise NotImplementedError(f"gather along dim 1 of {rows}x{cols} picking {picks} per "
                                  f"row is too wide for masked sums")
    index = b.cast(index, DType.i64)
    if picks == 1:
        columns = b.arange(cols, (1, cols))
        hit = b.binary(BinaryKind.eq, index, columns)
        return b.reduce(ReduceKind.sum, b.select(hit, x, 0), (1,), keepdim=True)
    columns = b.arange(cols, (1, 1, cols))
    hit = b.binary(BinaryKind.eq, b.view(index, (rows, picks, 1)), columns)
    table = b.view(x, (rows, 1, cols))
    return b.reduce(ReduceKind.sum, b.select(hit, table, 0), (2,), keepdim=False)


@lowering(aten.scatter.value)
def lower_scatter_value(b: GraphBuilder, x: Value, dim: int, index: Value,
                        value: float) -> Value:
    """``x`` with ``value`` at one index per row along the last dim (nll_loss's
    backward): a select against the column numbers, no scatter DMA needed."""
    if len(x.shape) < 1 or normalize_dim(dim, len(x.shape), b.source) != len(x.shape) - 1 \
            or index.shape != x.shape[:-1] + (1,):
        raise NotImplementedError("scatter of a value is lowered only along the last dim "
                                  "with one index per row")
    columns = b.arange(x.shape[-1], (1,) * (len(x.shape) - 1) + (x.shape[-1],))
    hit = b.binary(BinaryKind.eq, b.cast(index, DType.i64), columns)
    return b.select(hit, value, x)
