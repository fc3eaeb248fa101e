"""layer_norm, group_norm, batch_norm in inference. (RMS norm arrives as pow + mean + rsqrt + mul and
needs no lowering of its own.)"""

from __future__ import annotations


import torch

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind, UnaryKind
from compiler.lowerings.registry import lowering

aten = torch.ops.aten


def normalized(b: GraphBuilder, x: Value, axes: tuple[int, ...],
               eps: float) -> tuple[Value, Value, Value, Value]:
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` in f32, with the mean, 1/std and the
    biased variance (kept dims): what layer and batch norm share."""
    xf = b.cast(x, DType.f32)
    mean = b.reduce(ReduceKind.mean, xf, axes, True)
    centered = b.binary(BinaryKind.sub, xf, mean)
    var = b.reduce(ReduceKind.mean, b.unary(UnaryKind.square, centered), axes, True)
    rstd = b.unary(UnaryKind.rsqrt, b.binary(BinaryKind.add, var, float(eps)))
    return b.binary(BinaryKind.mul, centered, rstd), mean, rstd, var


@lowering(aten.native_layer_norm.default)
def lower_native_layer_norm(b: GraphBuilder, x: Value, normalized_shape: list[int],
                            weight: Value | None, bias: Value | None,
                            eps: float) -> tuple[Value, Value, Value]:
    rank = len(x.shape)
    axes = tuple(range(rank - len(normalized_shape), rank))
    out, mean, rstd, _ = normalized(b, x, axes, eps)
    if weight is not None:
        out = b.binary(BinaryKind.mul, out, b.cast(weight, DType.f32))
    if bias is not None:
        out = b.binary(BinaryKind.add, out, b.cast(bias, DType.f32))
    return b.cast(out, x.dtype), mean, rstd


@lowering(aten.layer_norm.default)
def lower_layer_norm(b: GraphBuilder, x: Value, normalized_shape: list[int],
                     weight: Value | None = None, bias: Value | None = None,
                     eps: float = 1e-5, cudnn_enable: bool = True) -> Value:
    return lower_native_layer_norm(b, x, normalized_shape, weight, bias, eps)[0]


@lowering(aten.native_group_norm.default)
def lower_native_group_norm(b: GraphBuilder, x: Value, weight: Value | None,
                            bias: Value | None, n: int, channels: int, spatial: int,
                            groups: int, eps: float) -> tuple[Value, Value, Value]:
    """Each sample's channels in ``groups`` groups, each normalized over its channels and
    positions (Wav2Vec2's feature extractor, diffusion UNets); mean and 1/std per
    ``[N, groups]`` as torch returns them."""
    grouped = b.view(x, (n, groups, channels // groups * spatial))
    out, mean, rstd, _ = normalized(b, grouped, (2,), eps)
    out = b.view(out, x.shape)
    rank = len(x.shape)
    if weight is not None:
        out = b.binary(BinaryKind.mul, out, _per_channel(b, weight, rank))
    if bias is not None:
        out = b.binary(BinaryKind.add, out, _per_channel(b, bias, rank))
    return b.cast(out, x.dtype), b.view(mean, (n, groups)), b.view(rstd, (n, groups))


def _per_channel(b: GraphBuilder, v: Value, rank: int) -> Value:
    return b.view(b.cast(v, DType.f32), (v.shape[0],) + (1,) * (rank - 2))


@lowering(aten._native_batch_norm_legit_no_training.default)
def lower_batch_norm_inference(b: GraphBuilder, x: Value, weight: Value | None,
                               bias: Value | None, running_mean: Value, running_var: Value,
                               momentum: float, eps: float) -> tuple[Value, None, None]:
    """``x * scale + shift`` per channel, with ``scale = weight / sqrt(var + eps)`` and
    ``shift = bias - mean * scale`` made from the parameters first (one small kernel) and
    two ops left for the tile pass: how torch's CPU kernel computes inference batch norm
    (``batch_norm_cpu_collect_linear_and_constant_terms``), so its rounding too."""
    def f32(v: Value) -> Value:
        return b.cast(v, DType.f32)

    scale = b.unary(UnaryKind.rsqrt, b.binary(BinaryKind.add, f32(running_var), float(eps)))
    if weight is not None:
        scale = b.binary(BinaryKind.mul, scale, f32(weight))
    moved = b.binary(BinaryKind.mul, f32(running_mean), scale)
    shift = (b.binary(BinaryKind.sub, f32(bias), moved) if bias is not None
             else b.binary(BinaryKind.mul, moved, -1.0))
    per_channel = (x.shape[1],) + (1,) * (len(x.shape) - 2)
    out = b.binary(BinaryKind.mul, b.cast(x, DType.f32), b.view(scale, per_channel))
    out = b.binary(BinaryKind.add, out, b.view(shift, per_channel))
    return b.cast(out, x.dtype), None, None


@lowering(aten.batch_norm.default)
def lower_batch_norm(b: GraphBuilder, x: Value, weight: Value | None, bias: Value | None,
                     running_mean: Value, running_var: Value, training: bool,
                     momentum: float, eps: float, cudnn_enabled: bool = True) -> Value:
    return lower_batch_norm_inference(b, x, weight, bias, running_mean, running_var,
                                      momentum, eps)[0]



