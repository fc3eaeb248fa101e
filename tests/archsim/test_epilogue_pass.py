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
