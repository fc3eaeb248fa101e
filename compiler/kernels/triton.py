"""A Triton launch inside a compiled graph: the traced kernel lowered into the graph's
program (:class:`compiler.triton.lower.Lowering`), its tensor arguments bound to the
graph's DRAM tensors. A written argument gets its own DRAM tensor (the graph is
functional); when it had contents (not a fresh ``empty``), they are copied in first."""

from __future__ import annotations

import math

from compiler import graph as g
from compiler.ir.operands import DramRef, Slice, SramRef, sram_space
from compiler.ir.ops import Load, Store
from compiler.kernels.common import Context
from compiler.plan import Kernel
from compiler.triton.lower import Lowering


def lower_triton_kernel(ctx: Context, kernel: Kernel) -> None:
    node = kernel.anchor
    spec: g.TritonCall = node.spec
    views = {name: ctx.view(value) for name, value in zip(spec.pointers, node.inputs)}
    tensors = {name: view.tensor for name, view in views.items()}
    shapes = {name: tuple(view.base_shape) for name, view in views.items()}
    sources = dict(zip(spec.pointers, node.inputs))
    for name, out in zip(spec.written, node.outputs):
        if out.id not in ctx.tensors:  # nobody reads it: still written, to scratch
            ctx.tensors[out.id] = f"{out.name}_scratch"
            ctx.em.tensor(ctx.tensors[out.id], out.shape or (1,), out.dtype, "temp")
        target = ctx.tensors[out.id]
        producer = sources[name].producer
        if not (producer is not None and isinstance(producer.spec, g.Splat)):
            _copy(ctx, tensors[name], target, node.source)
        tensors[name] = target
        shapes[name] = tuple(out.shape) or (1,)
    lowering = Lowering(spec.trace, ctx.em, ctx.config, tensors, node.source, shapes=shapes)
    lowering.run()
    ctx.constants.update(lowering.constants)


def _copy(ctx: Context, src: str, dst: str, source: str) -> None:
    """``dst := src`` through core 0's scratchpad, in chunks of leading rows."""
    shape = ctx.em.builder._tensors[src].shape
    dtype = ctx.em.builder._tensors[src].dtype
    row = math.prod(shape[1:]) * dtype.itemsize
    rows = max(1, min(shape[0], ctx.capacity // 2 // max(1, row)))
    for start in range(0, shape[0], rows):
        stop = min(shape[0], start + rows)
        box = (Slice(start, stop),) + tuple(Slice(0, n) for n in shape[1:])
        tile = SramRef(sram_space(0), 0, (stop - start,) + tuple(shape[1:]), dtype)
        ctx.em.emit(ctx.em.dma(0, "load"), Load(DramRef(src, box), tile), source)
        ctx.em.emit(ctx.em.dma(0, "store"), Store(tile, DramRef(dst, box)), source)
