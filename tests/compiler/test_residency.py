"""Intermediate tensors kept in shared SRAM (:mod:`compiler.residency`): a kernel's
result handed to the next kernel over the NoC instead of through DRAM."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from archsim.app.pipeline import run
from archsim.app.workload import Workload
from archsim.config import load_config
from compiler.ir.operands import Slice
from compiler.ir.ops import Copy, Load, Store
from compiler.options import CompileOptions
from compiler.residency import keep_on_chip

TINY = load_config("tiny")  # 256 KiB shared SRAM, round numbers


class _ExpThenMm(torch.nn.Module):
    """exp is a kernel of its own; the matmul after it reads its result (a temp)."""

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x.exp() @ w


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(1, 64), torch.randn(64, 8)


def _run(on_chip: bool, config=TINY):
    workload = Workload.of_module(_ExpThenMm(), _inputs())
    return run(workload, config, mode="functional",
               options=CompileOptions(on_chip_temps=on_chip))


def _output(result) -> torch.Tensor:
    (name,) = [t.name for t in result.program.tensors if t.role == "out"]
    return torch.from_numpy(result.outputs[name])


def _temps(program) -> list[str]:
    return [t.name for t in program.tensors if t.role == "temp"]


def test_a_temp_between_two_kernels_moves_to_shared_sram_with_the_same_numbers() -> None:
    kept, placed = _run(False), _run(True)
    (temp,) = _temps(kept.program)
    assert _temps(placed.program) == []
    transfers = [c.op for c in kept.program.commands
                 if isinstance(c.op, Load) and c.op.src.tensor == temp
                 or isinstance(c.op, Store) and c.op.dst.tensor == temp]
    assert transfers  # the exp kernel stores it, the matmul loads it
    # command by command: each store of the temp becomes a copy from the same
    # scratchpad region into shared SRAM, each load a copy from shared SRAM into the
    # same region; nothing else of the program changes
    assert len(placed.program.commands) == len(kept.program.commands)
    for before, after in zip(kept.program.commands, placed.program.commands):
        assert (after.engine, after.deps, after.source) == \
            (before.engine, before.deps, before.source)
        if before.op not in transfers:
            assert after.op == before.op
        elif isinstance(before.op, Store):
            assert isinstance(after.op, Copy) and after.op.src == before.op.src
            assert after.op.dst.space == "shared"
            assert after.op.dst.nbytes == before.op.src.nbytes
        else:
            assert isinstance(after.op, Copy) and after.op.dst == before.op.dst
            assert after.op.src.space == "shared"
            assert after.op.src.nbytes == before.op.dst.nbytes  # a k step's 16 values
    x, w = _inputs()
    torch.testing.assert_close(_output(placed), x.exp() @ w)
    # the temp (64 f32) crosses DRAM no more: written once, read by both cores
    assert kept.dram_bytes_written - placed.dram_bytes_written == 256 == \
        sum(op.src.nbytes for op in transfers if isinstance(op, Store))
    assert kept.dram_bytes_read - placed.dram_bytes_read == 2 * 256 == \
        sum(op.dst.nbytes for op in transfers if isinstance(op, Load))


def test_the_store_to_shared_sram_costs_no_dram_latency() -> None:
    """On tiny: a 256-byte store to DRAM takes the DMA setup (10), the DRAM latency (20),
    the NoC's (5) and 256 B at 16 B/cycle (16): 51 cycles; to shared SRAM the same but
    the DRAM latency: 31."""
    kept, placed = _run(False), _run(True)
    (temp,) = _temps(kept.program)

    def cycles(result, pick) -> list[int]:
        return [int(result.ends[i] - result.starts[i])
                for i, c in enumerate(result.program.commands) if pick(c.op)]

    stores = cycles(kept, lambda op: isinstance(op, Store) and op.dst.tensor == temp)
    copies = cycles(placed, lambda op: isinstance(op, Copy) and op.dst.space == "shared")
    assert stores == [10 + 20 + 5 + 16] and copies == [10 + 5 + 16]
    assert placed.total_cycles < kept.total_cycles


def test_no_shared_sram_or_no_room_leaves_the_program_alone() -> None:
    none = dataclasses.replace(TINY, shared_sram=dataclasses.replace(TINY.shared_sram,
                                                                      size_bytes=0))
    program = _run(False).program
    assert keep_on_chip(program, none) is program
    small = dataclasses.replace(TINY, shared_sram=dataclasses.replace(
        TINY.shared_sram, size_bytes=program.sram_high_water.get("shared", 0) + 128))
    assert keep_on_chip(program, small) is program  # 256 bytes do not fit in 128


def test_a_strided_box_keeps_its_tensor_in_dram() -> None:
    """Column blocks of a row-major tensor are strided: the race check compares byte
    spans, so such a tensor stays in DRAM."""
    program = _run(False).program
    (temp,) = _temps(program)
    strided = tuple(dataclasses.replace(
        c, op=dataclasses.replace(c.op, dst=dataclasses.replace(
            c.op.dst, slices=(Slice(0, 1), Slice(0, 64, 2)))))
        if isinstance(c.op, Store) and c.op.dst.tensor == temp else c
        for c in program.commands)
    program = dataclasses.replace(program, commands=strided)
    assert keep_on_chip(program, TINY) is program


@pytest.mark.parametrize("layers", [4])
def test_regions_are_reused_once_the_previous_tensor_is_done(layers: int) -> None:
    """A chain of kernels (each matmul's epilogue computes the next exp): each temp's
    region is free again once every core's reads of it happen before the next writes.
    Each matmul's two cores both read the whole input and each writes half of the
    output, so a core may write the next temp while the other still reads this one: the
    four temps alternate between two regions of 256 bytes."""

    class Chain(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            for _ in range(layers):
                x = (x.exp() @ w).tanh() * 0.1
            return x

    torch.manual_seed(0)
    x, w = torch.randn(1, 64) * 0.1, torch.randn(64, 64) * 0.1
    kept = run(Workload.of_module(Chain(), (x, w)), TINY, mode="functional",
               options=CompileOptions(on_chip_temps=False))
    placed = run(Workload.of_module(Chain(), (x, w)), TINY, mode="functional")
    assert len(_temps(kept.program)) == layers and _temps(placed.program) == []
    shared = placed.program.sram_high_water["shared"] - \
        kept.program.sram_high_water.get("shared", 0)
    assert shared == 2 * 64 * 4
    expected = x
    for _ in range(layers):
        expected = (expected.exp() @ w).tanh() * 0.1
    torch.testing.assert_close(_output(placed), expected)
