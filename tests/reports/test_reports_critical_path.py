"""Critical path and idle-reason accounting, on hand-derived tiny-preset timelines.

Cycle counts (tiny preset): a DMA load/store of 256 B costs setup 10 + DRAM latency 20
+ NoC latency 5 + 256 B / 16 B per cycle = 51 cycles; a vector multiply of 64 elements
costs pipeline 2 + 64 / 4 lanes = 18 cycles. Four concurrent 4 KiB loads share the one
16 B/cycle DRAM channel: 35 + 16384 B / 16 = 1059 cycles each instead of 35 + 256 = 291.
"""

from __future__ import annotations

import dataclasses

import pytest

from reports.critical_path import critical_path, critical_path_text, engine_times, idle_text
from reports.data import CommandRecord, ReportData, report_data
from reports.extended import ExtendedSpan


def test_chain_path_is_every_command(chain_result):
    path = critical_path(chain_result)
    assert [(s.command, s.start, s.end, s.via) for s in path.steps] == [
        (0, 0, 51, "start"), (1, 51, 69, "dep"), (2, 69, 120, "dep")]
    assert path.length_cycles == chain_result.total_cycles == 120


def test_path_length_equals_latency_on_every_program(all_results):
    for result in all_results:
        path = critical_path(result)
        assert path.length_cycles == result.total_cycles
        assert path.steps[0].start == 0
        assert path.steps[-1].end == result.total_cycles
        for before, after in zip(path.steps, path.steps[1:]):
            assert before.end == after.start  # segments tile [0, total]


def test_overlapped_program_path_skips_overlapped_loads(mm_result):
    path = critical_path(mm_result)
    on_path = {s.command for s in path.steps}
    # Double buffering: the scratchpad copies on dma1 hide under the matrix engine.
    copies = {c.id for c in mm_result.program.commands if c.op.mnemonic == "copy"}
    assert len(copies - on_path) >= len(copies) - 2
    assert path.cycles_by("kind")["mxu"] > path.length_cycles / 2
    assert sum(path.cycles_by("source").values()) == mm_result.total_cycles


def _record(cid: int, engine: str, start: int, end: int,
            deps: tuple[int, ...] = ()) -> CommandRecord:
    return CommandRecord(id=cid, engine=engine, op="binary", source=f"op{cid}", deps=deps,
                         start=start, end=end, bytes=0, flops=0, dram_bytes=0,
                         uncontended_cycles=end - start)


def _data(template, *commands: CommandRecord) -> ReportData:
    """``template``'s run with its commands replaced."""
    return dataclasses.replace(report_data(template), commands=commands,
                               total_cycles=max(c.end for c in commands))


def test_ties_prefer_the_dependency_over_the_queue(chain_result):
    data = _data(chain_result, _record(0, "core0.vpu", 0, 10), _record(1, "core1.vpu", 0, 10),
                 _record(2, "core0.vpu", 10, 20, deps=(1,)))
    assert [(s.command, s.via) for s in critical_path(data).steps] == [
        (1, "start"), (2, "dep")]


def test_inconsistent_trace_is_an_error_naming_the_command(chain_result):
    data = _data(chain_result, _record(0, "core0.vpu", 0, 10), _record(1, "core0.vpu", 12, 20))
    with pytest.raises(ValueError, match="command 1 on core0.vpu starts at cycle 12"):
        critical_path(data)


def test_chain_idle_reasons_hand_derived(chain_result):
    times = {t.engine: t for t in engine_times(chain_result)}
    assert (times["core0.dma0"].busy, times["core0.dma0"].waiting,
            times["core0.dma0"].nothing_to_do) == (51, 0, 69)
    assert (times["core0.vpu"].busy, times["core0.vpu"].waiting,
            times["core0.vpu"].nothing_to_do) == (18, 51, 51)
    assert dict(times["core0.vpu"].waiting_on) == {"dma": 51}
    assert (times["core0.dma1"].busy, times["core0.dma1"].waiting,
            dict(times["core0.dma1"].waiting_on)) == (51, 69, {"vpu": 69})


def test_contention_is_duration_beyond_uncontended(contention_result):
    for t in engine_times(contention_result):
        assert (t.busy, t.contention, t.waiting, t.nothing_to_do) == (291, 768, 0, 0)


def test_buckets_sum_to_each_engines_time(all_results):
    for result in all_results:
        times = engine_times(result, include_unused=True)
        assert {t.engine for t in times} >= set(result.engine_busy_cycles)
        for t in times:
            assert t.busy + t.contention + t.waiting + t.nothing_to_do == result.total_cycles
            assert t.idle + t.contention == result.total_cycles - t.busy
            assert sum(t.waiting_on.values()) == t.waiting
            assert t.busy_including_contention == result.engine_busy_cycles.get(t.engine, 0)


def test_unused_engine_has_nothing_to_do(chain_result):
    times = {t.engine: t for t in engine_times(chain_result, include_unused=True)}
    assert times["core1.mxu0"].nothing_to_do == chain_result.total_cycles
    assert "core1.mxu0" not in {t.engine for t in engine_times(chain_result)}


def test_text_forms(mm_result):
    text = critical_path_text(mm_result)
    assert f"{mm_result.total_cycles:,} cycles" in text
    assert "aten.mm" in text and "Path time by engine kind" in text
    idle = idle_text(mm_result)
    assert "nothing to do" in idle and "core0.mxu0" in idle
    assert max(len(line) for line in idle.splitlines()) <= 100


def test_transfers_in_flight_stream_on_the_path_and_are_counted_once():
    """Three 256 B loads on one engine keeping 3 in flight (tiny: 35 cycles of latency,
    16 of data each): all issue at 0, data streams 35-51, 51-67, 67-83."""
    from archsim.config import load_config
    from archsim.simulator import Simulator
    from compiler.ir import DType, Load, SramRef
    from compiler.ir.builder import ProgramBuilder

    b = ProgramBuilder("three loads")
    b.tensor("x", (8, 8), DType.f32, "in")
    for n in range(3):
        b.add("core0.dma0", Load(b.ref("x"), SramRef("sram0", 256 * n, (8, 8), DType.f32)))
    config = load_config("tiny").with_overrides({"core.dma.outstanding": 3})
    result = Simulator(config).run(b.build())
    path = critical_path(result)
    assert [(s.command, s.start, s.end, s.via) for s in path.steps] == [
        (0, 0, 51, "start"), (1, 51, 67, "stream"), (2, 67, 83, "stream")]
    (dma,) = engine_times(result)
    assert (dma.busy, dma.contention, dma.waiting, dma.nothing_to_do) == (83, 0, 0, 0)
    assert report_data(result).engine_busy_cycles["core0.dma0"] == 83
    assert result.engine_busy_cycles["core0.dma0"] == 83


def test_text_ranks_ops_by_share_names_modules_and_merges_layers():
    """Two identical blocks: rows are module path + aten node, sorted by share; ops
    under 1% are folded; the across-layers line merges blocks.0 and blocks.1."""
    import re

    import torch

    import compiler
    from archsim.config import load_config

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up, self.down = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(x)))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.Sequential(Block(), Block())

        def forward(self, x):
            return self.blocks(x)

    x = torch.randn(32, 64)
    result = compiler.compile_graph(compiler.export_model(Net(), (x,)),
                                    load_config("tiny")).simulate()
    text = critical_path_text(result, max_rows=3)
    rows = [line for line in text.splitlines() if re.match(r"  blocks\.\d", line)]
    assert len(rows) == 3
    shares = [float(row.split()[-1].rstrip("%")) for row in rows]
    assert shares == sorted(shares, reverse=True) and shares[0] > 1.0
    assert all(re.match(r"  blocks\.[01]\.(up|down):addmm", row) for row in rows)
    folded = re.search(r"\.\.\. (\d+) more ops .*: ([\d,]+) cycles", text)
    listed = sum(int(row.split()[-2].replace(",", "")) for row in rows)
    assert listed + int(folded.group(2).replace(",", "")) == result.total_cycles
    across = re.search(r"Across layers: (.*)", text).group(1)
    assert "blocks.*.up:addmm" in across and "blocks.*.down:addmm" in across


def _step(cid: int, engine: str, op: str, source: str, start: int, end: int,
          deps: tuple[int, ...] = ()) -> CommandRecord:
    return CommandRecord(id=cid, engine=engine, op=op, source=source, deps=deps,
                         start=start, end=end, bytes=0, flops=0, dram_bytes=0,
                         uncontended_cycles=end - start)


def _two_layers(template) -> ReportData:
    """A hand-made 200-cycle trace (tiny's 1 GHz clock): layer 0's load (0-40) and
    matmul (40-100), layer 1's matmul queued after it on the array (100-160), an
    unattributed 2-cycle vector op (160-162, exactly 1% of the run) and layer 1's store
    (162-200); a vector op on core 1 (0-10) is off the path."""
    return _data(template,
                 _step(0, "core0.dma0", "load", "blocks.0.proj:addmm_1", 0, 40),
                 _step(1, "core0.mxu0", "matmul", "blocks.0.proj:addmm_1", 40, 100, (0,)),
                 _step(2, "core0.mxu0", "matmul", "blocks.1.proj:addmm_5", 100, 160),
                 _step(3, "core0.vpu", "binary", "", 160, 162, (2,)),
                 _step(4, "core0.dma1", "store", "blocks.1.out:store_7", 162, 200, (3,)),
                 _step(5, "core1.vpu", "binary", "other", 0, 10))


def test_path_cycles_by_each_key_largest_first(chain_result):
    path = critical_path(_two_layers(chain_result))
    assert [(s.command, s.via) for s in path.steps] == [
        (0, "start"), (1, "dep"), (2, "queue"), (3, "dep"), (4, "dep")]
    assert list(path.cycles_by("source").items()) == [
        ("blocks.0.proj:addmm_1", 100), ("blocks.1.proj:addmm_5", 60),
        ("blocks.1.out:store_7", 38), ("<unattributed>", 2)]
    assert list(path.cycles_by("engine").items()) == [
        ("core0.mxu0", 120), ("core0.dma0", 40), ("core0.dma1", 38), ("core0.vpu", 2)]
    assert list(path.cycles_by("op").items()) == [
        ("matmul", 120), ("load", 40), ("store", 38), ("binary", 2)]
    assert list(path.cycles_by("kind").items()) == [("mxu", 120), ("dma", 78), ("vpu", 2)]
    with pytest.raises(ValueError, match="cannot group the critical path by 'core'"):
        path.cycles_by("core")


def test_critical_path_text_by_op_with_layers_merged(chain_result):
    text = critical_path_text(_two_layers(chain_result))
    lines = text.splitlines()
    # 5 steps, 200 cycles = 200 ns at 1 GHz (in the summary's units: llama-7b's
    # 1,068,245,908 cycles read "1068245.91 us"); rows by cycles, the 2-cycle op (exactly
    # the 1% fold threshold) kept; layers 0 and 1 of proj merged: 160 of 200 cycles
    assert lines[0] == "Critical path: 5 commands, 200 cycles (200 ns), by op"
    assert lines[1].split() == ["source", "op", "engines", "commands", "first", "last",
                                "cycles", "share"]
    # source, op and engines left-aligned, the numbers right-aligned
    assert lines[3] == ("  blocks.0.proj:addmm_1  load,matmul  dma,mxu         2      0   100"
                        "     100  50.0%")
    assert lines[4] == ("  blocks.1.proj:addmm_5  matmul       mxu             1    100   160"
                        "      60  30.0%")
    assert [line.split() for line in lines[3:7]] == [
        ["blocks.0.proj:addmm_1", "load,matmul", "dma,mxu", "2", "0", "100", "100", "50.0%"],
        ["blocks.1.proj:addmm_5", "matmul", "mxu", "1", "100", "160", "60", "30.0%"],
        ["blocks.1.out:store_7", "store", "dma", "1", "162", "200", "38", "19.0%"],
        ["<unattributed>", "binary", "vpu", "1", "160", "162", "2", "1.0%"]]
    assert lines[7:] == [
        "Across layers: blocks.*.proj:addmm 80.0%, blocks.*.out:store 19.0%, "
        "<unattributed> 1.0%",
        "Path time by engine kind: mxu 60.0%, dma 39.0%, vpu 1.0%"]


def test_critical_path_text_folds_past_max_rows(chain_result):
    lines = critical_path_text(_two_layers(chain_result), max_rows=2).splitlines()
    # the store (38) and the unattributed op (2) are past the first 2 rows: 40 cycles
    assert lines[5] == ("... 2 more ops (under 1.0% each, or past the first 2): 40 cycles "
                        "(20.0%)")


def test_no_commands_no_path(chain_result):
    data = dataclasses.replace(report_data(chain_result), commands=(), total_cycles=0)
    path = critical_path(data)
    assert path.steps == () and path.extended == () and path.length_cycles == 0


def _layer_then_two_more(template) -> ReportData:
    """Layer 0 simulated (150 cycles: load 0-10, two GELU halves 10-60 and 60-110 on the
    vector unit, matmul 110-130, sum 130-145, store 145-150, each after the one before)
    and layers 1-2 extended: 300 cycles placed after it, repeating the whole of it."""
    span = ExtendedSpan("blocks", "layer", first_unit=1, units=2, unit_cycles=150,
                        start_cycle=150, cycles=300, window=(0, 150))
    data = _data(template,
                 _step(0, "core0.dma0", "load", "blocks.0.in:load_1", 0, 10),
                 _step(1, "core0.vpu", "unary", "blocks.0.act:gelu_2", 10, 60, (0,)),
                 _step(2, "core0.vpu", "unary", "blocks.0.act:gelu_2", 60, 110),
                 _step(3, "core0.mxu0", "matmul", "blocks.0.proj:addmm_3", 110, 130, (2,)),
                 _step(4, "core0.vpu", "reduce", "blocks.0.norm:sum_4", 130, 145, (3,)),
                 _step(5, "core0.dma1", "store", "blocks.0.out:store_5", 145, 150, (4,)))
    return dataclasses.replace(data, total_cycles=450, extended=(span,))


def test_the_path_through_an_extension_is_its_window_scaled(chain_result):
    path = critical_path(_layer_then_two_more(chain_result))
    (part,) = path.extended
    # the window is all 150 cycles, the extension 300: every (engine, op, source) of the
    # 6 steps doubled (the two GELU halves as one key), 6 * 300 / 150 = 12 commands
    assert dict(part.cycles) == {
        ("core0.dma0", "load", "blocks.0.in:load_1"): 20,
        ("core0.vpu", "unary", "blocks.0.act:gelu_2"): 200,
        ("core0.mxu0", "matmul", "blocks.0.proj:addmm_3"): 40,
        ("core0.vpu", "reduce", "blocks.0.norm:sum_4"): 30,
        ("core0.dma1", "store", "blocks.0.out:store_5"): 10}
    assert part.commands == 12 and path.length_cycles == 450


def test_critical_path_text_through_an_extension(chain_result):
    lines = critical_path_text(_layer_then_two_more(chain_result)).splitlines()
    assert lines[0] == ("Critical path: 6 commands simulated + 2 layers extended, 450 cycles "
                        "(450 ns), by op")
    # the extension's row: its top 4 ops and its engine kinds by cycles (unary 200,
    # matmul 40, reduce 30, load 20; vpu 230, mxu 40, dma 30), ~12 commands, 150-450
    extension = lines[3]
    assert extension.startswith("  blocks.1-2 (2 layers, extended)  ")
    assert extension.split()[4:] == ["unary,matmul,reduce,load", "vpu,mxu,dma", "~12",
                                     "150", "450", "300", "66.7%"]
    assert lines[-2:] == [
        "Across layers: blocks.*.act:gelu 66.7%, blocks.*.proj:addmm 13.3%, "
        "blocks.*.norm:sum 10.0%, blocks.*.in:load 6.7%, blocks.*.out:store 3.3%",
        "Path time by engine kind: vpu 76.7%, mxu 13.3%, dma 10.0%"]


def test_with_nothing_simulated_each_extension_is_one_piece_named_by_its_label(chain_result):
    layers = ExtendedSpan("blocks", "layer", 0, 2, 150, 0, 300, (0, 0))
    panels = ExtendedSpan("mm", "panel", 0, 3, 0, 300, 0, (0, 0))  # adds no cycles
    data = dataclasses.replace(report_data(chain_result), commands=(), total_cycles=300,
                               extended=(layers, panels))
    path = critical_path(data)
    assert path.steps == ()
    assert [dict(p.cycles) for p in path.extended] == [{("", "", layers.label): 300}, {}]
    assert [p.commands for p in path.extended] == [0, 0]
    assert dict(path.cycles_by("op")) == {"<unattributed>": 300}
    assert dict(path.cycles_by("engine")) == {"<unattributed>": 300}
    lines = critical_path_text(data).splitlines()
    assert lines[0] == (
        "Critical path: 0 commands simulated + 2 layers extended + 3 panels extended, "
        "300 cycles (300 ns), by op")
    # no op and no engine to name in the extension's row
    assert lines[3].split()[-7:] == ["-", "-", "~0", "0", "300", "300", "100.0%"]


def test_ops_under_the_fold_threshold_are_folded(chain_result):
    lines = critical_path_text(_two_layers(chain_result), fold_below=0.05).splitlines()
    # under 5% of 200 = 10 cycles: only the unattributed 2-cycle op
    assert lines[6] == "... 1 more ops (under 5.0% each, or past the first 12): 2 cycles (1.0%)"


def test_without_layers_to_merge_there_is_no_across_layers_line(chain_result):
    data = _data(chain_result, _step(0, "core0.vpu", "unary", "act:gelu", 0, 10),
                 _step(1, "core0.vpu", "unary", "norm:sum", 10, 30))
    assert "Across layers" not in critical_path_text(data)


def test_an_extension_ranks_ops_by_all_their_cycles_and_across_layers_shows_six(
        chain_result):
    # one vector unit, one command after another: two GELUs of 12 cycles (layers 0 and
    # 1 of l.a, merged across layers) and six ops of 20 down to 15 cycles; then the
    # whole 129 cycles extended once more
    ops = [("l.0.a:gelu_1", "unary", 12), ("l.1.a:gelu_2", "unary", 12),
           ("b:add", "add", 20), ("c:mul", "mul", 19), ("d:sub", "sub", 18),
           ("e:div", "div", 17), ("f:max", "max", 16), ("g:min", "min", 15)]
    steps, cycle = [], 0
    for i, (source, op, cycles) in enumerate(ops):
        steps.append(_step(i, "core0.vpu", op, source, cycle, cycle + cycles))
        cycle += cycles
    span = ExtendedSpan("l", "layer", 2, 1, 129, 129, 129, (0, 129))
    data = dataclasses.replace(_data(chain_result, *steps), total_cycles=258,
                               extended=(span,))
    lines = critical_path_text(data).splitlines()
    # unary's two keys add up to 24, more than add's 20: it leads the extension's ops
    assert lines[3].split()[4:6] == ["unary,add,mul,sub", "vpu"]
    across = lines[-2].removeprefix("Across layers: ").split(", ")
    assert [entry.rsplit(" ", 1)[0] for entry in across] == [
        "l.*.a:gelu", "b:add", "c:mul", "d:sub", "e:div", "f:max"]  # the top 6 of 7


def test_unattributed_steps_repeated_by_an_extension_stay_one_entry(chain_result):
    span = ExtendedSpan("blocks", "layer", 2, 2, 100, 200, 200, (0, 200))
    data = dataclasses.replace(_two_layers(chain_result), total_cycles=400,
                               extended=(span,))
    across = critical_path_text(data).splitlines()[-2]
    # the 2-cycle unattributed op and its 2 extended cycles: 4 of 400
    assert across.endswith(", <unattributed> 1.0%"), across
