"""Fixtures for the scheduled-IR tests: the ``tiny`` NPU and program generators."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from archsim.config import NpuConfig, load_config
from compiler.ir.builder import ProgramBuilder
from compiler.ir.dtypes import DType
from compiler.ir.operands import ROLES, DramRef, DramTensor, Scalar, Slice, SramRef
from compiler.ir.ops import (
    Binary,
    BinaryKind,
    Cast,
    Command,
    Copy,
    HostOp,
    HostTransfer,
    Load,
    MatMul,
    Op,
    Program,
    Reduce,
    MulAdd,
    ReduceKind,
    Select,
    Store,
    Transpose,
    Unary,
    UnaryKind,
    VCopy,
    VectorMatMul,
)


@pytest.fixture(scope="session")
def tiny() -> NpuConfig:
    return load_config("tiny")


# ---------------------------------------------------------------- random programs
# Syntactically rich, semantically arbitrary: for print/parse round trips.

_NAMES = ("A", "x_1", "w.q", "tpu-v3", "my tensor", "quote\"d", "ünï", "", "-lead", "a+b")
_SOURCES = ("", "aten.mm", "aten.add.Tensor", "  padded ", "tab\there", "line\nbreak",
            '"quoted"', "has # hash", "node_17 (layer.0.attn)", "\u2028sep")
_ENGINES = ("core0.dma0", "core1.dma1", "core0.mxu0", "core3.mxu1", "core0.vpu",
            "core1.vpu2", "tdma", "hdma", "host")
_SCALARS = (0.5, -1.0, 0.0, 1e-05, -3.25e+30, float("inf"), float("-inf"), 7.0, 1 / 3)


def _shape(rng: random.Random) -> tuple[int, ...]:
    return tuple(rng.randint(0, 300) for _ in range(rng.randint(0, 4)))


def _sram(rng: random.Random) -> SramRef:
    space = rng.choice(("sram0", "sram1", "sram12", "shared"))
    offset = rng.choice((0, 4, 0x10000, rng.randint(-64, 1 << 24)))
    return SramRef(space, offset, _shape(rng), rng.choice(list(DType)))


def _slice(rng: random.Random) -> Slice:
    start = rng.randint(-3, 500)
    return Slice(start, start + rng.randint(-2, 500), rng.choice((1, 1, 2, 3, 0, -1)))


def _dram(rng: random.Random) -> DramRef:
    return DramRef(rng.choice(_NAMES), tuple(_slice(rng) for _ in range(rng.randint(0, 4))))


def _value(rng: random.Random) -> SramRef | Scalar:
    return Scalar(rng.choice(_SCALARS)) if rng.random() < 0.4 else _sram(rng)


def _random_op(rng: random.Random) -> Op:
    makers: list[Callable[[], Op]] = [
        lambda: Load(_dram(rng), _sram(rng)),
        lambda: Store(_sram(rng), _dram(rng)),
        lambda: Copy(_sram(rng), _sram(rng)),
        lambda: MatMul(_sram(rng), _sram(rng), _sram(rng), rng.random() < 0.5),
        lambda: Unary(rng.choice(list(UnaryKind)), _sram(rng), _sram(rng)),
        lambda: Binary(rng.choice(list(BinaryKind)), _value(rng), _value(rng), _sram(rng)),
        lambda: MulAdd(_sram(rng), _sram(rng), _value(rng), _sram(rng), rng.random() < 0.5),
        lambda: Select(_sram(rng), _value(rng), _value(rng), _sram(rng)),
        lambda: Cast(_sram(rng), _sram(rng)),
        lambda: Reduce(rng.choice(list(ReduceKind)), _sram(rng), _sram(rng),
                       rng.randint(-1, 3)),
        lambda: Transpose(_sram(rng), _sram(rng),
                          tuple(rng.sample(range(4), rng.randint(0, 4)))),
        lambda: VCopy(_sram(rng), _sram(rng)),
        lambda: VectorMatMul(_sram(rng), _sram(rng), _sram(rng), rng.random() < 0.5),
        lambda: HostTransfer(_dram(rng), rng.random() < 0.5),
        lambda: HostOp(rng.choice(("aten.cumsum.default", "my op", "x")),
                       tuple(rng.sample(_NAMES, rng.randint(0, 3))),
                       tuple(rng.sample(_NAMES, rng.randint(0, 2))), rng.randint(0, 10**6)),
    ]
    return rng.choice(makers)()


def random_program(seed: int, commands: int = 60) -> Program:
    """A program exercising every op class, dtype, role and odd name/source."""
    rng = random.Random(seed)
    tensors = tuple(
        DramTensor(name, _shape(rng), rng.choice(list(DType)), rng.choice(ROLES))
        for name in rng.sample(_NAMES, rng.randint(0, len(_NAMES)))
    )
    cmds = tuple(
        Command(rng.choice((i, i * 7, 10**9 + i)), rng.choice(_ENGINES), _random_op(rng),
                tuple(rng.randint(0, i + 3) for _ in range(rng.randint(0, 3))),
                rng.choice(_SOURCES))
        for i in range(commands)
    )
    return Program(rng.choice(_NAMES), tensors, cmds, rng.choice(("", "tiny", "tpu-v3")))


@pytest.fixture
def make_random_program() -> Callable[[int, int], Program]:
    return random_program


# ---------------------------------------------------------------- valid programs


def pipeline_program(tiles: int, cores: int = 2) -> Program:
    """A valid double-buffered ``y = relu(x) + x`` over ``tiles`` 4x8 f32 tiles per core
    on the tiny NPU: load (dma0) -> relu, add (vpu) -> store (dma1), with every WAR
    and RAW hazard on the reused buffers covered by a dependency."""
    b = ProgramBuilder("pipeline", target="tiny")
    rows = 4 * tiles
    for c in range(cores):
        b.tensor(f"x{c}", (rows, 8), DType.f32, "in")
        b.tensor(f"y{c}", (rows, 8), DType.f32, "out")
    for c in range(cores):
        _pipeline_core(b, c, tiles)
    return b.build()


def _pipeline_core(b: ProgramBuilder, core: int, tiles: int) -> None:
    space = f"sram{core}"
    last_vpu: list[int | None] = [None, None]   # last vpu command reading each in-buffer
    last_store: list[int | None] = [None, None]  # last store reading each out-buffer
    for i in range(tiles):
        slot = i % 2
        src = SramRef(space, 0x400 * slot, (4, 8), DType.f32)
        tmp = SramRef(space, 0x1000 + 0x400 * slot, (4, 8), DType.f32)
        dst = SramRef(space, 0x2000 + 0x400 * slot, (4, 8), DType.f32)
        rows = (4 * i, 4 * i + 4)
        load = b.add(f"core{core}.dma0", Load(b.ref(f"x{core}", rows, (0, 8)), src),
                     _known(last_vpu[slot]), source="aten.relu")
        relu = b.add(f"core{core}.vpu", Unary(UnaryKind.relu, src, tmp), [load],
                     source="aten.relu")
        add = b.add(f"core{core}.vpu", Binary(BinaryKind.add, tmp, src, dst),
                    [relu, *_known(last_store[slot])], source="aten.add.Tensor")
        store = b.add(f"core{core}.dma1", Store(dst, b.ref(f"y{core}", rows, (0, 8))), [add],
                      source="aten.add.Tensor")
        last_vpu[slot], last_store[slot] = add, store


def _known(command: int | None) -> list[int]:
    return [] if command is None else [command]


@pytest.fixture
def make_pipeline_program() -> Callable[..., Program]:
    return pipeline_program
