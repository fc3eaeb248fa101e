"""Pooling. Plain 2-D max/avg windows run on the pooling unit (an explicitly padded
input); everything else is separable vector work, one spatial axis at a time: each
window's taps are strided slices (or, for adaptive pooling, picks of compile-time
positions) combined by max (carrying the argmax, first maximum wins, NaN propagates as
on CPU) or by sum (then divided by a compile-time table of window sizes)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from compiler import graph as g
from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind
from compiler.lowerings.indexing import stored
from compiler.lowerings.registry import lowering
from compiler.lowerings.windows import pad_trailing, strided_tap, table, take

aten = torch.ops.aten
Tap = Callable[[Value, int], Value]
"""``tap(v, t)``: the t-th element of every window along one axis of ``v``."""


def _ints(v: Any, nd: int) -> tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * nd
    v = [int(i) for i in v]
    return tuple(v) * nd if len(v) == 1 else tuple(v)


def _out_size(size: int, kernel: int, stride: int, dilation: int, pad_total: int) -> int:
    return (size + pad_total - dilation * (kernel - 1) - 1) // stride + 1


def _geometry(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> tuple[int, int]:
    """(windows, padding after) of one axis as torch counts them (a ceil_mode window
    must start inside the input or its leading padding)."""
    span = d * (k - 1) + 1
    room = size + 2 * p - span
    out = (-(-room // s) if ceil else room // s) + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out, (out - 1) * s + span - size - p


def _reach(size: int, k: int, s: int, p: int, d: int, out: int) -> tuple[int, int]:
    """(taps, padding after) that matter along one axis: a tap whose every position lies
    past the input reads only the padding, which can never win a max nor add to a sum
    (EfficientNet's pooler is ``AvgPool2d(2560, ceil_mode=True)`` on a 7x7 image: 2,560
    taps over a 2,560-wide padded copy, for 7 that read anything)."""
    taps = min(k, -(-(p + size) // d))
    return taps, max(0, (out - 1) * s + (taps - 1) * d + 1 - size - p)


# ---------------------------------------------------------------- combining taps


def _max_taps(b: GraphBuilder, values: Value, index: Value, tap: Tap,
              taps: int) -> tuple[Value, Value]:
    """Running max over the taps, keeping where it came from (a later tap wins only when
    strictly greater or NaN, as CPU's scan)."""
    best, where = tap(values, 0), tap(index, 0)
    for t in range(1, taps):
        v, i = tap(values, t), tap(index, t)
        better = b.binary(BinaryKind.logical_or, b.binary(BinaryKind.gt, v, best),
                          b.binary(BinaryKind.ne, v, v))
        best = b.select(better, v, best)
        where = b.select(better, i, where)
    return best, where


def _sum_taps(b: GraphBuilder, x: Value, tap: Tap, taps: int,
              valid: Sequence[np.ndarray | None] | None = None, dim: int = 0) -> Value:
    total: Value | None = None
    for t in range(taps):
        v = tap(x, t)
        mask = valid[t] if valid is not None else None
        if mask is not None and not mask.all():
            shape = [1] * len(v.shape)
            shape[dim] = len(mask)
            v = b.select(table(b, mask.reshape(shape), DType.bool), v, 0.0)
        total = v if total is None else b.binary(BinaryKind.add, total, v)
    assert total is not None
    return total


def _flat_index(b: GraphBuilder, spatial: Sequence[int], rank: int,
                pads: Sequence[tuple[int, int]] = ()) -> Value:
    """The flat spatial position of every element (-1 in the padding), as CPU's
    indices count them."""
    index = np.arange(math.prod(spatial), dtype=np.int64).reshape(spatial)
    for axis, (lo, hi) in enumerate(pads):
        index = np.moveaxis(index, axis, 0)
        index = index[max(-lo, 0):index.shape[0] - max(-hi, 0)]
        index = np.concatenate([np.full((max(lo, 0),) + index.shape[1:], -1, np.int64), index,
                                np.full((max(hi, 0),) + index.shape[1:], -1, np.int64)])
        index = np.moveaxis(index, 0, axis)
    return table(b, index.reshape((1,) * (rank - len(spatial)) + index.shape), DType.i64)


# ---------------------------------------------------------------- windowed pooling


def _max_windows(b: GraphBuilder, x: Value, nd: int, kernel: Any, stride: Any, padding: Any,
                 dilation: Any, ceil: bool) -> tuple[Value, Value]:
    """Max pooling of the last ``nd`` dims with CPU's indices (flat within each plane)."""
    rank, spatial = len(x.shape), x.shape[-nd:]
    ks, ds, ps = _ints(kernel, nd), _ints(dilation, nd), _ints(padding, nd)
    ss = _ints(stride, nd) if stride else ks
    geo = [_geometry(spatial[a], ks[a], ss[a], ps[a], ds[a], ceil) for a in range(nd)]
    reach = [_reach(spatial[a], ks[a], ss[a], ps[a], ds[a], geo[a][0]) for a in range(nd)]
    pads = [(ps[a], reach[a][1]) for a in range(nd)]
    values = _strided_ready(b, pad_trailing(b, x, pads, float("-inf")), ss)
    index = _flat_index(b, spatial, rank, pads)
    for a in reversed(range(nd)):
        dim, count = rank - nd + a, geo[a][0]
        values, index = _max_taps(
            b, values, index,
            lambda v, t, dim=dim, a=a, count=count: strided_tap(b, v, dim, t, count, ss[a],
                                                                 ds[a]), reach[a][0])
    return values, b.broadcast(index, values.shape)


def _strided_ready(b: GraphBuilder, x: Value, strides: Sequence[int]) -> Value:
    """``x`` ready for the windows' strided slices: stored as a tensor of its own shape
    when a stride is over 1 and ``x`` is a reshape (Funnel's ``x[:, None]`` pooled with
    ``ceil_mode``), which a strided slice cannot address."""
    return stored(b, x) if any(s > 1 for s in strides) else x


def _window_sizes(size: int, k: int, s: int, p: int, out: int,
                  include_pad: bool) -> np.ndarray:
    """How many elements CPU's avg_pool divides each window's sum by, along one axis."""
    start = np.arange(out) * s - p
    end = np.minimum(start + k, size + p)
    if include_pad:
        return (end - start).astype(np.float64)
    return (np.minimum(end, size) - np.maximum(start, 0)).astype(np.float64)


def _avg_windows(b: GraphBuilder, x: Value, nd: int, kernel: Any, stride: Any, padding: Any,
                 ceil: bool, include_pad: bool, divisor: int | None) -> Value:
    """Average pooling of the last ``nd`` dims: separable window sums, then one divide
    by the window sizes (a compile-time table)."""
    rank, spatial = len(x.shape), x.shape[-nd:]
    ks, ps = _ints(kernel, nd), _ints(padding, nd)
    ss = _ints(stride, nd) if stride else ks
    geo = [_geometry(spatial[a], ks[a], ss[a], ps[a], 1, ceil) for a in range(nd)]
    reach = [_reach(spatial[a], ks[a], ss[a], ps[a], 1, geo[a][0]) for a in range(nd)]
    total = _strided_ready(b, pad_trailing(b, b.cast(x, DType.f32),
                                           [(ps[a], reach[a][1]) for a in range(nd)], 0.0), ss)
    for a in reversed(range(nd)):
        dim, count = rank - nd + a, geo[a][0]
        total = _sum_taps(b, total, lambda v, t, dim=dim, a=a, count=count:
                          strided_tap(b, v, dim, t, count, ss[a], 1), reach[a][0])
    if divisor:
        return b.cast(b.binary(BinaryKind.div, total, float(divisor)), x.dtype)
    sizes = np.ones((), np.float64)
    for a in range(nd):
        sizes = np.multiply.outer(sizes, _window_sizes(spatial[a], ks[a], ss[a], ps[a],
                                                       geo[a][0], include_pad))
    sizes = table(b, sizes.reshape((1,) * (rank - nd) + sizes.shape), DType.f32)
    return b.cast(b.binary(BinaryKind.div, total, sizes), x.dtype)


def _pool(b: GraphBuilder, x: Value, kind: str, kernel: Any, stride: Any, padding: Any,
          dilation: Any, divisor: float | None) -> Value:
    """The pooling unit: a 2-D window op, its padding by addressing."""
    kh, kw = _ints(kernel, 2)
    sh, sw = _ints(stride, 2) if stride else (kh, kw)
    ph, pw = _ints(padding, 2)
    dh, dw = _ints(dilation, 2)
    x = stored(b, x)  # windows addressed by dims
    lead, (h, wd) = x.shape[:-2], x.shape[-2:]
    oh = _out_size(h, kh, sh, dh, 2 * ph)
    ow = _out_size(wd, kw, sw, dw, 2 * pw)
    scale = 1.0 / (divisor if divisor else kh * kw) if kind == "avg" else 1.0
    return b.add(g.Pool2d(kind, (kh, kw), (sh, sw), (dh, dw), scale, (ph, pw)), (x,),
                 (*lead, oh, ow), x.dtype, f"{kind}pool")


@lowering(aten.max_pool2d_with_indices.default)
def lower_max_pool_with_indices(b: GraphBuilder, x: Value, kernel_size: Any, stride: Any = (),
                                padding: Any = 0, dilation: Any = 1,
                                ceil_mode: bool = False) -> tuple[Value, Value]:
    values, index = _max_windows(b, x, 2, kernel_size, stride, padding, dilation, ceil_mode)
    if not ceil_mode:  # the pooling unit computes the values; the indices are vector work
        values = _pool(b, x, "max", kernel_size, stride, padding, dilation, None)
    return values, index


@lowering(aten.max_pool3d_with_indices.default)
def lower_max_pool3d_with_indices(b: GraphBuilder, x: Value, kernel_size: Any,
                                  stride: Any = (), padding: Any = 0, dilation: Any = 1,
                                  ceil_mode: bool = False) -> tuple[Value, Value]:
    return _max_windows(b, x, 3, kernel_size, stride, padding, dilation, ceil_mode)


@lowering(aten.max_pool2d.default)
def lower_max_pool(b: GraphBuilder, x: Value, kernel_size: Any, stride: Any = (),
                   padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False) -> Value:
    if ceil_mode:
        return _max_windows(b, x, 2, kernel_size, stride, padding, dilation, True)[0]
    return _pool(b, x, "max", kernel_size, stride, padding, dilation, None)


@lowering(aten.avg_pool2d.default)
def lower_avg_pool(b: GraphBuilder, x: Value, kernel_size: Any, stride: Any = (),
                   padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None) -> Value:
    if ceil_mode or (not count_include_pad and any(_ints(padding, 2))):
        return _avg_windows(b, x, 2, kernel_size, stride, padding, ceil_mode,
                            count_include_pad, divisor_override)
    return _pool(b, x, "avg", kernel_size, stride, padding, 1, divisor_override)


@lowering(aten.avg_pool3d.default)
def lower_avg_pool3d(b: GraphBuilder, x: Value, kernel_size: Any, stride: Any = (),
                     padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                     divisor_override: int | None = None) -> Value:
    return _avg_windows(b, x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override)


# ---------------------------------------------------------------- adaptive pooling


def _adaptive_taps(size: int, out: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per tap, each output cell's input position (clamped into its own window) and
    whether the window reaches that far: cell i averages [i*size//out,
    ceil((i+1)*size/out))."""
    cells = np.arange(out)
    start = cells * size // out
    end = -(-(cells + 1) * size // out)
    taps = int((end - start).max())
    picks = [np.minimum(start + t, end - 1) for t in range(taps)]
    return picks, [start + t < end for t in range(taps)]


def _adaptive(b: GraphBuilder, x: Value, output_size: Any, nd: int,
              kind: str) -> tuple[Value, Value | None]:
    rank, spatial = len(x.shape), x.shape[-nd:]
    outs = [s if o is None else o for o, s in zip(_ints(output_size, nd), spatial)]
    values = b.cast(x, DType.f32) if kind == "avg" else x
    index = _flat_index(b, spatial, rank) if kind == "max" else None
    for a in reversed(range(nd)):
        dim = rank - nd + a
        picks, valid = _adaptive_taps(spatial[a], outs[a])
        tap = (lambda v, t, dim=dim, picks=picks: take(b, v, dim, picks[t]))
        if kind == "max":
            values, index = _max_taps(b, values, index, tap, len(picks))
        else:
            total = _sum_taps(b, values, tap, len(picks), valid, dim)
            shape = [1] * rank
            shape[dim] = outs[a]
            counts = np.sum(valid, axis=0).astype(np.float32).reshape(shape)
            values = b.binary(BinaryKind.div, total, table(b, counts, DType.f32))
    if kind == "avg":
        return b.cast(values, x.dtype), None
    return values, b.broadcast(index, values.shape)


@lowering(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default)
def lower_adaptive_avg_pool(b: GraphBuilder, x: Value, output_size: Any) -> Value:
    oh, ow = _ints(output_size, 2)
    h, w = x.shape[-2:]
    if (oh, ow) == (1, 1):
        xf = b.cast(x, DType.f32)
        return b.cast(b.reduce(ReduceKind.mean, xf, (-2, -1), True), x.dtype)
    if h % oh or w % ow:
        return _adaptive(b, x, (oh, ow), 2, "avg")[0]
    return _pool(b, x, "avg", (h // oh, w // ow), (h // oh, w // ow), 0, 1, None)


@lowering(aten._adaptive_avg_pool3d.default, aten.adaptive_avg_pool3d.default)
def lower_adaptive_avg_pool3d(b: GraphBuilder, x: Value, output_size: Any) -> Value:
    return _adaptive(b, x, output_size, 3, "avg")[0]


@lowering(aten.adaptive_max_pool2d.default)
def lower_adaptive_max_pool2d(b: GraphBuilder, x: Value,
                              output_size: Any) -> tuple[Value, Value | None]:
    return _adaptive(b, x, output_size, 2, "max")


@lowering(aten.adaptive_max_pool3d.default)
def lower_adaptive_max_pool3d(b: GraphBuilder, x: Value,
                              output_size: Any) -> tuple[Value, Value | None]:
    return _adaptive(b, x, output_size, 3, "max")


# ---------------------------------------------------------------- scattering by index

_SCATTER_LIMIT = 1 << 22
"""Largest planes x inputs x outputs scattered by masked reductions."""


def _scatter_planes(b: GraphBuilder, src: Value, index: Value, nd: int, out_spatial: Sequence[int],
                    kind: str) -> Value:
    """Per plane, each output position gets the ``src`` elements whose index names it:
    their sum (``"sum"``, a max-pool backward) or their value (``"put"``, unpooling: equal
    values when several windows picked the same element), 0 where none does. Vector
    work over planes x inputs x outputs: an equality mask against the position numbers."""
    lead = src.shape[:-nd]
    planes, inputs, outputs = math.prod(lead), math.prod(src.shape[-nd:]), math.prod(out_spatial)
    if planes * inputs * outputs > _SCATTER_LIMIT:
        raise NotImplementedError(f"scatter of {planes}x{inputs} into {outputs} positions is "
                                  f"too wide for masked reductions")
    hit = b.binary(BinaryKind.eq, b.view(b.cast(index, DType.i64), (planes, inputs, 1)),
                   b.arange(outputs, (1, 1, outputs)))
    values = b.view(src, (planes, inputs, 1))
    if kind == "sum":
        out = b.reduce(ReduceKind.sum, b.select(hit, values, 0.0), (1,), False)
    else:
        picked = b.reduce(ReduceKind.max, b.select(hit, values, float("-inf")), (1,), False)
        found = b.reduce(ReduceKind.max, b.select(hit, 1.0, 0.0), (1,), False)
        out = b.select(b.binary(BinaryKind.gt, found, 0.0), picked, 0.0)
    return b.cast(b.view(out, tuple(lead) + tuple(out_spatial)), src.dtype)


@lowering(aten.max_unpool2d.default)
def lower_max_unpool2d(b: GraphBuilder, x: Value, indices: Value, output_size: Any) -> Value:
    return _scatter_planes(b, x, indices, 2, _ints(output_size, 2), "put")


@lowering(aten.max_unpool3d.default)
def lower_max_unpool3d(b: GraphBuilder, x: Value, indices: Value, output_size: Any,
                       stride: Any, padding: Any) -> Value:
    return _scatter_planes(b, x, indices, 3, _ints(output_size, 3), "put")


@lowering(aten.max_pool2d_with_indices_backward.default)
def lower_max_pool2d_backward(b: GraphBuilder, grad: Value, x: Value, kernel_size: Any,
                              stride: Any, padding: Any, dilation: Any, ceil_mode: bool,
                              indices: Value) -> Value:
    """Each input position gets the gradients of the windows whose max it was."""
    return _scatter_planes(b, grad, indices, 2, x.shape[-2:], "sum")
