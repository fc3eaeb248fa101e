"""The per-op table: attribution, sorting, bounds and efficiency."""

from __future__ import annotations

import pytest

from compiler.ir.builder import ProgramBuilder
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.ir.ops import Load, Store, Unary, UnaryKind
from reports.ops import SORT_KEYS, op_rows, op_table


def test_every_command_attributed_once(mm_result):
    rows = op_rows(mm_result)
    assert sum(r.commands for r in rows) == len(mm_result.program.commands)
    assert sum(r.flops for r in rows) == mm_result.flops
    assert sum(r.critical_cycles for r in rows) == mm_result.total_cycles
    assert {r.source for r in rows} == {"input.copy_", "aten.mm", "aten._softmax", "aten.argmax"}


@pytest.mark.parametrize("sort, key", [
    ("time", lambda r: (r.critical_cycles, r.span_cycles)), ("span", lambda r: r.span_cycles),
    ("flops", lambda r: r.flops),
    ("bytes", lambda r: r.bytes), ("critical", lambda r: r.critical_cycles)])
def test_sorts_largest_first(mm_result, sort, key):
    values = [key(r) for r in op_rows(mm_result, sort=sort)]
    assert values == sorted(values, reverse=True)


def test_sort_by_name_and_top(mm_result):
    assert [r.source for r in op_rows(mm_result, sort="name")] == sorted(
        r.source for r in op_rows(mm_result))
    top = op_rows(mm_result, sort="flops", top=1)
    assert [r.source for r in top] == ["aten.mm"]


def test_unknown_sort_names_the_choices(mm_result):
    with pytest.raises(ValueError, match="unknown sort 'speed'; choose one of time"):
        op_rows(mm_result, sort="speed")
    assert set(SORT_KEYS) >= {"time", "flops", "bytes"}


def test_bounds(mm_result):
    rows = {r.source: r for r in op_rows(mm_result)}
    assert rows["aten.mm"].bound == "compute" and rows["aten.mm"].dominant_kind == "mxu"
    assert rows["input.copy_"].bound == "memory"
    assert rows["aten.argmax"].bound == "host" and rows["aten.argmax"].efficiency is None


def test_efficiency_hand_derived(chain_result):
    rows = {r.source: r for r in op_rows(chain_result)}
    # "x": one 256 B load over 51 cycles against 16 B/cycle of DRAM.
    assert rows["x"].bound == "memory"
    assert rows["x"].efficiency == pytest.approx(256 / (51 * 16))
    # "aten.mul": the vector multiply (cycles 51-69) and the store (69-120); the DMA
    # covers 51 of the 69-cycle span: memory bound, over the store's 256 DRAM bytes.
    mul = rows["aten.mul"]
    assert (mul.first_start, mul.last_end) == (51, 120)
    assert mul.coverage_cycles == {"vpu": 18, "dma": 51}
    assert mul.bound == "memory"
    assert mul.efficiency == pytest.approx(256 / (69 * 16))


def test_all_at_once_is_memory_bound(contention_result):
    (row,) = op_rows(contention_result)
    assert row.coverage_cycles == {"dma": 1059} and row.busy_cycles == {"dma": 4 * 1059}
    assert row.bound == "memory"
    assert row.efficiency == pytest.approx(4 * 4096 / (1059 * 16))


def test_latency_bound_when_its_engines_mostly_wait(simulate):
    b = ProgramBuilder("gap")
    b.tensor("x", (8, 8), DType.f32, "in")
    b.tensor("y", (8, 8), DType.f32, "out")
    tile = SramRef("sram0", 0, (8, 8), DType.f32)
    big = SramRef("sram0", 256, (32, 32), DType.f32)
    load = b.add("core0.dma0", Load(b.ref("x"), tile), source="gap")
    # 1024 transcendental elements: 2 + 1024 / 4 * 4 = 1026 cycles of another op.
    other = b.add("core0.vpu", Unary(UnaryKind.exp, big, big), [load], source="other")
    b.add("core0.dma0", Store(tile, b.ref("y")), [other], source="gap")
    rows = {r.source: r for r in op_rows(simulate(b.build()))}
    gap = rows["gap"]
    assert (gap.span_cycles, gap.coverage_cycles["dma"]) == (51 + 1026 + 51, 102)
    assert gap.bound == "latency"
    assert rows["other"].bound == "compute"


def test_table_text(mm_result):
    text = op_table(mm_result, sort="flops", top=2)
    lines = text.splitlines()
    assert lines[0].startswith("Ops by flops (2 of 4)")
    assert "aten.mm" in lines[3] and "compute" in lines[3]
    assert max(len(line) for line in lines) <= 100
