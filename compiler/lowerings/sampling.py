"""``grid_sample`` (2-D and 3-D): positions computed at run time. Per spatial axis the
vector unit turns grid coordinates into input positions and weights (bilinear: 2 per
axis, nearest: 1, bicubic: 4), with the padding mode applied (zeros: out-of-range
taps weigh nothing; border: clamped; reflection: mirrored); each corner's values come
from an indexed-gather DMA of channel rows (the input stored channels-last), then
weighted and summed."""

from __future__ import annotations

import itertools

import torch

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, UnaryKind
from compiler.lowerings.movement import gather_rows
from compiler.lowerings.registry import lowering
from compiler.lowerings.windows import dense

aten = torch.ops.aten
A = -0.75
"""The cubic convolution's parameter (as CPU's bicubic)."""

Tap = tuple[Value, Value]
"""(input position as a float, weight) of one tap along one axis."""


def _bin(b: GraphBuilder, kind: BinaryKind, x: Value | float, y: Value | float) -> Value:
    return b.binary(kind, x, y)


def _unnormalize(b: GraphBuilder, coord: Value, size: int, align: bool) -> Value:
    """Grid coordinates in [-1, 1] to input positions."""
    if align:
        return _bin(b, BinaryKind.mul, _bin(b, BinaryKind.add, coord, 1.0), (size - 1) / 2)
    return _bin(b, BinaryKind.div, _bin(b, BinaryKind.sub, _bin(
        b, BinaryKind.mul, _bin(b, BinaryKind.add, coord, 1.0), float(size)), 1.0), 2.0)


def _clip(b: GraphBuilder, x: Value, size: int) -> Value:
    return _bin(b, BinaryKind.min, _bin(b, BinaryKind.max, x, 0.0), float(size - 1))


def _reflect(b: GraphBuilder, x: Value, low2: int, high2: int) -> Value:
    """Mirror ``x`` into [low2 / 2, high2 / 2] (CPU's ``reflect_coordinates``)."""
    if low2 == high2:
        return _bin(b, BinaryKind.mul, x, 0.0)
    low, span = low2 / 2, (high2 - low2) / 2
    dist = b.unary(UnaryKind.abs, _bin(b, BinaryKind.sub, x, low))
    extra = _bin(b, BinaryKind.fmod, dist, span)
    flips = b.unary(UnaryKind.floor, _bin(b, BinaryKind.div, dist, span))
    even = _bin(b, BinaryKind.eq, _bin(b, BinaryKind.remainder, flips, 2.0), 0.0)
    return b.select(even, _bin(b, BinaryKind.add, extra, low),
                    _bin(b, BinaryKind.add, _bin(b, BinaryKind.sub, span, extra), low))


def _pad(b: GraphBuilder, x: Value, size: int, mode: int, align: bool) -> Value:
    """Apply the padding mode to positions (0 zeros: unchanged)."""
    if mode == 1:
        return _clip(b, x, size)
    if mode == 2:
        x = _reflect(b, x, 0, 2 * (size - 1)) if align else _reflect(b, x, -1, 2 * size - 1)
        return _clip(b, x, size)
    return x


def _axis_taps(b: GraphBuilder, coord: Value, size: int, interp: int, mode: int,
               align: bool) -> list[Tap]:
    x = _unnormalize(b, coord, size, align)
    if interp == 2:  # bicubic: padding applies to every tap's position
        base = b.unary(UnaryKind.floor, x)
        t = _bin(b, BinaryKind.sub, x, base)

        def near(v: Value) -> Value:  # ((A + 2) v - (A + 3)) v v + 1
            inner = _bin(b, BinaryKind.sub, _bin(b, BinaryKind.mul, v, A + 2), A + 3)
            return _bin(b, BinaryKind.add, _bin(b, BinaryKind.mul, _bin(
                b, BinaryKind.mul, inner, v), v), 1.0)

        def far(v: Value) -> Value:  # ((A v - 5A) v + 8A) v - 4A
            inner = _bin(b, BinaryKind.sub, _bin(b, BinaryKind.mul, v, A), 5 * A)
            inner = _bin(b, BinaryKind.add, _bin(b, BinaryKind.mul, inner, v), 8 * A)
            return _bin(b, BinaryKind.sub, _bin(b, BinaryKind.mul, inner, v), 4 * A)

        one_minus = _bin(b, BinaryKind.sub, 1.0, t)
        weights = [far(_bin(b, BinaryKind.add, t, 1.0)), near(t), near(one_minus),
                   far(_bin(b, BinaryKind.add, one_minus, 1.0))]
        return [(_pad(b, _bin(b, BinaryKind.add, base, float(i - 1)), size, mode, align),
                 weights[i]) for i in range(4)]
    x = _pad(b, x, size, mode, align)
    if interp == 1:  # nearest, half to even
        return [(b.unary(UnaryKind.round, x), b.splat(1.0, x.shape, DType.f32))]
    low = b.unary(UnaryKind.floor, x)
    frac = _bin(b, BinaryKind.sub, x, low)
    return [(low, _bin(b, BinaryKind.sub, 1.0, frac)),
            (_bin(b, BinaryKind.add, low, 1.0), frac)]


def _grid_sample(b: GraphBuilder, x: Value, grid: Value, interp: int, mode: int,
                 align: bool) -> Value:
    nd = len(x.shape) - 2
    n, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
    out = grid.shape[1:-1]
    if interp not in (0, 1, 2) or mode not in (0, 1, 2) or (interp == 2 and nd != 2):
        raise NotImplementedError(f"grid_sample mode {interp} padding {mode}")
    cells = 1
    for s in spatial:
        cells *= s
    points = 1
    for s in out:
        points *= s
    grid = b.cast(grid, DType.f32)
    axes = []
    for a in range(nd):  # grid's last dim lists x (the last spatial axis) first
        coord = b.view(b.slice(grid, -1, nd - 1 - a, nd - a), (n,) + out)
        axes.append(_axis_taps(b, coord, spatial[a], interp, mode, align))
    perm = (0,) + tuple(range(2, 2 + nd)) + (1,)
    rows = dense(b, b.view(b.permute(x, perm), (n * cells, c)))
    base = b.arange(n, (n,) + (1,) * nd, scale=cells)
    total: Value | None = None
    for corner in itertools.product(*axes):
        flat: Value | None = None
        inside: Value | None = None
        weight: Value | None = None
        stride = cells
        for a, (pos, w) in enumerate(corner):
            stride //= spatial[a]
            ok = _bin(b, BinaryKind.logical_and, _bin(b, BinaryKind.ge, pos, 0.0),
                      _bin(b, BinaryKind.le, pos, float(spatial[a] - 1)))
            term = _bin(b, BinaryKind.mul, pos, float(stride))
            flat = term if flat is None else _bin(b, BinaryKind.add, flat, term)
            inside = ok if inside is None else _bin(b, BinaryKind.logical_and, inside, ok)
            weight = w if weight is None else _bin(b, BinaryKind.mul, weight, w)
        assert flat is not None and inside is not None and weight is not None
        index = _bin(b, BinaryKind.add, b.cast(b.select(inside, flat, 0.0), DType.i64), base)
        picked = b.view(gather_rows(b, rows, index), (n,) + out + (c,))
        picked = b.select(b.view(inside, (n,) + out + (1,)), picked, 0.0)
        term = _bin(b, BinaryKind.mul, picked, b.view(weight, (n,) + out + (1,)))
        total = term if total is None else _bin(b, BinaryKind.add, total, term)
    assert total is not None
    back = (0, nd + 1) + tuple(range(1, nd + 1))
    return b.cast(b.permute(total, back), x.dtype)


@lowering(aten.grid_sampler_2d.default, aten.grid_sampler_3d.default)
def lower_grid_sampler(b: GraphBuilder, x: Value, grid: Value, interpolation_mode: int,
                       padding_mode: int, align_corners: bool) -> Value:
    return _grid_sample(b, x, grid, int(interpolation_mode), int(padding_mode),
                        bool(align_corners))
