"""The plan costs each distinct (engine, op shape) once (archsim.timing.COST_KEY). Over
real compiler output, commands with equal keys must cost exactly the same: if a
block's timing starts reading a field the key leaves out, this fails."""

from __future__ import annotations

from collections import defaultdict

import pytest
import simpy
import torch

from archsim.chip import Chip
from archsim.timing import COST_KEY, cost_key
from compiler import compile_graph, compile_op, export_decompositions
from compiler.ir.ops import ALL_OPS, Op
from compiler_helpers import config
from compiler_models import GPT2Block, ResNetBlock
from serving.quant import Int4WeightOnlyLinear

aten = torch.ops.aten


def _programs(preset: str):
    torch.manual_seed(0)
    gpt2 = GPT2Block(hidden=96, heads=4).eval()
    x = torch.randn(1, 24, 96)
    resnet = ResNetBlock(cin=8, cout=16, stride=2).eval()
    image = torch.randn(1, 8, 12, 12)
    for model, args in ((gpt2, (x,)), (resnet, (image,))):
        exported = torch.export.export(model, args).run_decompositions(
            export_decompositions())
        yield compile_graph(exported, config(preset)).program
    table = torch.randn(50, 16)
    ids = torch.tensor([3, 7, 7, 49])
    yield compile_op(aten.embedding.default, (table, ids), {}, config(preset)).program
    if preset == "tpu-v4":  # an int4 decode GEMV: the vector units take a share
        gemv = Int4WeightOnlyLinear.of(torch.nn.Linear(4096, 4096, bias=False),
                                       torch.bfloat16, 128)
        exported = torch.export.export(gemv, (torch.randn(1, 4096, dtype=torch.bfloat16),))
        yield compile_graph(exported, config(preset)).program


@pytest.mark.parametrize("preset", ["atom", "tpu-v3", "tpu-v4"])
def test_commands_with_equal_cost_keys_cost_the_same(preset: str) -> None:
    seen: set[type] = set()
    commands = keys = 0
    for program in _programs(preset):
        chip = Chip(simpy.Environment(), config(preset), program.tensor_map)
        groups: dict[tuple, set] = defaultdict(set)
        for c in program.commands:
            groups[(c.engine, type(c.op), cost_key(c.op))].add(chip.timing(c.engine, c.op))
            seen.add(type(c.op))
        assert all(len(timings) == 1 for timings in groups.values()), [
            (key, timings) for key, timings in groups.items() if len(timings) > 1][:3]
        commands += len(program.commands)
        keys += len(groups)
    assert keys < commands  # shapes repeat even in small programs
    assert {"Load", "Store", "Gather", "MatMul", "Unary", "Binary", "Reduce"} <= {
        cls.__name__ for cls in seen}
    if preset == "tpu-v4":
        assert "VectorMatMul" in {cls.__name__ for cls in seen}


def test_every_op_class_has_a_cost_key() -> None:
    assert set(COST_KEY) == set(ALL_OPS)


def test_an_op_class_without_a_cost_key_is_named() -> None:
    class Mystery(Op):
        pass

    with pytest.raises(TypeError, match="archsim.timing.COST_KEY has no entry for op class "
                                        "Mystery; add one"):
        cost_key(Mystery())
