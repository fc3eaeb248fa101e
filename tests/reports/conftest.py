"""Small hand-built programs for the report tests, run on the ``tiny`` preset."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from archsim.config import load_config
from archsim.result import SimResult
from archsim.simulator import Simulator
from compiler.ir.builder import ProgramBuilder
from compiler.ir.dtypes import DType
from compiler.ir.operands import Scalar, SramRef
from compiler.ir.ops import (
    Binary,
    BinaryKind,
    Copy,
    HostOp,
    HostTransfer,
    Load,
    MatMul,
    Program,
    Reduce,
    ReduceKind,
    Store,
    Unary,
    UnaryKind,
)

F32 = DType.f32


def matmul_softmax_program(m: int = 32, k: int = 64, n: int = 32, tile_m: int = 8,
                           tile_k: int = 16, cores: int = 2, host: bool = True) -> Program:
    """``C = softmax(A @ B, dim=1)`` tiled over rows (split across cores) and k.

    B goes DRAM -> shared SRAM on the task DMA, then each core copies its k-tiles into
    its scratchpad (dma1) while dma0 loads A tiles: double-buffered, so loads overlap
    the matrix engine. The softmax runs on the vector unit; with ``host`` the program
    starts with a host->device copy of A and ends with a host op reading C.
    """
    b = ProgramBuilder("mm_softmax")
    b.tensor("A", (m, k), F32, "in")
    b.tensor("B", (k, n), F32, "in")
    b.tensor("C", (m, n), F32, "out")
    start_deps: list[int] = []
    if host:
        start_deps.append(b.add("hdma", HostTransfer(b.ref("A"), to_device=True),
                                source="input.copy_"))
    b_shared = SramRef("shared", 0, (k, n), F32)
    b_loaded = b.add("tdma", Load(b.ref("B"), b_shared), source="aten.mm")
    a_bytes, b_bytes = tile_m * tile_k * 4, tile_k * n * 4
    stores = []
    rows_per_core = m // cores
    for core in range(cores):
        space = f"sram{core}"
        a_buf = [SramRef(space, i * a_bytes, (tile_m, tile_k), F32) for i in range(2)]
        b_base = 2 * a_bytes
        b_buf = [SramRef(space, b_base + i * b_bytes, (tile_k, n), F32) for i in range(2)]
        acc = SramRef(space, b_base + 2 * b_bytes, (tile_m, n), F32)
        tmp = SramRef(space, acc.end, (tile_m, n), F32)
        stat = SramRef(space, tmp.end, (tile_m, 1), F32)
        last_use: dict[tuple[str, int], int] = {}
        last_store = None
        for row in range(core * rows_per_core, (core + 1) * rows_per_core, tile_m):
            matmul = None
            for step, k0 in enumerate(range(0, k, tile_k)):
                slot = step % 2
                war_a = [last_use[("a", slot)]] if ("a", slot) in last_use else []
                war_b = [last_use[("b", slot)]] if ("b", slot) in last_use else []
                load_a = b.add(f"core{core}.dma0",
                               Load(b.ref("A", (row, row + tile_m), (k0, k0 + tile_k)),
                                    a_buf[slot]), [*start_deps, *war_a], source="aten.mm")
                load_b = b.add(f"core{core}.dma1",
                               Copy(SramRef("shared", k0 * n * 4, (tile_k, n), F32),
                                    b_buf[slot]), [b_loaded, *war_b], source="aten.mm")
                war_acc = [last_store] if step == 0 and last_store is not None else []
                matmul = b.add(f"core{core}.mxu0",
                               MatMul(a_buf[slot], b_buf[slot], acc, accumulate=step > 0),
                               [load_a, load_b, *war_acc], source="aten.mm")
                last_use[("a", slot)] = last_use[("b", slot)] = matmul
            vpu = f"core{core}.vpu"
            src = "aten._softmax"
            mx = b.add(vpu, Reduce(ReduceKind.max, acc, stat, 1), [matmul], source=src)
            b.add(vpu, Binary(BinaryKind.sub, acc, stat, tmp), [mx], source=src)
            b.add(vpu, Unary(UnaryKind.exp, tmp, tmp), source=src)
            b.add(vpu, Reduce(ReduceKind.sum, tmp, stat, 1), source=src)
            div = b.add(vpu, Binary(BinaryKind.div, tmp, stat, tmp), source=src)
            last_store = b.add(f"core{core}.dma0",
                               Store(tmp, b.ref("C", (row, row + tile_m), (0, n))), [div],
                               source="aten._softmax")
            stores.append(last_store)
    if host:
        b.tensor("idx", (m, 1), DType.i64, "out")
        b.add("host", HostOp("aten.argmax", ("C",), ("idx",), cycles=300), stores,
              source="aten.argmax")
    return b.build()


def chain_program() -> Program:
    """A strictly serial chain across engines: load -> scale -> store."""
    b = ProgramBuilder("chain")
    b.tensor("x", (8, 8), F32, "in")
    b.tensor("y", (8, 8), F32, "out")
    tile = SramRef("sram0", 0, (8, 8), F32)
    load = b.add("core0.dma0", Load(b.ref("x"), tile), source="x")
    scale = b.add("core0.vpu", Binary(BinaryKind.mul, tile, Scalar(2.0), tile), [load],
                  source="aten.mul")
    b.add("core0.dma1", Store(tile, b.ref("y")), [scale], source="aten.mul")
    return b.build()


def contention_program() -> Program:
    """Four independent loads at once on two cores: they share the single DRAM channel."""
    b = ProgramBuilder("contention")
    b.tensor("x", (64, 64), F32, "in")
    for core in range(2):
        for dma in range(2):
            rows = (32 * core + 16 * dma, 32 * core + 16 * dma + 16)
            tile = SramRef(f"sram{core}", dma * 4096, (16, 64), F32)
            b.add(f"core{core}.dma{dma}", Load(b.ref("x", rows, (0, 64)), tile), source="load")
    return b.build()


def run(program: Program, preset: str = "tiny") -> SimResult:
    return Simulator(load_config(preset)).run(program, verify=False)


@pytest.fixture(scope="session")
def mm_result() -> SimResult:
    return run(matmul_softmax_program())


@pytest.fixture(scope="session")
def chain_result() -> SimResult:
    return run(chain_program())


@pytest.fixture(scope="session")
def contention_result() -> SimResult:
    return run(contention_program())


@pytest.fixture(scope="session")
def all_results(mm_result: SimResult, chain_result: SimResult,
                contention_result: SimResult) -> list[SimResult]:
    return [mm_result, chain_result, contention_result,
            run(matmul_softmax_program(host=False, tile_k=32))]


@pytest.fixture(scope="session")
def simulate():
    """``simulate(program, preset="tiny") -> SimResult`` for tests that build their own."""
    return run


@pytest.fixture(scope="session")
def programs() -> SimpleNamespace:
    """The program builders above, for tests that vary sizes or presets."""
    return SimpleNamespace(matmul_softmax=matmul_softmax_program, chain=chain_program,
                           contention=contention_program)
