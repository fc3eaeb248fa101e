"""The text summary and the side-by-side comparison."""

from __future__ import annotations

import pytest

from reports.compare import compare_table
from reports.summary import summary


def test_summary_headline(mm_result):
    text = summary(mm_result)
    assert text.splitlines()[0] == "mm_softmax on tiny (2 cores, 1 GHz) - performance-only"
    assert f"{mm_result.total_cycles:,} cycles = {mm_result.total_cycles / 1000:.2f} us" in text
    assert "of 64.0 GFLOP/s peak" in text      # tiny: 2 cores x 4x4 MACs x 2 x 1 GHz
    assert "of 16.0 GB/s" in text               # tiny: one 16 GB/s channel


def test_summary_runs_per_second_below_one_are_not_rounded_to_whole_runs(mm_result):
    # tiny runs at 1 GHz: 1.6e9 cycles = 1.6 s = 0.625 runs/s (it read "1 runs/s");
    # 3.2e9 cycles read "0 runs/s"; 4,000 cycles = 250,000 runs/s stays whole.
    import dataclasses

    from reports.data import report_data

    data = report_data(mm_result)
    for cycles, rate in ((1_600_000_000, "(0.625 runs/s)"), (3_200_000_000, "(0.312 runs/s)"),
                         (4_000, "(250,000 runs/s)")):
        assert rate in summary(dataclasses.replace(data, total_cycles=cycles))


def test_summary_lists_host_work_with_its_time(mm_result):
    text = summary(mm_result)
    assert "Host work: 2 commands, busy 2,468 cycles" in text
    host_lines = [line for line in text.splitlines()
                  if "aten.argmax" in line or "input.copy_" in line]
    assert any("300" in line and "host_op" in line for line in host_lines)
    assert any("2,168" in line and "host_transfer" in line for line in host_lines)


def test_busy_cycles_count_overlapping_commands_once() -> None:
    from reports.data import CommandRecord, busy_cycles

    def command(start: int, end: int) -> CommandRecord:
        return CommandRecord(0, "host", "host_op", "", (), start, end, 0, 0, 0, end - start)

    # [0, 10) and [5, 20) overlap by 5; [30, 40) stands apart; [32, 35) lies inside it
    spans = [command(5, 20), command(0, 10), command(30, 40), command(32, 35)]
    assert busy_cycles(spans) == 20 + 10
    assert busy_cycles([]) == 0


def _host_work_over_the_whole_run(result):
    """The run's report data with each host and host-DMA command spanning the whole
    run (they overlap), and the run's cycles."""
    import dataclasses

    from reports.data import report_data

    data = report_data(result)
    run = data.total_cycles
    host = [dataclasses.replace(c, start=0, end=run) for c in data.commands
            if c.kind in ("host", "hdma")]
    assert len(host) > 1
    others = [c for c in data.commands if c.kind not in ("host", "hdma")]
    return dataclasses.replace(data, commands=tuple(others + host)), run


def test_host_work_share_never_exceeds_the_run(mm_result):
    # A host-DMA transfer beside a host op: their sum (118.5% of a run, a probe's
    # finding) is not what the share is of, their union is.
    data, run = _host_work_over_the_whole_run(mm_result)
    text = summary(data)
    line = next(line for line in text.splitlines() if line.startswith("Host work:"))
    assert f"busy {run:,} cycles (100.0% of the run" in line
    assert f"its commands' cycles sum to {2 * run:,} as some overlap" in line


def test_summary_utilization_grouped_by_core(mm_result):
    text = summary(mm_result)
    core0 = next(line for line in text.splitlines() if line.strip().startswith("core0 "))
    util = mm_result.utilization
    assert f"{100 * util['core0.mxu0']:.1f}%" in core0
    assert "chip   tdma" in text
    assert "sram0" in text and "64.0 KiB" in text


def test_summary_fits_a_terminal_and_stays_compact_on_many_cores(simulate, programs):
    result = simulate(programs.chain(), "atom")
    text = summary(result)
    assert "idle cores: 1-7" in text
    assert "sram*" in text  # eight scratchpads summarized in one row
    assert max(len(line) for line in text.splitlines()) <= 100
    assert len(text.splitlines()) < 30


def test_summary_says_when_there_is_no_host_work(chain_result):
    assert "Host work: none" in summary(chain_result)


def test_compare_table(mm_result, simulate, programs):
    other = simulate(programs.matmul_softmax(), "atom")
    text = compare_table([mm_result, other])
    header, rule, *rows = text.splitlines()
    assert header.split() == ["tiny", "atom"]
    speedup = next(r for r in rows if r.strip().startswith("speedup vs tiny"))
    assert speedup.split()[-2:] == ["1.00x", f"{mm_result.seconds / other.seconds:.2f}x"]
    assert compare_table([mm_result], labels=["base"]).splitlines()[0].split() == ["base"]
    with pytest.raises(ValueError, match="1 labels for 2 results"):
        compare_table([mm_result, other], labels=["x"])


def test_compare_table_keeps_small_speedups_readable(mm_result):
    # Runs 200x and 8x slower than the first: 0.005x (it read 0.01x, edge against
    # atom 0.00x) and 0.125 at two decimals.
    import dataclasses

    from reports.data import report_data

    data = report_data(mm_result)
    slower = [dataclasses.replace(data, total_cycles=data.total_cycles * n) for n in (200, 8)]
    speedup = next(r for r in compare_table([data, *slower], labels=["a", "b", "c"])
                   .splitlines() if r.strip().startswith("speedup vs a"))
    assert speedup.split()[-3:] == ["1.00x", "0.005x", "0.12x"]


def test_summary_states_the_matrix_precision(mm_result):
    from archsim.config import load_config
    from reports.data import matrix_precision

    assert summary(mm_result).splitlines()[1].split() == ["precision", "f32", "arrays"]
    config = load_config("tpu-v3").with_overrides({"core.matrix.f32_precision": "highest"})
    assert matrix_precision(config) == ("bf16 arrays; f32 matmuls at 'highest' precision "
                                        "(6 bf16 passes)")
    assert matrix_precision(load_config("tpu-v3")).endswith("'default' precision (1 bf16 pass)")


def test_compares_host_work_row_counts_overlap_once(mm_result):
    # the compare table's row follows the summary's rule (a plain sum survived there)
    from reports.compare import _host_cycles

    data, run = _host_work_over_the_whole_run(mm_result)
    assert _host_cycles(data) == run
