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

import math
from dataclasses import dataclass

from archsim.config.model import NpuConfig, VectorConfig
from archsim.config.names import vpu_engine
from archsim.vector import kind_class
from compiler import graph as g
from compiler.graph import Value
from compiler.ir.operands import SramRef
from compiler.ir.ops import BinaryKind, Cast
from compiler.kernels.common import Box, Context
from compiler.cost import DRAM_EFFICIENCY, vector_rate
from compiler.kernels.vector import (
    Order, emit_compute, emit_loads, emit_stores, store_box,
)
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
    emit_loads(ctx, group, box, core, merged, scratch, {out.id: value}, source, "load")
    emit_compute(ctx, group, box, core, merged, scratch, source, order)
    emit_stores(ctx, group, box, core, merged, source, "store")


@dataclass(frozen=True)
class FinishCost:
    """What :func:`finish_tile` costs the vector unit on a tile (for tiling estimates):
    ``commands`` vector commands, each one pipeline latency, and ``per_element``
    cycles for each element of the tile."""

    commands: int
    per_element: float

    def cycles(self, latency: int, elements: float) -> float:
        return self.commands * latency + elements * self.per_element


def plain_finish(config: NpuConfig, passes: int) -> FinishCost:
    """``passes`` vector passes each reading and writing a tile of f32 elements: what a
    tiling estimate assumes when it is not given the epilogue (:func:`finish_cost`)."""
    return FinishCost(passes, passes / vector_rate(config, 4))


def pass_rate(vector: VectorConfig, cost: int, nbytes: float) -> float:
    """Cycles per element of a vector command whose elements each take ``cost`` cycles
    of a lane and move ``nbytes`` through the scratchpad: its lanes or the scratchpad's
    bandwidth, whichever binds (``archsim.vector``)."""
    bandwidth = vector.sram_bandwidth_bytes_per_cycle
    return max(cost / vector.lanes, nbytes / bandwidth if bandwidth else 0.0)


def finish_cost(vector: VectorConfig, group: Group | None, out: Value, acc_item: int,
                cast: bool) -> FinishCost:
    """The cast of a tile's accumulator (``acc_item`` bytes an element), if any, and the
    fused ``group``'s passes as :func:`pass_order` chains them: the first op on the
    accumulator (or the cast) reads and writes the tile, a chained op moves only its
    other operands, of which those the size of the output (a residual) count per
    element and per-channel ones (a batch norm's) not at all."""
    costs = vector.costs
    commands, rate = int(cast), 0.0
    if cast:
        rate += pass_rate(vector, costs.cast, acc_item + out.dtype.itemsize)
    if group is None:
        return FinishCost(commands, rate)
    size = math.prod(out.shape)

    def moved(values: tuple) -> int:
        return sum(v.dtype.itemsize for v in values
                   if isinstance(v, Value) and math.prod(v.shape) == size)

    order = pass_order(group, out, cast)
    for node in group.nodes:
        inputs, chained = order[node.out.id]
        nbytes = moved(inputs[1:]) if chained else \
            moved(inputs) + node.out.dtype.itemsize * (math.prod(node.out.shape) == size)
        commands += 1
        rate += pass_rate(vector, _cost_class(vector, node.spec), nbytes)
    return FinishCost(commands, rate)


def store_cycles(config: NpuConfig, nbytes: float, cores: int) -> float:
    """Cycles a tile's store of ``nbytes`` holds the DMA engine kept for stores, when
    ``cores`` cores store: its bytes at the engine's rate or the core's share of DRAM
    (the stores' latencies overlap in flight; an epilogue's operand loads take the load
    engines, :func:`finish_tile`, so none waits in this queue)."""
    dma = config.core.dma
    rate = min(dma.bandwidth_bytes_per_cycle,
               config.dram_sustained_bytes_per_cycle * DRAM_EFFICIENCY / cores)
    return nbytes / rate


def _cost_class(vector: VectorConfig, spec: g.Spec) -> int:
    """Lane cycles per element of the vector command a graph op lowers to (its class as
    :func:`archsim.vector.op_class` gives the command's)."""
    if isinstance(spec, g.Cast):
        return vector.costs.cast
    if isinstance(spec, (g.Unary, g.Binary)):
        return getattr(vector.costs, kind_class(spec.kind))
    return vector.costs.elementwise
