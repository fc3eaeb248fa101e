"""Exact timelines on the `tiny` preset, every number derived by hand.

tiny: 1 GHz; DMA 16 B/cycle, setup 10; DRAM one channel of 16 B/cycle, latency 20,
access granularity 16 B, interleave 64 B; NoC latency 5, 32 B/cycle links;
scratchpad port 64 B/cycle; vector 4 lanes, latency 2, exp costs 4/element/lane;
matrix 4x4 array, f32 native.
A DRAM<->scratchpad transfer therefore costs 10 + 20 + 5 = 35 fixed cycles, then its
bytes at min(16 DMA, 16 DRAM, 32 NoC, 64 port) = 16 B/cycle when alone.
"""

from __future__ import annotations

import pytest

from archsim.config import load_config
from archsim.matrix import matmul_cycles
from archsim.simulator import Simulator
from compiler.ir import Copy, DType, Gather, Load, MatMul, SramRef, Store, Unary, UnaryKind
from compiler.ir.builder import ProgramBuilder

F32 = DType.f32
TINY = load_config("tiny")


def tile(offset: int, shape: tuple[int, ...], space: str = "sram0") -> SramRef:
    return SramRef(space, offset, shape, F32)


def timeline(program, config=TINY) -> list[tuple[str, int, int]]:
    result = Simulator(config).run(program)
    return [(e.engine, e.start, e.end) for e in result.trace]


def test_lone_dma_load() -> None:
    b = ProgramBuilder("lone")
    b.tensor("x", (8, 8), F32, "in")
    b.add("core0.dma0", Load(b.ref("x"), tile(0, (8, 8))))
    # 35 fixed + 256 B / 16 B per cycle
    assert timeline(b.build()) == [("core0.dma0", 0, 51)]


def test_strided_load_pays_per_contiguous_run() -> None:
    b = ProgramBuilder("strided")
    b.tensor("x", (8, 8), F32, "in")
    b.add("core0.dma0", Load(b.ref("x", (0, 8), (0, 4)), tile(0, (8, 4))))
    b.add("core0.dma0", Load(b.ref("x", (0, 8), (0, 8, 2)), tile(256, (8, 4))))
    # half rows: 8 runs of 16 B = 128 B -> 35 + 8; every other element: 32 runs of 4 B,
    # each rounded up to the 16 B granule = 512 B -> 35 + 32
    assert timeline(b.build()) == [("core0.dma0", 0, 43), ("core0.dma0", 43, 110)]


def test_gather_pays_per_row() -> None:
    """A gather is a Load whose rows are separate DRAM runs: 35 fixed cycles, then each
    row rounded up to the 16 B granule at 16 B/cycle.

    - load of 5 i64 indices: 40 B, one run -> 48 B = 3 cycles: 0 -> 38.
    - gather of those 5 rows of w[16, 6] f32: a row is 24 B -> 32 B, 5 * 32 = 160 B
      = 10 cycles: 38 -> 38 + 35 + 10 = 83 (a contiguous load of 5 rows would charge
      only 120 -> 128 B).
    - gather of the first 4 indices from the column box w[:, 2:5]: 12 B -> 16 B per
      row, 64 B = 4 cycles: 83 -> 83 + 35 + 4 = 122.
    - tdma loads the indices into shared SRAM (setup 10 + DRAM 20, no NoC latency, at
      min(32 tdma, 16 DRAM) B/cycle): 0 -> 30 + 3 = 33, its bytes moving at 30..33,
      before core0's load moves its own at 35..38; then gathers the same 5 rows:
      33 -> 33 + 30 + 10 = 73, moving at 63..73, just before core0's gather moves
      (73..83). No two flows overlap, so nothing is shared.
    """
    b = ProgramBuilder("gather")
    b.tensor("ids", (5,), DType.i64, "in")
    b.tensor("w", (16, 6), F32, "in")
    ids = SramRef("sram0", 0, (5,), DType.i64)
    load = b.add("core0.dma0", Load(b.ref("ids"), ids))
    b.add("core0.dma0", Gather(b.ref("w"), ids, tile(64, (5, 6))), [load])
    b.add("core0.dma0", Gather(b.ref("w", (0, 16), (2, 5)), SramRef("sram0", 0, (4,), DType.i64),
                               tile(256, (4, 3))), [load])
    shared_ids = SramRef("shared", 0, (5,), DType.i64)
    shared_load = b.add("tdma", Load(b.ref("ids"), shared_ids))
    b.add("tdma", Gather(b.ref("w"), shared_ids, tile(64, (5, 6), "shared")), [shared_load])
    assert timeline(b.build()) == [
        ("core0.dma0", 0, 38), ("core0.dma0", 38, 83), ("core0.dma0", 83, 122),
        ("tdma", 0, 33), ("tdma", 33, 73),
    ]


@pytest.mark.parametrize(("dataflow", "expected"), [
    # m=6, k=5, n=7 on 4x4; cycles = per fold * ceil(Sr/R) * ceil(Sc/C), per fold
    # 2R + C + T - 2 (ws, is: the stationary operand is shifted in first), R + C + T - 2
    # (os: the outputs stay in the array, nothing to preload)
    ("ws", (8 + 4 + 6 - 2) * 2 * 2),   # Sr=k=5, Sc=n=7, T=m=6
    ("os", (4 + 4 + 5 - 2) * 2 * 2),   # Sr=m=6, Sc=n=7, T=k=5
    ("is", (8 + 4 + 7 - 2) * 2 * 2),   # Sr=k=5, Sc=m=6, T=n=7
])
def test_matmul_tile_follows_fold_structure(dataflow: str, expected: int) -> None:
    config = TINY.with_overrides({"core.matrix.dataflow": dataflow})
    assert matmul_cycles(6, 5, 7, config.core.matrix) == expected
    b = ProgramBuilder("mm")
    b.add("core0.mxu0", MatMul(tile(0, (6, 5)), tile(256, (5, 7)), tile(512, (6, 7))))
    assert timeline(b.build(), config) == [("core0.mxu0", 0, expected)]


def test_f32_on_a_bf16_array_takes_extra_passes() -> None:
    config = TINY.with_overrides({"core.matrix.input_dtype": "bf16"})
    assert matmul_cycles(4, 4, 4, config.core.matrix, F32) == 3 * (8 + 4 + 4 - 2)
    assert matmul_cycles(4, 4, 4, config.core.matrix, DType.bf16) == 8 + 4 + 4 - 2


def test_double_buffering_overlaps_dma_with_compute() -> None:
    """Four 16x4 f32 tiles through two buffers: load 51 cycles, exp 2 + 16*4 = 66.
    The vector unit is the bottleneck, so total = first load + 4 computes = 315."""
    b = ProgramBuilder("double_buffer")
    b.tensor("x", (64, 4), F32, "in")
    buffers = [tile(0, (16, 4)), tile(256, (16, 4))]
    loads, computes = [], []
    for i in range(4):
        war = [computes[i - 2]] if i >= 2 else []  # buffer reuse waits for its reader
        loads.append(b.add("core0.dma0", Load(b.ref("x", (16 * i, 16 * i + 16), (0, 4)),
                                               buffers[i % 2]), war))
        out = tile(512 + 256 * i, (16, 4))
        computes.append(b.add("core0.vpu", Unary(UnaryKind.exp, buffers[i % 2], out),
                              [loads[i]]))
    assert timeline(b.build()) == [
        ("core0.dma0", 0, 51), ("core0.vpu", 51, 117),
        ("core0.dma0", 51, 102), ("core0.vpu", 117, 183),
        ("core0.dma0", 117, 168), ("core0.vpu", 183, 249),
        ("core0.dma0", 183, 234), ("core0.vpu", 249, 315),
    ]


def test_two_dma_engines_share_one_dram_channel() -> None:
    """Both start after 35 fixed cycles at 8 B/cycle each. The 128 B one ends at
    35 + 16 = 51; the other then has 128 B left at the full 16 B/cycle: 51 + 8 = 59."""
    b = ProgramBuilder("contention")
    b.tensor("x", (8, 8), F32, "in")
    b.add("core0.dma0", Load(b.ref("x"), tile(0, (8, 8))))
    b.add("core0.dma1", Load(b.ref("x", (0, 4), (0, 8)), tile(256, (4, 8))))
    assert timeline(b.build()) == [("core0.dma0", 0, 59), ("core0.dma1", 0, 51)]


def test_equal_transfers_on_one_channel_finish_together() -> None:
    b = ProgramBuilder("contention_equal")
    b.tensor("x", (8, 8), F32, "in")
    b.add("core0.dma0", Load(b.ref("x"), tile(0, (8, 8))))
    b.add("core1.dma0", Load(b.ref("x"), tile(0, (8, 8), "sram1")))
    # 35 + 256 B at 8 B/cycle
    assert timeline(b.build()) == [("core0.dma0", 0, 67), ("core1.dma0", 0, 67)]


def test_more_channels_remove_the_contention() -> None:
    config = TINY.with_overrides({"dram.channels": 2})
    b = ProgramBuilder("two_channels")
    b.tensor("x", (8, 8), F32, "in")
    b.add("core0.dma0", Load(b.ref("x"), tile(0, (8, 8))))
    b.add("core1.dma0", Load(b.ref("x"), tile(0, (8, 8), "sram1")))
    # 32 B/cycle of DRAM shared by two engines capped at 16 each: no slowdown
    assert timeline(b.build(), config) == [("core0.dma0", 0, 51), ("core1.dma0", 0, 51)]


def test_dependency_chain_across_cores() -> None:
    """load (51) -> exp on core0 (66) -> copy sram0->sram1 (10 setup + 5 NoC + 256 B at
    16 B/cycle = 31) -> neg on core1 (2 + 16) -> store from core1 (51)."""
    b = ProgramBuilder("chain")
    b.tensor("x", (8, 8), F32, "in")
    b.tensor("y", (8, 8), F32, "out")
    load = b.add("core0.dma0", Load(b.ref("x"), tile(0, (8, 8))))
    exp = b.add("core0.vpu", Unary(UnaryKind.exp, tile(0, (8, 8)), tile(256, (8, 8))), [load])
    copy = b.add("core0.dma1", Copy(tile(256, (8, 8)), tile(0, (8, 8), "sram1")), [exp])
    neg = b.add("core1.vpu", Unary(UnaryKind.neg, tile(0, (8, 8), "sram1"),
                                   tile(256, (8, 8), "sram1")), [copy])
    b.add("core1.dma0", Store(tile(256, (8, 8), "sram1"), b.ref("y")), [neg])
    assert timeline(b.build()) == [
        ("core0.dma0", 0, 51), ("core0.vpu", 51, 117), ("core0.dma1", 117, 148),
        ("core1.vpu", 148, 166), ("core1.dma0", 166, 217),
    ]


def test_two_engines_of_a_core_share_its_noc_link() -> None:
    """Two DRAM channels (32 B/cycle) fit both engines' 16 B/cycle; a 24 B/cycle NoC link
    does not, though each engine alone fits it: the plan must track the link because
    its engines' solo rates add up to more than it carries. Both move 256 B at
    12 B/cycle after 35 fixed cycles: 35 + ceil(256 / 12) = 35 + 22 = 57."""
    config = TINY.with_overrides({"dram.channels": 2, "noc.link_bandwidth_bytes_per_cycle": 24})
    b = ProgramBuilder("noc_contention")
    b.tensor("x", (8, 8), F32, "in")
    b.add("core0.dma0", Load(b.ref("x"), tile(0, (8, 8))))
    b.add("core0.dma1", Load(b.ref("x"), tile(256, (8, 8))))
    assert timeline(b.build(), config) == [("core0.dma0", 0, 57), ("core0.dma1", 0, 57)]
