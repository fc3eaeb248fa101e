"""Host fallback: inputs cross the host link, the op runs on the host CPU (timed from
its FLOP estimate at ``host_flops_per_s``), outputs come back. Never free, never silent."""

from __future__ import annotations

import math

from archsim.config.names import HDMA, HOST
from compiler import graph as g
from compiler.ir.operands import DramRef, Slice
from compiler.ir.ops import HostOp, HostTransfer
from compiler.kernels.common import Context
from compiler.plan import Kernel


def host_cycles(ctx: Context, flops: int) -> int:
    seconds = flops / ctx.config.host_link.host_flops_per_s
    return max(1, math.ceil(seconds * ctx.config.clock_hz))


def _whole(ctx: Context, name: str) -> DramRef:
    shape = ctx.em.builder._tensors[name].shape
    return DramRef(name, tuple(Slice(0, n) for n in shape))


def _has_data(ctx: Context, name: str) -> bool:
    """False for a tensor of no elements (an effect token): nothing crosses the link."""
    return math.prod(ctx.em.builder._tensors[name].shape) > 0


def lower_host_kernel(ctx: Context, kernel: Kernel) -> str:
    """Emit the transfers and the host op; returns the host function's name."""
    node = kernel.anchor
    spec: g.HostCall = node.spec
    source = node.source
    inputs = tuple(dict.fromkeys(ctx.view(v).tensor for v in node.value_inputs()))
    outputs = tuple(ctx.tensors[v.id] for v in node.outputs)
    for name in filter(lambda n: _has_data(ctx, n), inputs):
        ctx.em.emit(HDMA, HostTransfer(_whole(ctx, name), to_device=False), source)
    fn_name = f"{spec.op_name}@{node.source}"
    ctx.em.emit(HOST, HostOp(fn_name, inputs, outputs, host_cycles(ctx, spec.flops)), source)
    for name in filter(lambda n: _has_data(ctx, n), outputs):
        ctx.em.emit(HDMA, HostTransfer(_whole(ctx, name), to_device=True), source)
    return fn_name
