"""The verifier's shortcuts give the answers of the long way round.

The verifier screens commands with remembered verdicts before explaining them, replays
SRAM accesses from the access tables directly, and proves most orderings by a short
search before falling back to vector clocks. Each shortcut is checked here against the
straightforward answer.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from archsim.config import NpuConfig
from compiler.ir import verify as verify_module
from compiler.ir import verify_order, verify_races
from compiler.ir.access import sram_reads, sram_writes
from compiler.ir.dtypes import DType
from compiler.ir.operands import Scalar, SramRef
from compiler.ir.ops import (
    Binary,
    BinaryKind,
    Command,
    Copy,
    MatMul,
    Op,
    Program,
    Select,
    Unary,
    UnaryKind,
)
from compiler.ir.verify import find_problems

ENGINES = ("core0.vpu", "core0.dma0", "core0.dma1", "core0.mxu0", "core1.vpu", "core1.dma0")


def racy_program(rng: random.Random) -> Program:
    """Ops on two scratchpads over several engines, with random earlier deps: some
    pairs are ordered through chains of other engines, some race."""
    commands = []
    for i in range(rng.randint(2, 50)):
        engine = rng.choice(ENGINES)
        own = f"sram{engine[4]}"

        def ref(shape: tuple[int, ...] = (2, 2), space: str = own) -> SramRef:
            return SramRef(space, 4 * rng.randint(0, 16), shape, DType.f32)
        if engine.endswith("vpu"):
            op: Op = rng.choice([
                Unary(UnaryKind.neg, ref(), ref()),
                Binary(BinaryKind.add, ref(), Scalar(1.0), ref()),
                Select(SramRef(own, 4 * rng.randint(0, 16), (2, 2), DType.bool),
                       ref(), ref((1, 2)), ref()),
            ])
        elif engine.endswith("mxu0"):
            op = MatMul(ref(), ref(), ref(), rng.random() < 0.5)
        else:
            op = Copy(ref(space=rng.choice(("sram0", "sram1"))),
                      ref(space=rng.choice(("sram0", "sram1"))))
        deps = tuple(rng.sample(range(i), rng.randint(0, min(i, 3))))
        commands.append(Command(i, engine, op, deps))
    return Program("racy", (), tuple(commands))


@pytest.mark.parametrize("seed", range(60))
def test_searches_and_vector_clocks_agree(seed: int, tiny: NpuConfig,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    program = racy_program(random.Random(seed))
    searched = find_problems(program, tiny)
    monkeypatch.setattr(verify_order.HappensBefore, "search_steps", (0, 0))
    assert find_problems(program, tiny) == searched


@pytest.mark.parametrize("seed", range(30))
def test_the_screen_passes_only_commands_without_problems(
        seed: int, tiny: NpuConfig, make_random_program: Callable[[int, int], Program]
) -> None:
    program = make_random_program(seed, 80)
    machine = verify_module.Machine.from_config(tiny)
    ids = {cmd.id for cmd in program.commands}
    screen = verify_module._Screen(machine, program.tensor_map, ids)
    for cmd in program.commands + valid_commands(program):
        problems = list(verify_module._command_problems(cmd, machine, program.tensor_map,
                                                        ids))
        assert not (screen.passes(cmd) and problems), (cmd, problems)


def valid_commands(program: Program) -> tuple[Command, ...]:
    """Commands likely to pass, so that remembered verdicts are exercised both ways."""
    a, b, c = (SramRef("sram0", offset, (4, 4), DType.f32) for offset in (0, 64, 128))
    return tuple(Command(i, "core0.mxu0", MatMul(a, b, c)) for i in range(3)) + tuple(
        Command(10 + i, "core0.vpu", Unary(UnaryKind.relu, a, SramRef("sram0", 256 + i,
                                                                       (4, 4), DType.f32)))
        for i in range(3))


@pytest.mark.parametrize("seed", range(10))
def test_the_replay_follows_the_access_tables(
        seed: int, make_random_program: Callable[[int, int], Program]) -> None:
    for op in (cmd.op for cmd in make_random_program(seed, 80).commands):
        seen: list[tuple[str, SramRef, bool]] = []

        class Recorder(verify_races._RaceFinder):
            def __init__(self) -> None:
                pass

            def _read(self, p: int, field: str, ref: SramRef) -> None:
                seen.append((field, ref, False))

            def _write(self, p: int, field: str, ref: SramRef) -> None:
                seen.append((field, ref, True))

        Recorder().visit(0, op)
        expected = ([(f, r, False) for f, r in sram_reads(op)]
                    + [(f, r, True) for f, r in sram_writes(op)])
        assert seen == expected


def test_a_read_of_adjacent_pieces_updates_like_the_general_path() -> None:
    """``_SpaceHistory.read`` takes shortcuts for a region that is exactly one interval
    or exactly a run of adjacent ones (a buffer written in pieces); every read must leave
    the intervals' histories and return the old ones as ``update`` does, including reads
    with gaps or ragged ends that must take the general path."""
    rng = random.Random(5)
    engine_of = [i % 3 for i in range(4000)]
    fast, plain = verify_races._SpaceHistory(), verify_races._SpaceHistory()
    for p in range(4000):
        base = 64 * rng.randrange(8)
        pieces = rng.randint(1, 4)
        if rng.random() < 0.5:  # write a buffer in pieces, maybe leaving a gap
            for k in range(pieces):
                if rng.random() < 0.9:
                    for space in (fast, plain):
                        space.write(base + 16 * k, base + 16 * (k + 1), ((p, "dst"), ()))
            continue
        start = base + rng.choice((0, 0, 0, 4))
        end = base + 16 * pieces - rng.choice((0, 0, 0, 4))
        reader = (p, "src")
        got = fast.read(start, end, reader, engine_of)
        expected = plain.update(start, end,
                                lambda h: verify_races._with_reader(h, reader, engine_of))
        assert list(got) == expected
        assert (fast.starts, fast.ends, fast.histories) == (
            plain.starts, plain.ends, plain.histories)
