"""A matmul's or convolution's last step on an output tile, and its fused epilogue as one
pass over the tile.

The arrays' results pop into vector registers and the epilogue's ops run there (the
TensorCore's VLIW bundle has matrix push and pop slots; the Cloud TPU guide: matmuls
fuse activations and biases on their output "at low overhead"). The pass starts at the
accumulator (or at the cast of it) and follows the ops that take its tile-sized value as
their first input (commutative ops are turned around to do so): those ops are
``chained`` (:data:`compiler.ir.ops.CHAINED_DOC`) and move only their other inputs
through the scratchpad. A standalone vector kernel passes over the scratchpad once per op.
"""

from __future__ import annotations

from archsim.config.names import vpu_engine
from compiler import graph as g
from compiler.graph import Value
from compiler.ir.operands import SramRef
from compiler.ir.ops import BinaryKind, Cast
from compiler.kernels.common import Box, Context
from compiler.kernels.vector import Order, emit_compute, emit_loads, emit_stores, store_box
from compiler.plan import Group

_CHAINABLE = (g.Unary, g.Binary, g.Cast)
"""Graph ops whose result the next op of a pass can take in registers."""
_COMMUTATIVE = frozenset({BinaryKind.add, BinaryKind.mul, BinaryKind.max, BinaryKind.min})
"""Binary kinds whose operands a chained op may swap (exactly, in IEEE arithmetic)."""


def pass_order(group: Group, out: Value, in_registers: bool) -> Order:
    """Per node of ``group`` (by its output's id), its inputs in emission order and
    whether it is chained. The pass holds ``out`` (in registers when a cast read the
    accumulator already; else the first op on it reads the scratchpad); an elementwise
    op taking the pass's value first, with a result of the same shape, moves the pass on
    to that result. Other ops leave the pass as it is."""
    held, registers = out, in_registers
    order: Order = {}
    for node in group.nodes:
        inputs = tuple(node.inputs)
        spec = node.spec
        if isinstance(spec, g.Binary) and spec.kind in _COMMUTATIVE and inputs[1] is held:
            inputs = (inputs[1], inputs[0])  # the value in registers goes first
        on_pass = inputs[0] is held
        chainable = isinstance(spec, _CHAINABLE)
        order[node.out.id] = (inputs, on_pass and registers and chainable)
        if on_pass and chainable and node.out.shape == held.shape:
            held, registers = node.out, True
    return order


def finish_tile(ctx: Context, core: int, acc: SramRef, cast_to: SramRef | None, out: Value,
                group: Group | None, epilogue: tuple[dict[int, SramRef], dict[int, SramRef]] | None,
                order: Order | None, box: Box, source: str) -> None:
    """A tile's last step: cast the accumulator into ``cast_to`` (None: no cast), store
    it if ``out`` lives in DRAM, and run the fused ``group`` on it in the one pass
    ``order`` (:func:`pass_order`) describes; ``epilogue`` is the group's buffers and
    scratch for this tile."""
    value = acc
    if cast_to is not None:
        ctx.em.emit(vpu_engine(core), Cast(acc, cast_to), source)
        value = cast_to
    if ctx.materialized(out):
        store_box(ctx, out, box, value, core, source, "store")
    if group is None or epilogue is None:
        return
    buffers, scratch = epilogue
    merged = {**buffers, out.id: value}
    emit_loads(ctx, group, box, core, merged, scratch, {out.id: value}, source)
    emit_compute(ctx, group, box, core, merged, scratch, source, order)
    emit_stores(ctx, group, box, core, merged, source, "store")
