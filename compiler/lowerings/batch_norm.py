"""Batch norm in training mode: per-channel batch statistics (two vector reductions over
batch and spatial dims), the normalized output, and the running statistics' update
(``(1 - momentum) * running + momentum * batch``, the variance unbiased) as new
tensors; the eager device writes those back into the running buffers."""

from __future__ import annotations

import torch

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind
from compiler.lowerings.norm import normalized
from compiler.lowerings.registry import lowering

aten = torch.ops.aten


def _channel(b: GraphBuilder, v: Value, rank: int) -> Value:
    return b.view(b.cast(v, DType.f32), (v.shape[0],) + (1,) * (rank - 2))


def _batch_statistics(b: GraphBuilder, x: Value, weight: Value | None, bias: Value | None,
                      eps: float) -> tuple[Value, Value, Value, Value]:
    """(output, mean [C], 1/std [C], biased variance [C]) over every dim but dim 1."""
    rank = len(x.shape)
    if rank < 2:
        raise NotImplementedError("batch norm needs a channel dim")
    axes = (0,) + tuple(range(2, rank))
    out, mean, rstd, var = normalized(b, x, axes, eps)
    if weight is not None:
        out = b.binary(BinaryKind.mul, out, _channel(b, weight, rank))
    if bias is not None:
        out = b.binary(BinaryKind.add, out, _channel(b, bias, rank))
    channels = (x.shape[1],)
    return (b.cast(out, x.dtype), b.view(mean, channels), b.view(rstd, channels),
            b.view(var, channels))


def _updated(b: GraphBuilder, running: Value, batch: Value, momentum: float) -> Value:
    kept = b.binary(BinaryKind.mul, b.cast(running, DType.f32), 1.0 - float(momentum))
    return b.cast(b.binary(BinaryKind.add, kept, b.binary(BinaryKind.mul, batch,
                                                            float(momentum))), running.dtype)


@lowering(aten._native_batch_norm_legit_functional.default)
def lower_batch_norm_functional(b: GraphBuilder, x: Value, weight: Value | None,
                                bias: Value | None, running_mean: Value, running_var: Value,
                                training: bool, momentum: float,
                                eps: float) -> tuple[Value, ...]:
    """Training-mode batch norm: output, saved mean and 1/std, new running mean and
    variance."""
    if not training:
        raise NotImplementedError("inference batch norm lowers as _no_training")
    out, mean, rstd, var = _batch_statistics(b, x, weight, bias, eps)
    count = x.shape[0]
    for n in x.shape[2:]:
        count *= n
    unbiased = b.binary(BinaryKind.mul, var, count / max(count - 1, 1))
    return (out, mean, rstd, _updated(b, running_mean, mean, momentum),
            _updated(b, running_var, unbiased, momentum))


@lowering(aten._native_batch_norm_legit.no_stats)
def lower_batch_norm_no_stats(b: GraphBuilder, x: Value, weight: Value | None,
                              bias: Value | None, training: bool, momentum: float,
                              eps: float) -> tuple[Value, Value, Value]:
    """Batch statistics with no running buffers (instance norm's usual call)."""
    if not training:
        raise NotImplementedError("batch norm without running stats needs training=True")
    return _batch_statistics(b, x, weight, bias, eps)[:3]
