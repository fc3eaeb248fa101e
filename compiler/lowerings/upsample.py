"""Upsampling (``interpolate``): separable, one spatial axis at a time. Every output
position along an axis is a weighted sum of a few input positions whose numbers and
weights are known at compile time (computed here as CPU does, in float32): nearest
picks one, linear two, cubic four. Picks are strided slices or an indexed-gather DMA;
the weights are a small table multiplied in by the vector unit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind
from compiler.lowerings.movement import lower_upsample_nearest2d as _whole_factor
from compiler.lowerings.registry import lowering
from compiler.lowerings.windows import table, take

aten = torch.ops.aten
f32 = np.float32
Taps = list[tuple[np.ndarray, np.ndarray | None]]
"""Per tap: the input position of every output position, and its weight (None: 1)."""
AxisRule = Callable[[int, int, bool, float | None], Taps]
"""(input size, output size, align_corners, scale) -> taps."""


def _scale(size: int, out: int, align_corners: bool, scale: float | None) -> np.float32:
    """CPU's input-per-output ratio (``area_pixel_compute_scale``)."""
    if align_corners:
        return f32((size - 1) / (out - 1)) if out > 1 else f32(0)
    if scale is not None and scale > 0:
        return f32(1.0 / scale)
    return f32(size) / f32(out)


def _nearest(size: int, out: int, align_corners: bool, scale: float | None) -> Taps:
    if out == size:
        return [(np.arange(out), None)]
    if out == 2 * size:
        return [(np.arange(out) >> 1, None)]
    ratio = _scale(size, out, False, scale)
    index = np.floor(np.arange(out, dtype=f32) * ratio).astype(np.int64)
    return [(np.minimum(index, size - 1), None)]


def _nearest_exact(size: int, out: int, align_corners: bool, scale: float | None) -> Taps:
    ratio = _scale(size, out, False, scale)
    index = np.floor((np.arange(out, dtype=f32) + f32(0.5)) * ratio).astype(np.int64)
    return [(np.minimum(index, size - 1), None)]


def _linear(size: int, out: int, align_corners: bool, scale: float | None) -> Taps:
    if out == size:
        return [(np.arange(out), None)]
    ratio = _scale(size, out, align_corners, scale)
    dst = np.arange(out, dtype=f32)
    real = ratio * dst if align_corners else np.maximum(ratio * (dst + f32(0.5)) - f32(0.5),
                                                        f32(0))
    lo = np.minimum(np.floor(real).astype(np.int64), size - 1)
    frac = np.clip(real - lo.astype(f32), f32(0), f32(1)).astype(f32)
    hi = lo + (lo < size - 1)
    return [(lo, f32(1) - frac), (hi, frac)]


def _cubic(size: int, out: int, align_corners: bool, scale: float | None) -> Taps:
    """Keys' cubic convolution (A = -0.75), edges clamped, as CPU's bicubic."""
    a = f32(-0.75)
    ratio = _scale(size, out, align_corners, scale)
    dst = np.arange(out, dtype=f32)
    real = ratio * dst if align_corners else ratio * (dst + f32(0.5)) - f32(0.5)
    base = np.floor(real)
    t = (real - base).astype(f32)

    def near(x: np.ndarray) -> np.ndarray:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: np.ndarray) -> np.ndarray:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weights = [far(t + 1), near(t), near(1 - t), far(2 - t)]
    base = base.astype(np.int64)
    return [(np.clip(base - 1 + i, 0, size - 1), weights[i].astype(f32)) for i in range(4)]


def _antialiased(size: int, out: int, align_corners: bool, scale: float | None) -> Taps:
    """Bilinear with antialiasing: when shrinking, a triangle filter stretched over
    ``scale`` inputs, its weights normalized to sum to 1 (CPU's separable AA kernel)."""
    ratio = float(_scale(size, out, align_corners, scale))
    support = ratio if ratio >= 1.0 else 1.0
    inv = 1.0 / ratio if ratio >= 1.0 else 1.0
    starts, weights = [], []
    for i in range(out):
        center = ratio * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), size)
        w = np.maximum(0.0, 1.0 - np.abs((np.arange(lo, hi) - center + 0.5) * inv))
        starts.append(lo)
        weights.append(w / w.sum() if w.sum() else w)
    taps = max(len(w) for w in weights)
    return [(np.array([min(s + t, size - 1) for s in starts]),
             np.array([w[t] if t < len(w) else 0.0 for w in weights], dtype=f32))
            for t in range(taps)]


def _resample(b: GraphBuilder, x: Value, sizes: Sequence[int], rule: AxisRule,
              align_corners: bool, scales: Sequence[float | None]) -> Value:
    """Resample the last ``len(sizes)`` dims to ``sizes``, last axis first."""
    nd, rank = len(sizes), len(x.shape)
    out = b.cast(x, DType.f32) if rule is not _nearest and rule is not _nearest_exact else x
    for a in reversed(range(nd)):
        dim = rank - nd + a
        taps = rule(x.shape[dim], int(sizes[a]), align_corners, scales[a])
        total: Value | None = None
        for index, weight in taps:
            picked = _pick(b, out, dim, index)
            if weight is not None:
                shape = [1] * rank
                shape[dim] = len(weight)
                picked = b.binary(BinaryKind.mul, picked,
                                  table(b, weight.reshape(shape), DType.f32))
            total = picked if total is None else b.binary(BinaryKind.add, total, picked)
        assert total is not None
        out = total
    return b.cast(out, x.dtype)


def _pick(b: GraphBuilder, x: Value, dim: int, index: np.ndarray) -> Value:
    """``x`` at ``index`` along ``dim``; a whole-factor repeat (each input position
    ``f`` times in a row) is a broadcast."""
    size, count = x.shape[dim], len(index)
    if count % size == 0 and count > size and \
            np.array_equal(index, np.arange(count) // (count // size)):
        factor = count // size
        split = x.shape[:dim + 1] + (1,) + x.shape[dim + 1:]
        wide = b.broadcast(b.view(x, split), split[:dim + 1] + (factor,) + split[dim + 2:])
        return b.view(wide, x.shape[:dim] + (count,) + x.shape[dim + 1:])
    if np.array_equal(index, np.arange(size)):
        return x
    return take(b, x, dim, index)


def _vec_sizes(x: Value, nd: int, output_size: Any,
               scale_factors: Any) -> tuple[list[int], list[float | None]]:
    """Output sizes and scales of a ``.vec`` overload (sizes or factors given)."""
    if output_size:
        return [int(s) for s in output_size], [None] * nd
    if not scale_factors:
        raise NotImplementedError("upsample without an output size or scales")
    factors = [float(f) for f in scale_factors]
    return [int(n * f) for n, f in zip(x.shape[-nd:], factors)], list(factors)


def _register(rule: AxisRule, nd: int, has_align: bool, default: Any, vec: Any) -> None:
    def lower_default(b: GraphBuilder, x: Value, output_size: Any, *rest: Any,
                      **kwargs: Any) -> Value:
        align = bool(rest[0] if rest else kwargs.get("align_corners")) if has_align else False
        scales = list(rest[1:] if has_align else rest)
        names = ("scales",) if nd == 1 else ("scales_d", "scales_h", "scales_w")[3 - nd:]
        scales += [kwargs.get(n) for n in names[len(scales):]]
        return _resample(b, x, output_size, rule, align, scales)

    def lower_vec(b: GraphBuilder, x: Value, output_size: Any, *rest: Any) -> Value:
        align = bool(rest[0]) if has_align else False
        sizes, scales = _vec_sizes(x, nd, output_size, rest[-1] if rest else None)
        return _resample(b, x, sizes, rule, align, scales)

    lowering(default)(lower_default)
    lowering(vec)(lower_vec)


for _rule, _nd, _align, _name in (
        (_nearest, 1, False, "upsample_nearest1d"), (_nearest, 3, False, "upsample_nearest3d"),
        (_nearest_exact, 1, False, "_upsample_nearest_exact1d"),
        (_nearest_exact, 2, False, "_upsample_nearest_exact2d"),
        (_nearest_exact, 3, False, "_upsample_nearest_exact3d"),
        (_linear, 1, True, "upsample_linear1d"), (_linear, 2, True, "upsample_bilinear2d"),
        (_linear, 3, True, "upsample_trilinear3d"), (_cubic, 2, True, "upsample_bicubic2d"),
        (_antialiased, 2, True, "_upsample_bilinear2d_aa")):
    _packet = getattr(aten, _name)
    _register(_rule, _nd, _align, _packet.default, _packet.vec)


@lowering(aten.upsample_nearest2d.default, aten.upsample_nearest2d.vec)
def lower_upsample_nearest2d(b: GraphBuilder, x: Value, output_size: Any = None,
                             *scales: Any) -> Value:
    """Whole factors keep their single broadcast; other sizes resample per axis."""
    if len(x.shape) == 4:
        try:
            return _whole_factor(b, x, output_size, *scales)
        except NotImplementedError:
            pass
    if scales and isinstance(scales[-1], (list, tuple)) or (not output_size and scales):
        sizes, factors = _vec_sizes(x, 2, output_size, scales[-1] if scales else None)
    else:
        sizes, factors = list(output_size), list(scales) + [None] * (2 - len(scales))
    return _resample(b, x, sizes, _nearest, False, factors)
