"""Losses with a lowering of their own (others go through torch's decompositions):
nll_loss2d_forward, each pixel's target class picked by a compare with the class
numbers and a masked sum over the classes."""

from __future__ import annotations

import torch

from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind, UnaryKind
from compiler.lowerings.registry import lowering

aten = torch.ops.aten

_MASK_LIMIT = 1 << 22
"""Largest pixels x classes the class pick computes as masked sums."""


@lowering(aten.nll_loss2d_forward.default)
def lower_nll_loss2d(b: GraphBuilder, x: Value, target: Value, weight: Value | None,
                     reduction: int, ignore_index: int) -> tuple[Value, Value]:
    """``-x[n, target[n, h, w], h, w]`` times the target's class weight (0 for
    ``ignore_index``); summed, or averaged by the total weight, or per pixel."""
    n, classes, height, width = x.shape
    if n * classes * height * width > _MASK_LIMIT:
        raise NotImplementedError("nll_loss2d too big for masked sums")
    target = b.cast(target, DType.i64)
    hit = b.binary(BinaryKind.eq, b.view(target, (n, 1, height, width)),
                   b.arange(classes, (1, classes, 1, 1)))
    picked = b.reduce(ReduceKind.sum, b.select(hit, x, 0.0), (1,), False)
    kept = b.binary(BinaryKind.ne, target, ignore_index)
    if weight is None:
        pixel_weight = b.cast(kept, x.dtype)
    else:
        table = b.view(b.cast(weight, x.dtype), (1, classes, 1, 1))
        chosen = b.reduce(ReduceKind.sum, b.select(hit, table, 0.0), (1,), False)
        pixel_weight = b.select(kept, chosen, 0.0)
    loss = b.unary(UnaryKind.neg, b.binary(BinaryKind.mul, picked, pixel_weight))
    if reduction == 0:  # torch leaves the total weight 0 when it does not reduce
        return loss, b.splat(0.0, (), x.dtype)
    total_weight = b.reduce(ReduceKind.sum, pixel_weight, (), False)
    total = b.reduce(ReduceKind.sum, loss, (), False)
    if reduction == 1:
        total = b.binary(BinaryKind.div, total, total_weight)
    return total, total_weight
