"""3-D and transposed convolutions, on the 2-D convolution unit. A 3-D convolution is
one 2-D convolution per depth tap of the kernel (the input's depth-strided planes
stacked into the batch), summed. A transposed convolution is a plain one over the
input with stride - 1 zeros between elements and the kernel's reach minus the padding
around it, with each group's weight transposed and flipped (copies and gathers)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.ops import BinaryKind
from compiler.lowerings.windows import dense, pad_dim, pad_trailing, strided_tap, take

Conv2d = Callable[..., Value]
"""The 2-D convolution lowering: (b, x, w, bias, stride, padding, dilation, transposed,
output_padding, groups) -> Value."""


def conv3d(b: GraphBuilder, x: Value, w: Value, stride: Sequence[int],
           padding: Sequence[int], dilation: Sequence[int], groups: int,
           conv2d: Conv2d) -> Value:
    """[N, C, D, H, W] * [O, C/g, KD, KH, KW]: per depth tap, the planes it reads (one
    per output depth) as a batch of 2-D convolutions, then the taps summed."""
    n, c, depth = x.shape[:3]
    o, _, kd = w.shape[:3]
    sd, pd, dd = stride[0], padding[0], dilation[0]
    padded = pad_dim(b, x, 2, pd, pd, 0.0)
    out_d = (depth + 2 * pd - dd * (kd - 1) - 1) // sd + 1
    total: Value | None = None
    for t in range(kd):
        planes = strided_tap(b, padded, 2, t, out_d, sd, dd)        # [N, C, OD, H, W]
        planes = b.permute(planes, (0, 2, 1, 3, 4))
        planes = dense(b, b.view(planes, (n * out_d, c) + x.shape[3:]))
        taps = dense(b, b.view(b.slice(w, 2, t, t + 1), (o, w.shape[1]) + w.shape[3:]))
        out = conv2d(b, planes, taps, None, list(stride[1:]), list(padding[1:]),
                     list(dilation[1:]), False, [0, 0], groups)
        total = out if total is None else b.binary(BinaryKind.add, total, out)
    assert total is not None
    out = b.view(total, (n, out_d) + total.shape[1:])
    return b.permute(out, (0, 2, 1, 3, 4))


def _spread(b: GraphBuilder, x: Value, strides: Sequence[int]) -> Value:
    """``stride - 1`` zeros between neighbours along each trailing spatial dim."""
    nd = len(strides)
    for a, s in enumerate(strides):
        if s == 1:
            continue
        dim = len(x.shape) - nd + a
        size = x.shape[dim]
        split = b.view(x, x.shape[:dim + 1] + (1,) + x.shape[dim + 1:])
        wide = pad_dim(b, split, dim + 1, 0, s - 1, 0.0)
        flat = b.view(wide, x.shape[:dim] + (size * s,) + x.shape[dim + 1:])
        x = b.slice(flat, dim, 0, (size - 1) * s + 1)
    return x


def _transposed_weight(b: GraphBuilder, w: Value, groups: int) -> Value:
    """[Ci, Co/g, k...] -> [Co, Ci/g, k...] per group, each kernel flipped."""
    ci, co_g = w.shape[:2]
    kernel = w.shape[2:]
    nd = len(kernel)
    split = b.view(w, (groups, ci // groups, co_g) + kernel)
    swapped = b.permute(split, (0, 2, 1) + tuple(range(3, 3 + nd)))
    out = b.view(swapped, (groups * co_g, ci // groups) + kernel)
    for a, k in enumerate(kernel):
        if k > 1:
            out = take(b, out, 2 + a, np.arange(k - 1, -1, -1))
    return dense(b, out)


def conv_transposed(b: GraphBuilder, x: Value, w: Value, stride: Sequence[int],
                    padding: Sequence[int], dilation: Sequence[int],
                    output_padding: Sequence[int], groups: int, conv2d: Conv2d) -> Value:
    """Transposed 1-3-D convolution as a plain one on the spread, padded input."""
    nd = len(w.shape) - 2
    if len(x.shape) != nd + 2:
        raise NotImplementedError("transposed convolution on an unbatched input")
    kernel = w.shape[2:]
    spread = _spread(b, x, stride)
    pads = [(dilation[a] * (kernel[a] - 1) - padding[a],
             dilation[a] * (kernel[a] - 1) - padding[a] + output_padding[a]) for a in range(nd)]
    padded = pad_trailing(b, spread, pads, 0.0)
    weight = _transposed_weight(b, w, groups)
    ones = [1] * nd
    if nd == 3:
        return conv3d(b, dense(b, padded), weight, ones, [0] * 3, list(dilation), groups,
                      conv2d)
    if nd == 1:
        rows = dense(b, b.view(padded, padded.shape[:2] + (1, padded.shape[-1])))
        taps = dense(b, b.view(weight, weight.shape[:2] + (1, weight.shape[-1])))
        out = conv2d(b, rows, taps, None, [1, 1], [0, 0], [1, dilation[0]], False, [0, 0],
                     groups)
        return b.view(out, out.shape[:2] + (out.shape[-1],))
    return conv2d(b, dense(b, padded), weight, None, ones, [0, 0], list(dilation), False,
                  [0, 0], groups)


def add_bias(b: GraphBuilder, out: Value, bias: Value | None) -> Value:
    if bias is None:
        return out
    shape = (bias.shape[0],) + (1,) * (len(out.shape) - 2)
    return b.binary(BinaryKind.add, out, b.view(bias, shape))

