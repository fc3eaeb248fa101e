"""A matmul's fused epilogue is one pass over its tile (its ops after the first are
``chained``: the value comes in registers, the result is written once), and DRAM runs
at ``dram.efficiency`` of its pins' peak. Cycle counts on `tiny` (vector: 4 lanes,
latency 2, 1 cycle per element per lane; DMA fixed cost 35, DRAM 16 B/cycle) derived by
hand; numbers compared with torch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from archsim.config import load_config
from archsim.errors import ConfigError
from archsim.simulator import Simulator
from compiler import compile_graph
from compiler.ir import Binary, BinaryKind, DType, Load, SramRef, Unary, UnaryKind
from compiler.ir.builder import ProgramBuilder
from compiler.ir.text import parse_program, print_program

TINY = load_config("tiny")
NARROW = TINY.with_overrides({"core.vector.sram_bandwidth_bytes_per_cycle": 8})
F32 = DType.f32


def _tile(offset: int) -> SramRef:
    return SramRef("sram0", offset, (16, 4), F32)  # 64 elements, 256 B


def _one(op) -> int:
    b = ProgramBuilder("one")
    b.add("core0.vpu", op)
    return Simulator(NARROW).run(b.build()).total_cycles


def test_a_chained_op_moves_only_its_other_inputs() -> None:
    x, y, z = _tile(0), _tile(256), _tile(512)
    # a pass of its own: reads x, y and writes z, 768 B at 8 B/cycle = 96 > 16 compute
    assert _one(Binary(BinaryKind.add, x, y, z)) == 2 + 96
    # chained: x comes in registers, z is the pass's one write: y's 256 B = 32 cycles
    assert _one(Binary(BinaryKind.add, x, y, z, chained=True)) == 2 + 32
    # a chained unary moves nothing: its ALU time, 64 elements / 4 lanes
    assert _one(Unary(UnaryKind.relu, x, z, chained=True)) == 2 + 16
    assert _one(Unary(UnaryKind.relu, x, z)) == 2 + 512 // 8


def test_chained_ops_print_and_parse_back() -> None:
    b = ProgramBuilder("chain")
    x, y, z = _tile(0), _tile(256), _tile(512)
    b.add("core0.vpu", Binary(BinaryKind.add, x, y, z))
    b.add("core0.vpu", Unary(UnaryKind.relu, z, z, chained=True))
    program = b.build()
    text = print_program(program)
    assert text.count(" chained") == 1
    assert parse_program(text).commands == program.commands


class _Block(nn.Module):
    """``relu(x @ w.T + b) + r``, the residual added as ``r + h`` (the chained value second)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(24, 20)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return r + torch.relu(self.fc(x))


def test_a_linear_epilogue_is_one_pass_with_torchs_numbers() -> None:
    torch.manual_seed(0)
    model, x, r = _Block().eval(), torch.randn(12, 24), torch.randn(12, 20)
    program = torch.export.export(model, (x, r)).run_decompositions()
    compiled = compile_graph(program, TINY)
    (out,), _ = compiled.run(x, r)
    torch.testing.assert_close(out, model(x, r), rtol=1e-5, atol=1e-5)
    vector = [c.op for c in compiled.program.commands if c.engine.endswith(".vpu")]
    relus = [op for op in vector if isinstance(op, Unary) and op.kind is UnaryKind.relu]
    adds = [op for op in vector if isinstance(op, Binary) and op.kind is BinaryKind.add]
    assert relus and all(op.chained for op in relus)
    # the bias add starts the pass (it reads the accumulator); the residual add is chained,
    # its operands swapped so the value in registers comes first
    assert any(not op.chained for op in adds) and any(op.chained for op in adds)
    for op in adds:
        if op.chained:
            assert op.a.shape == op.dst.shape


def test_a_lone_load_runs_at_the_sustained_dram_rate() -> None:
    b = ProgramBuilder("lone")
    b.tensor("x", (8, 8), F32, "in")
    b.add("core0.dma0", Load(b.ref("x"), SramRef("sram0", 0, (8, 8), F32)))
    program = b.build()
    # 35 fixed + 256 B at 16 B/cycle; at half the pins' rate, 8 B/cycle
    assert Simulator(TINY).run(program).total_cycles == 35 + 16
    half = TINY.with_overrides({"dram.efficiency": 0.5})
    assert Simulator(half).run(program).total_cycles == 35 + 32
    assert half.dram_bytes_per_cycle == 16 and half.dram_sustained_bytes_per_cycle == 8


@pytest.mark.parametrize("value", [0.0, 1.5])
def test_dram_efficiency_is_a_fraction(value: float) -> None:
    with pytest.raises(ConfigError, match=r"dram\.efficiency: .*(must be > 0|outside "
                                          r"0\.05\.\.1 \(a fraction of the peak)"):
        TINY.with_overrides({"dram.efficiency": value})


def test_tpu_v3_states_its_dram_efficiency() -> None:
    assert load_config("tpu-v3").dram.efficiency == 0.92
    assert load_config("atom").dram.efficiency == 1.0


def _vector_ops(module: nn.Module, *args: torch.Tensor) -> list:
    program = torch.export.export(module.eval(), args).run_decompositions()
    compiled = compile_graph(program, TINY)
    (out,), _ = compiled.run(*args)
    torch.testing.assert_close(out, module(*args), rtol=1e-5, atol=1e-5)
    return [c.op for c in compiled.program.commands if c.engine.endswith(".vpu")]


def test_a_convolution_epilogue_is_one_pass_with_torchs_numbers() -> None:
    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                          nn.ReLU())
    block[1].running_mean.normal_()
    block[1].running_var.uniform_(0.5, 2.0)
    vector = _vector_ops(block, torch.randn(1, 4, 6, 6))
    relus = [op for op in vector if isinstance(op, Unary) and op.kind is UnaryKind.relu]
    assert relus and all(op.chained for op in relus)
    assert any(isinstance(op, Binary) and op.chained for op in vector)  # batch norm's


def _node(spec, inputs, shape, name):
    from compiler.graph import Node, Value

    out = Value(shape, DType.f32, name)
    node = Node(spec, tuple(inputs), (out,))
    out.producer = node
    return node


def test_the_pass_follows_the_tile_sized_value_only() -> None:
    """acc + r * 2 (r another tile-sized input), relu, bias + relu, a row max, then
    ``biased - rowmax``: ``r * 2`` is off the pass, so the add reads the accumulator
    itself and starts it; relu continues it; the bias add is turned around to take the
    pass's value first; the reduction is not chained and leaves the pass where it was."""
    from compiler import graph as g
    from compiler.graph import Value
    from compiler.ir.ops import ReduceKind
    from compiler.kernels.epilogue import pass_order
    from compiler.plan import Group

    acc, r, bias = (Value(s, DType.f32, n) for s, n in (((4, 8), "acc"), ((4, 8), "r"),
                                                        ((8,), "bias")))
    scaled = _node(g.Binary(BinaryKind.mul), (r, 2.0), (4, 8), "scaled")
    total = _node(g.Binary(BinaryKind.add), (scaled.out, acc), (4, 8), "total")
    relu = _node(g.Unary(UnaryKind.relu), (total.out,), (4, 8), "relu")
    biased = _node(g.Binary(BinaryKind.add), (bias, relu.out), (4, 8), "biased")
    rowmax = _node(g.Reduce(ReduceKind.max, (1,)), (biased.out,), (4, 1), "rowmax")
    centred = _node(g.Binary(BinaryKind.sub), (biased.out, rowmax.out), (4, 8), "centred")
    group = Group([scaled, total, relu, biased, rowmax, centred], (4, 8))
    order = pass_order(group, acc, in_registers=False)
    assert order[scaled.out.id] == ((r, 2.0), False)
    assert order[total.out.id] == ((acc, scaled.out), False)  # reads the accumulator
    assert order[relu.out.id] == ((total.out,), True)
    assert order[biased.out.id] == ((relu.out, bias), True)
    assert order[rowmax.out.id] == ((biased.out,), False)
    assert order[centred.out.id] == ((biased.out, rowmax.out), True)
    # after a cast the accumulator's value is in registers already
    assert pass_order(group, acc, in_registers=True)[total.out.id] == ((acc, scaled.out), True)
