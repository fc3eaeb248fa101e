"""What a tile's cast and fused epilogue cost the vector unit in the conv tilings'
estimates (``compiler.kernels.epilogue.finish_cost``): one command a pass, each element
at its lanes' rate or the scratchpad bytes it moves, whichever binds; a chained op moves
only its other tile-sized operands. Its mutation survivors showed no test called it.

`tiny` with a 4-byte-a-cycle scratchpad port: 4 lanes, 2 cycles of latency, one cycle an
element for elementwise ops and casts, 4 for transcendental ones. The tile is 4 x 8."""

from __future__ import annotations

from archsim.config import load_config
from archsim.vector import VectorEngine
from compiler import graph as g
from compiler.graph import Node, Value
from compiler.ir import DType
from compiler.ir.ops import Binary, BinaryKind, Cast, Unary, UnaryKind
from compiler.ir.operands import SramRef
from compiler.kernels.epilogue import FinishCost, finish_cost
from compiler.plan import Group

VECTOR = load_config("tiny").with_overrides(
    {"core.vector.sram_bandwidth_bytes_per_cycle": 4}).core.vector
TILE = (4, 8)


def _node(spec: g.Spec, inputs: tuple, shape: tuple[int, ...], dtype: DType, name: str
          ) -> Node:
    out = Value(shape, dtype, name)
    node = Node(spec, inputs, (out,))
    out.producer = node
    return node


def _epilogue(out: Value, dtype: DType) -> list[Node]:
    """``exp(r + out * (w * 2))``, a conv's per-channel scale ``w * 2`` computed in the
    epilogue (off the pass, its output the channels'), a residual ``r`` added with the
    pass's value second (turned around)."""
    weight, residual = Value((8,), dtype, "w"), Value(TILE, dtype, "r")
    prepared = _node(g.Binary(BinaryKind.mul), (weight, 2.0), (8,), dtype, "scale")
    scaled = _node(g.Binary(BinaryKind.mul), (out, prepared.out), TILE, dtype, "scaled")
    summed = _node(g.Binary(BinaryKind.add), (residual, scaled.out), TILE, dtype, "summed")
    raised = _node(g.Unary(UnaryKind.exp), (summed.out,), TILE, dtype, "raised")
    return [prepared, scaled, summed, raised]


def test_a_cast_and_its_chained_epilogue_by_hand() -> None:
    out = Value(TILE, DType.bf16, "out")
    nodes = _epilogue(out, DType.bf16)
    cost = finish_cost(VECTOR, Group(nodes, TILE), out, 4, cast=True)
    # the cast reads 4 f32 bytes and writes 2 bf16 ones an element: 6 / 4 = 1.5 a cycle
    # (its lane: 1 / 4). ``w * 2`` is off the pass: per-channel in and out, nothing an
    # element but its lane, 0.25. The scaling is chained (the cast left the value in
    # registers) and its per-channel operand moves nothing: 0.25. The residual add,
    # turned around, moves r's 2 bytes: 0.5. exp moves nothing, 4 lane cycles: 1.0
    assert cost == FinishCost(commands=5, per_element=1.5 + 0.25 + 0.25 + 0.5 + 1.0)
    assert cost.cycles(2, 32) == 5 * 2 + 32 * 3.5
    # no epilogue: the cast alone
    assert finish_cost(VECTOR, None, out, 4, cast=True) == FinishCost(1, 1.5)


def test_without_a_cast_the_first_op_reads_the_accumulator() -> None:
    out = Value(TILE, DType.f32, "acc")
    nodes = _epilogue(out, DType.f32)
    cost = finish_cost(VECTOR, Group(nodes, TILE), out, 4, cast=False)
    # the scaling starts the pass from the scratchpad: reads the accumulator's 4 bytes,
    # writes 4: 2.0 an element. Then r's 4 bytes (1.0), exp's lanes (1.0), and the
    # off-pass ``w * 2`` 0.25 as before; no cast command
    assert cost == FinishCost(commands=4, per_element=0.25 + 2.0 + 1.0 + 1.0)
    assert finish_cost(VECTOR, None, out, 4, cast=False) == FinishCost(0, 0.0)


def _sram(offset: int, shape: tuple[int, ...], dtype: DType) -> SramRef:
    return SramRef("sram0", offset, shape, dtype)


def test_the_estimate_is_what_the_vector_unit_charges_the_same_commands() -> None:
    # the pass finish_tile emits for the epilogue above without ``w * 2`` (its scale
    # loaded as is): the cast, then three chained commands, timed by archsim's vector
    # unit: 2 + 192 B / 4 = 50, 2 + 32 / 4 lanes = 10, 2 + r's 64 B / 4 = 18,
    # 2 + 8 x 4 = 34: 112 cycles
    out = Value(TILE, DType.bf16, "out")
    nodes = _epilogue(out, DType.bf16)
    estimate = finish_cost(VECTOR, Group(nodes[1:], TILE), out, 4, cast=True).cycles(
        VECTOR.pipeline_latency_cycles, 32)
    acc, value = _sram(0, TILE, DType.f32), _sram(0x100, TILE, DType.bf16)
    scale, residual = _sram(0x200, (8,), DType.bf16), _sram(0x300, TILE, DType.bf16)
    commands = [Cast(acc, value),
                Binary(BinaryKind.mul, value, scale, value, chained=True),
                Binary(BinaryKind.add, value, residual, value, chained=True),
                Unary(UnaryKind.exp, value, value, chained=True)]
    engine = VectorEngine("core0.vpu", VECTOR)
    assert [engine.timing(op).fixed_cycles for op in commands] == [50, 10, 18, 34]
    assert estimate == 112
