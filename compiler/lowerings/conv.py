"""2-D convolution (implicit GEMM, any stride/padding/dilation/groups; padding by
addressing). Pooling lives in :mod:`compiler.lowerings.pooling`."""

from __future__ import annotations

import math
from typing import Any

import torch

from compiler import graph as g
from compiler.graph import Value, base_of
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, weight_only
from compiler.lowerings.conv_nd import add_bias, conv3d, conv_transposed
from compiler.lowerings.indexing import stored
from compiler.lowerings.matmul import widened_weights
from compiler.lowerings.registry import lowering
from compiler.views import unit_dims_only

aten = torch.ops.aten


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = list(v)
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _out_size(size: int, kernel: int, stride: int, dilation: int, pad_total: int) -> int:
    return (size + pad_total - dilation * (kernel - 1) - 1) // stride + 1


@lowering(aten.convolution.default)
def lower_convolution(b: GraphBuilder, x: Value, w: Value, bias: Value | None,
                      stride: list[int], padding: list[int], dilation: list[int],
                      transposed: bool, output_padding: list[int], groups: int) -> Value:
    if not transposed and len(x.shape) == 3 and len(w.shape) == 3:
        return _conv1d(b, x, w, bias, stride, padding, dilation, groups)
    if transposed or len(x.shape) == 5:  # on the 2-D unit (compiler.lowerings.conv_nd)
        nd = len(w.shape) - 2

        def ints(v: Any) -> list[int]:
            v = [int(i) for i in ([v] if isinstance(v, int) else v)]
            return v * nd if len(v) == 1 else v

        if transposed:
            out = conv_transposed(b, x, w, ints(stride), ints(padding), ints(dilation),
                                  ints(output_padding), groups, lower_convolution)
        else:
            out = conv3d(b, x, w, ints(stride), ints(padding), ints(dilation), groups,
                         lower_convolution)
        return add_bias(b, out, bias)
    if transposed or len(x.shape) != 4:
        raise NotImplementedError("only non-transposed 1-D and 2-D convolution is lowered")
    # the kernel addresses its input's windows by their dims
    return _conv2d(b, stored(b, x), w, bias, stride, padding, dilation, groups)


def _conv2d(b: GraphBuilder, x: Value, w: Value, bias: Value | None, stride: Any,
            padding: Any, dilation: Any, groups: int) -> Value:
    """The convolution node of an image ``x`` the kernel can address by its dims (a
    stored tensor, or one with a unit dim added: :func:`_conv1d`)."""
    ph, pw = _pair(padding)
    sh, sw = _pair(stride)
    dh, dw = _pair(dilation)
    n, _, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh = _out_size(h, kh, sh, dh, 2 * ph)
    ow = _out_size(wd, kw, sw, dw, 2 * pw)
    narrow = _weight_only(x, w) if groups == 1 else None
    weights, scale = narrow if narrow is not None else (b.cast(w, x.dtype), None)
    # scaled after the sums, these stay in the accumulator's f32: unscaled, an f16
    # result would overflow where torch's (scaled weights) does not
    out = b.add(g.Conv2d((sh, sw), (dh, dw), groups, (ph, pw)), (x, weights),
                (n, o, oh, ow), x.dtype if scale is None else DType.f32, "conv")
    if scale is not None:  # a scale per output channel, or one for all
        scale = b.view(scale, (o, 1, 1)) if math.prod(scale.shape) == o else scale
        out = b.cast(b.binary(BinaryKind.mul, out, scale), x.dtype)
    if bias is not None:
        out = b.binary(BinaryKind.add, out, b.view(bias, (o, 1, 1)))
    return out


def _weight_only(x: Value, w: Value) -> tuple[Value, Value | None] | None:
    """The int8 weights of a weight-only quantized convolution, and the scale per output
    channel applied to them (None: none, or applied to the result by the model), when
    ``w`` is ``w_int8.to(x.dtype)`` or that times a scale of ``[O, 1, 1, 1]`` (or one
    for all): the kernels read the weights at one byte each and the arrays widen them
    on the way in, exactly (every int8 is a bf16), on every preset (with
    ``core.matrix.dequant: vector`` too: where a convolution's weights stay resident
    the vector unit's one cast a weight block would hardly show; on a scratchpad too
    small to keep them it would, and is not counted); the scale then multiplies the
    f32 sums, rounded once to ``x``'s dtype, as the weight-only matmuls do (torch
    rounds the scaled weights to ``x``'s dtype first: the results agree to that
    rounding)."""
    if not weight_only(x.dtype, DType.i8):
        return None
    int8 = widened_weights(x, w)
    if int8 is not None:
        return int8, None
    node = w.producer
    if node is None or not isinstance(node.spec, g.Binary) or \
            node.spec.kind is not BinaryKind.mul:
        return None
    for widened, factor in (node.inputs, node.inputs[::-1]):
        if isinstance(widened, Value) and isinstance(factor, Value) and \
                factor.dtype.is_float and (math.prod(factor.shape) == 1 or
                                           factor.shape == (w.shape[0], 1, 1, 1)):
            int8 = widened_weights(x, widened)
            if int8 is not None:
                return int8, factor
    return None


def _conv1d(b: GraphBuilder, x: Value, w: Value, bias: Value | None, stride: list[int],
            padding: list[int], dilation: list[int], groups: int) -> Value:
    """A 1-D convolution (Whisper's audio stem) as a 2-D one of height 1."""
    n, c, length = x.shape
    o, ci, k = w.shape
    # the kernels read a stored tensor viewed with unit dims added or dropped as the
    # tensor itself (compiler.kernels.conv_geometry.stored_ref): nothing is copied
    # (a value another 1-D convolution computed is stored [n, c, 1, L] already)
    rows = b.view(_as_stored(b, x), (n, c, 1, length))
    taps = b.view(_as_stored(b, w), (o, ci, 1, k))
    out = _conv2d(b, rows, taps, bias, [1, stride[0]], [0, padding[0]], [1, dilation[0]],
                  groups)
    return b.view(out, (n, o, out.shape[-1]))


def _as_stored(b: GraphBuilder, x: Value) -> Value:
    """``x`` if it is its stored tensor up to unit dims, else a stored copy of it."""
    return x if unit_dims_only(x.shape, base_of(x).shape) else stored(b, x)


@lowering(aten.conv1d.default)
def lower_conv1d(b: GraphBuilder, x: Value, w: Value, bias: Value | None = None,
                 stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Value:
    if len(x.shape) != 3 or isinstance(padding, str):
        raise NotImplementedError("conv1d on a batched [N, C, L] input with numeric padding")
    one = (lambda v: [v] if isinstance(v, int) else list(v))
    return _conv1d(b, x, w, bias, one(stride), one(padding), one(dilation), groups)


@lowering(aten.conv2d.default)
def lower_conv2d(b: GraphBuilder, x: Value, w: Value, bias: Value | None = None,
                 stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Value:
    return lower_convolution(b, x, w, bias, _pair(stride), _pair(padding), _pair(dilation),
                             False, [0, 0], groups)
