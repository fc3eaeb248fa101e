"""``archsim sweep`` and :func:`archsim.sweep.sweep`: the grid, per-point errors, the
backends (serial, local process pool, Ray), the table, CSV/JSON/plot, pinned messages."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from archsim.cli.main import main
from archsim.errors import ArchsimError
from archsim.sweep import BACKENDS, SweepPoint, grid_points, point_label, sweep
from compiler.ir.ops import Program
from compiler.ir.text import save_program
from reports.data import ReportData
from reports.sweep import by_latency, pareto_points, sweep_table, sweep_to_json

DMA_BW = "core.dma.bandwidth_bytes_per_cycle"
CHANNELS = "dram.channels"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def usage_error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


GEMM = ("sweep", "gemm", "--config", "tiny", "--seq", "64")


def cycles_of_run(capsys, *overrides: str) -> int:
    sets = [arg for item in overrides for arg in ("--set", item)]
    code, out, _ = run_cli(capsys, "run", "gemm", "--config", "tiny", "--seq", "64",
                           "--perf-only", "-q", *sets)
    assert code == 0
    return int(re.search(r": (\d+) cycles", out).group(1))


def without_wall_time(points: tuple[SweepPoint, ...]) -> list[SweepPoint]:
    return [dataclasses.replace(p, wall_seconds=0.0) for p in points]


# ---------------------------------------------------------------- the grid


class TestGrid:
    def test_cartesian_product_first_axis_slowest(self) -> None:
        assert grid_points({"a": [1, 2], "b": ["x", "y", "z"]}) == [
            {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 1, "b": "z"},
            {"a": 2, "b": "x"}, {"a": 2, "b": "y"}, {"a": 2, "b": "z"},
        ]
        assert grid_points({}) == [{}]

    def test_axis_without_values(self) -> None:
        with pytest.raises(ArchsimError, match=r"^grid axis 'dram.channels' has no values$"):
            grid_points({CHANNELS: []})
        with pytest.raises(ArchsimError, match=r"^grid axis 'dram.channels': expected a dotted "
                                               r"path and a list of values, got '8'$"):
            grid_points({CHANNELS: "8"})

    def test_labels_use_the_last_path_part_unless_ambiguous(self) -> None:
        assert point_label({"core.matrix.rows": 64, CHANNELS: 8}) == "rows=64 channels=8"
        assert point_label({"a.size": 1, "b.size": 2}) == "a.size=1 b.size=2"


class TestGridArgument:
    def test_bad_syntax_names_the_argument(self, capsys) -> None:
        for bad in ("core.matrix.rows", "=64,128", "core.matrix.rows=", "core.matrix.rows=64,,128"):
            assert usage_error(capsys, "sweep", "gemm", "--grid", bad) == (
                f"archsim sweep: error: argument --grid/-g: expected PATH=V1,V2,... "
                f"(e.g. core.matrix.rows=64,128,256), got {bad!r}")

    def test_grid_is_required(self, capsys) -> None:
        code, out, err = run_cli(capsys, "sweep", "gemm")
        assert (code, out) == (2, "")
        assert err == ("archsim sweep: error: give at least one --grid PATH=V1,V2,... or "
                       "--dvfs HZ:V,...\n")

    def test_axis_given_twice(self, capsys) -> None:
        code, out, err = run_cli(capsys, "sweep", "gemm", "--grid", f"{CHANNELS}=1",
                                 "--grid", f"{CHANNELS}=2")
        assert (code, out) == (2, "")
        assert err == (f"archsim sweep: error: argument --grid: {CHANNELS} is given twice; "
                       f"list all its values in one --grid\n")

    def test_swept_and_fixed(self, capsys) -> None:
        code, out, err = run_cli(capsys, "sweep", "gemm", "--grid", f"{CHANNELS}=1,2",
                                 "--set", f"{CHANNELS}=4")
        assert (code, out) == (2, "")
        assert err == (f"archsim sweep: error: argument --set: {CHANNELS} is also swept by "
                       f"--grid; drop one\n")


# ---------------------------------------------------------------- the API, serially


class TestSweepProgram:
    """A scheduled program: no compile, so every point is quick and hand-derivable."""

    def test_cycles_by_hand(self, exp8: Program) -> None:
        points = sweep(exp8, "tiny", {DMA_BW: [16, 32], CHANNELS: [1, 2]}, backend="serial")
        # tiny: load = 10 DMA setup + 20 DRAM + 5 NoC + 256 B at min(DMA cap, DRAM)
        # where DRAM moves 16 B/cycle per channel (64 B interleave: 256 B use both);
        # exp = 2 + 16 * 4; store like load. 16 B/cycle: 51 + 66 + 51 = 168; only
        # 32 B/cycle DMA over 2 channels halves the transfers: 43 + 66 + 43 = 152.
        assert [(p.overrides, p.status, p.report.total_cycles) for p in points] == [
            ({DMA_BW: 16, CHANNELS: 1}, "ok", 168),
            ({DMA_BW: 16, CHANNELS: 2}, "ok", 168),
            ({DMA_BW: 32, CHANNELS: 1}, "ok", 168),
            ({DMA_BW: 32, CHANNELS: 2}, "ok", 152),
        ]
        assert points[3].report.dram_bytes == 512  # 8x8 f32 in and out

    def test_fixed_overrides_apply_to_every_point(self, exp8: Program) -> None:
        points = sweep(exp8, "tiny", {DMA_BW: [32]}, overrides={CHANNELS: 2},
                       backend="serial")
        assert [p.report.total_cycles for p in points] == [152]
        assert points[0].overrides == {DMA_BW: 32}

    def test_invalid_point_is_reported_and_others_run(self, exp8: Program) -> None:
        points = sweep(exp8, "tiny", {CHANNELS: [1, "many", 0]}, backend="serial")
        assert [(p.status, p.error) for p in points] == [
            ("ok", ""),
            ("invalid config", "dram.channels: expected an integer, got 'many'"),
            ("invalid config", "dram.channels: must be > 0, got 0"),
        ]
        assert points[0].report.total_cycles == 168
        assert points[1].report is None

    def test_unknown_field_is_refused_before_any_point_runs(self, exp8: Program) -> None:
        # was an 'invalid config' row per point: no point can be valid
        from archsim.errors import ConfigError

        seen: list[SweepPoint] = []
        with pytest.raises(ConfigError) as info:
            sweep(exp8, "tiny", {CHANNELS: [1, 2], "dram.chanels": [2]}, backend="serial",
                  on_point=lambda p, done, total: seen.append(p))
        assert info.value.source == "overrides for 'tiny'" and not seen
        (problem,) = info.value.problems
        assert problem.startswith("dram.chanels: no field 'chanels' under dram (fields: ")

    def test_clocks_in_exponent_form_are_integers(self, exp8: Program) -> None:
        # --grid clock_hz=1e9,2e9 reads each value as YAML: strings, which were an
        # 'invalid config' row each ('expected an integer, got '1e9'')
        from archsim.cli.sweep import grid_axis

        path, values = grid_axis("clock_hz=1e9,2e9,1.2e9")
        points = sweep(exp8, "tiny", {path: values}, backend="serial")
        assert [p.status for p in points] == ["ok", "ok", "ok"]
        assert points[0].report.total_cycles == sweep(exp8, "tiny", {path: [10 ** 9]},
                                                      backend="serial")[0].report.total_cycles

    def test_malformed_dvfs_point_is_refused_before_any_point_runs(self,
                                                                   exp8: Program) -> None:
        from archsim.errors import ConfigError

        with pytest.raises(ConfigError, match=r"dvfs: '1e9' is not CLOCK_HZ:VOLTAGE_V"):
            sweep(exp8, "tiny", {"dvfs": ["1e9:0.8", "1e9"]}, backend="serial")

    def test_argument_errors(self, exp8: Program) -> None:
        with pytest.raises(ArchsimError, match=r"^unknown sweep backend 'threads'; choose one "
                                               r"of serial, process, ray$"):
            sweep(exp8, "tiny", {CHANNELS: [1]}, backend="threads")
        with pytest.raises(ArchsimError, match=r"^workers must be >= 1, got 0$"):
            sweep(exp8, "tiny", {CHANNELS: [1]}, workers=0)
        with pytest.raises(ArchsimError, match=r"^dram.channels: both swept and fixed; drop "
                                               r"one$"):
            sweep(exp8, "tiny", {CHANNELS: [1]}, overrides={CHANNELS: 2})

    def test_on_point_sees_every_point(self, exp8: Program) -> None:
        seen: list[tuple[int, int, int]] = []
        sweep(exp8, "tiny", {CHANNELS: [1, 2]}, backend="serial",
              on_point=lambda p, done, total: seen.append((p.index, done, total)))
        assert seen == [(0, 1, 2), (1, 2, 2)]


class TestProcessPool:
    # First in the file: the pool's server process (one per test session) then preloads
    # torch, which the other pool tests do not need but do not mind.
    def test_model_points_equal_archsim_run(self, capsys) -> None:
        code, out, _ = run_cli(capsys, *GEMM, "--grid", "core.matrix.rows=4,8", "--workers",
                               "2", "-q")
        assert code == 0
        latencies = {line.split()[0]: int(line.split()[1].replace(",", ""))
                     for line in out.splitlines()[2:4]}
        assert latencies == {"8": cycles_of_run(capsys, "core.matrix.rows=8"),
                             "4": cycles_of_run(capsys, "core.matrix.rows=4")}

    def test_pool_gives_the_serial_points(self, exp8: Program) -> None:
        grid = {DMA_BW: [16, 32], CHANNELS: [1, 2, "x"]}
        serial = sweep(exp8, "tiny", grid, backend="serial")
        pooled = sweep(exp8, "tiny", grid, backend="process", workers=2)
        assert without_wall_time(pooled) == without_wall_time(serial)
        assert [p.status for p in pooled].count("invalid config") == 2

    def test_script_without_main_guard(self, tmp_path: Path, exp8: Program) -> None:
        save_program(exp8, tmp_path / "exp8.rbln")
        script = tmp_path / "no_guard.py"
        script.write_text("from archsim.sweep import sweep\n"
                          "from compiler.ir.text import load_program\n"
                          f"sweep(load_program({str(tmp_path / 'exp8.rbln')!r}), 'tiny', "
                          "{'dram.channels': [1, 2]}, workers=2)\n")
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path)
        assert done.returncode == 1
        # the traceback's last line, though multiprocessing's resource tracker may warn
        # about the dead workers' semaphores after it
        assert ("archsim.errors.ArchsimError: a sweep worker process died: out of memory, or "
                "a script calls sweep() outside 'if __name__ == \"__main__\":' (workers "
                "import the main script)") in done.stderr.splitlines()

    def test_process_is_the_default_backend(self) -> None:
        assert list(BACKENDS) == ["serial", "process", "ray"]
        assert sweep.__kwdefaults__["backend"] == "process"


# ---------------------------------------------------------------- Ray


class TestRay:
    def test_missing_ray_is_a_clear_error(self, monkeypatch, exp8: Program, capsys) -> None:
        monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
        message = "the ray backend needs Ray: pip install ray (or pip install 'archsim[ray]')"
        with pytest.raises(ArchsimError) as info:
            sweep(exp8, "tiny", {CHANNELS: [1]}, backend="ray")
        assert str(info.value) == message
        code, out, err = run_cli(capsys, "sweep", "gemm", "--config", "tiny", "--ray",
                                 "--grid", f"{CHANNELS}=1", "-q")
        assert (code, out, err) == (1, "", f"archsim: error: {message}\n")

    def test_ray_gives_the_serial_points(self, exp8: Program, tmp_path_factory) -> None:
        import ray  # in the test extra: the Ray backend is tested for real

        grid = {CHANNELS: [1, 2, "x"], DMA_BW: [32]}
        # Connected beforehand (here: to keep Ray's files in the test's temp dir), the
        # sweep uses that Ray as it is.
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _temp_dir=str(tmp_path_factory.mktemp("ray")))
        try:
            pooled = sweep(exp8, "tiny", grid, backend="ray")
        finally:
            ray.shutdown()
        assert without_wall_time(pooled) == without_wall_time(
            sweep(exp8, "tiny", grid, backend="serial"))
        assert [p.report.total_cycles if p.report else None for p in pooled] == [168, 152, None]


# ---------------------------------------------------------------- reports


def fake_point(index: int, rows: int, cycles: int | None, peak_flops: float) -> SweepPoint:
    report = None if cycles is None else ReportData(
        program_name="p", config_name="tiny", clock_hz=1_000_000_000, cores=1,
        total_cycles=cycles, functional=False, peak_flops=peak_flops, vector_peak_flops=1.0,
        dram_bandwidth_bytes_per_s=16e9, host_link_bandwidth_bytes_per_s=4e9,
        matmul_flops=1000, flops=1000, dram_bytes_read=1600, dram_bytes_written=0,
        host_link_bytes=0, engines=(), sram_peak_bytes={"sram0": 2048, "shared": 1 << 20},
        sram_capacity_bytes={"sram0": 65536}, commands=())
    status, error = ("ok", "") if report else ("does not fit", "too big")
    return SweepPoint(index, {"core.matrix.rows": rows}, status, error, report)


class TestSweepReports:
    points = (fake_point(0, 4, 400, 1e12), fake_point(1, 8, 300, 2e12),
              fake_point(2, 16, 350, 4e12), fake_point(3, 32, None, 8e12),
              fake_point(4, 64, 100, 16e12))

    def test_pareto_and_latency_order(self) -> None:
        # (TFLOP/s, cycles): (1, 400) (2, 300) (4, 350) (16, 100): 4 is beaten by 2.
        assert pareto_points(self.points) == {0, 1, 4}
        assert pareto_points(self.points, cost="cores") == {4}
        assert [p.index for p in by_latency(self.points)] == [4, 1, 2, 0, 3]

    def test_latency_order_is_in_time_when_clocks_differ(self) -> None:
        # A DVFS sweep: 300 cycles at 0.5 GHz (600 ns) is slower than 400 at 1 GHz
        # (400 ns); the rows were sorted by cycles.
        import dataclasses

        slow_clock = fake_point(0, 4, 300, 1e12)
        slow_clock = dataclasses.replace(
            slow_clock, report=dataclasses.replace(slow_clock.report, clock_hz=500_000_000))
        points = (slow_clock, fake_point(1, 8, 400, 1e12))
        assert [p.index for p in by_latency(points)] == [1, 0]
        assert pareto_points(points) == {1}

    def test_table(self) -> None:
        lines = sweep_table(self.points).splitlines()
        assert lines[0].split() == ["rows", "latency", "(cycles)", "latency", "matrix", "util",
                                    "DRAM", "BW", "util", "peak", "FLOP/s", "SRAM",
                                    "peak/core", "pareto", "status"]
        # 1000 FLOP in 100 ns at 16 TFLOP/s: 62.5%; 1600 B in 100 ns at 16 GB/s: 100%
        assert lines[2].split() == ["64", "100", "100", "ns", "0.1%", "100.0%", "16.0",
                                    "TFLOP/s", "2.00", "KiB", "*", "ok"]
        assert lines[5].split()[-3:] == ["KiB", "*", "ok"]  # rows=4: cheapest
        assert lines[4].split()[-2:] == ["KiB", "ok"]  # rows=16: dominated
        assert lines[6].split() == ["32", "-", "-", "-", "-", "-", "-", "does", "not",
                                    "fit:", "too", "big"]
        assert lines[7] == ("  pareto: * = no other point is both as cheap (peak matrix "
                            "TFLOP/s) and faster")

    def test_unknown_cost(self) -> None:
        with pytest.raises(ValueError, match=r"^unknown cost 'volume'; choose one of "
                                             r"peak_flops, sram_bytes, dram_bandwidth, cores, "
                                             r"energy, power, area, edp$"):
            pareto_points(self.points, cost="volume")

    def test_the_cli_offers_every_cost_and_no_other(self) -> None:
        from archsim.cli.sweep import COSTS
        from reports.figures import COST_METRICS

        assert COSTS == tuple(COST_METRICS)

    def test_json(self) -> None:
        document = sweep_to_json(self.points, meta={"model": "gemm"})
        assert document["format"] == "archsim.sweep"
        assert document["model"] == "gemm"
        assert document["cost_label"] == "peak matrix TFLOP/s"
        first, failed = document["points"][0], document["points"][3]
        assert first == {"index": 0, "overrides": {"core.matrix.rows": 4}, "status": "ok",
                         "error": "", "pareto": True,
                         "metrics": {"latency_cycles": 400, "latency_us": 0.4,
                                     "matrix_utilization": 1000 / 400e-9 / 1e12,
                                     "dram_bandwidth_utilization": 1600 / 400e-9 / 16e9,
                                     "peak_flops": 1e12, "sram_peak_bytes": 2048,
                                     "cost": 1.0}}
        assert failed["metrics"] is None and failed["error"] == "too big"
        json.dumps(document)


# ---------------------------------------------------------------- the command on a model

class TestSweepCommand:
    @pytest.mark.parametrize("flags, problem", [
        (("--grid", "core.matrix.rowz=1,2"), "core.matrix.rowz: no field 'rowz' under "
                                             "core.matrix (fields: "),
        (("--grid", "core.matrix.rows=4,8", "--dvfs", "1e9"),
         "dvfs: '1e9' is not CLOCK_HZ:VOLTAGE_V (e.g. 1.2e9:0.85)"),
    ])
    def test_a_misspelled_axis_is_the_error_set_gives(self, capsys, flags, problem) -> None:
        code, out, err = run_cli(capsys, *GEMM, *flags, "--workers", "1")
        assert code == 1 and out == ""  # no table of invalid points
        assert err.splitlines()[1].startswith(f"  - {problem}")
        if "rowz" in problem:  # word for word what --set says
            assert main(["run", "gemm", "-c", "tiny", "--set", "core.matrix.rowz=1"]) == 1
            assert capsys.readouterr().err == err

    def test_table_matches_archsim_run(self, capsys, tmp_path: Path) -> None:
        code, out, err = run_cli(capsys, *GEMM, "--grid", "core.matrix.rows=4,8,abc",
                                 "--grid", f"{CHANNELS}=2", "--set", "core.dma.engines=2",
                                 "--workers", "1", "--out", str(tmp_path))
        assert code == 0
        assert "[3/3] rows=abc channels=2: invalid config" in err
        lines = out.splitlines()
        rows = [line.split() for line in lines[2:5]]
        assert [r[:2] for r in rows] == [["8", "2"], ["4", "2"], ["abc", "2"]]  # by latency
        # 2 cores x one 8x4 array x 2 FLOP x 1 GHz = 64 GFLOP/s per core, 128 in all
        assert rows[0][7:9] == ["128", "GFLOP/s"]
        assert rows[0][-2:] == ["*", "ok"] and rows[1][-2:] == ["*", "ok"]
        assert lines[4].endswith("invalid config: core.matrix.rows: expected an integer, "
                                 "got 'abc'")
        cycles = int(rows[0][2].replace(",", ""))
        assert cycles == cycles_of_run(capsys, "core.matrix.rows=8", f"{CHANNELS}=2",
                                       "core.dma.engines=2")
        # a 64x64x64 matmul is 2 * 64^3 FLOP: the utilization column is derived from it
        assert rows[0][5] == f"{100 * 2 * 64 ** 3 / (cycles * 1e-9) / 128e9:.1f}%"

        with open(tmp_path / "sweep.csv", newline="") as f:
            table = list(csv.DictReader(f))
        assert [r["core.matrix.rows"] for r in table] == ["8", "4", "abc"]
        assert int(table[0]["latency_cycles"]) == cycles and table[0]["pareto"] == "1"
        assert table[2]["status"] == "invalid config" and table[2]["latency_cycles"] == ""
        document = json.loads((tmp_path / "sweep.json").read_text())
        assert document["grid"] == {"core.matrix.rows": [4, 8, "abc"], CHANNELS: [2]}
        assert document["fixed_overrides"] == {"core.dma.engines": 2}
        assert document["points"][1]["metrics"]["latency_cycles"] == cycles
        assert (tmp_path / "pareto.png").stat().st_size > 10_000
        assert out.endswith(f"wrote {tmp_path}/: sweep.csv, sweep.json, pareto.png, "
                            f"pareto_energy.png, pareto_area.png\n")

    def test_point_that_does_not_fit(self, capsys) -> None:
        code, out, _ = run_cli(capsys, *GEMM, "--grid", "core.scratchpad.size_bytes=1024",
                               "--workers", "1", "-q")
        assert code == 1  # no point ran
        assert out.splitlines()[2].endswith(
            "does not fit: matmul 64x64x64 (f32): no tiling fits 1024 B of scratchpad even "
            "at 4x4 tiles")

    def test_help_says_performance_only(self, capsys) -> None:
        with pytest.raises(SystemExit):
            main(["sweep", "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "Sweeps are performance-only by default" in text
        assert "--ray" in text and "--workers" in text
