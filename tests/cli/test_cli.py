"""The archsim command line: every subcommand, and bad arguments with pinned messages."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from archsim.cli.main import main
from compiler.ir.text import save_program


@pytest.fixture
def program_file(tmp_path: Path, exp8) -> Path:
    path = tmp_path / "exp8.rbln"
    save_program(exp8, path)
    return path


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """gemm --seq 16 saved from tiny and from tpu-v4 (target=tiny, target=tpu-v4)."""
    paths = {}
    for preset in ("tiny", "tpu-v4"):
        paths[preset] = tmp_path_factory.mktemp(preset) / "gemm.rbln"
        assert main(["run", "gemm", "--seq", "16", "-c", preset, "-q",
                     "--save-program", str(paths[preset])]) == 0
    return paths


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


class TestConfigs:
    def test_lists_every_preset_with_peaks(self, capsys) -> None:
        code, out, _ = run_cli(capsys, "configs")
        assert code == 0
        assert "atom (default)" in out
        assert "61.60" in out  # tpu-v3 peak TFLOP/s
        assert "torus3d 6x 50 GB/s" in out  # tpu-v4 chip-to-chip links
        for name in ("tpu-v4", "ascend-910b", "edge", "tiny"):
            assert name in out


class TestShow:
    def test_prints_and_verifies(self, capsys, program_file: Path) -> None:
        code, out, _ = run_cli(capsys, "show", str(program_file), "--config", "tiny")
        assert code == 0
        assert out.startswith("program exp8")
        assert "# 3 commands on 2 engines, 2 DRAM tensors; valid for tiny" in out

    def test_invalid_program_is_reported(self, capsys, program_file: Path) -> None:
        text = program_file.read_text().replace("core0.vpu", "core9.vpu")
        program_file.write_text(text)
        code, _, err = run_cli(capsys, "show", str(program_file), "--config", "tiny")
        assert code == 1
        assert "archsim: error: program 'exp8' is invalid" in err
        assert "unknown engine 'core9.vpu'" in err

    def test_missing_file_is_one_line(self, capsys, tmp_path: Path) -> None:
        code, out, err = run_cli(capsys, "show", str(tmp_path / "nope.rbln"))
        assert code == 1 and out == ""
        assert err == f"archsim: error: no such program file: {tmp_path / 'nope.rbln'} " \
                      "(expected a saved .rbln program)\n"

    def test_program_target_is_the_default_config(self, capsys, program_file: Path) -> None:
        text = program_file.read_text().splitlines()
        text[0] = text[0].split(" target=")[0] + " target=tiny"
        program_file.write_text("\n".join(text) + "\n")
        code, out, _ = run_cli(capsys, "show", str(program_file))
        assert code == 0
        assert "valid for tiny" in out and "valid for atom" not in out


class TestRun:
    def test_rbln_program_report(self, capsys, program_file: Path) -> None:
        code, out, _ = run_cli(capsys, "run", str(program_file), "--config", "tiny")
        assert code == 0
        # load 51 + exp 2 + 16*4 + store 51 (hand-derived in tests/archsim/test_timing.py)
        assert "168 cycles" in out
        assert "Critical path" in out
        assert "aten.exp" in out

    def test_quiet_prints_one_line(self, capsys, program_file: Path) -> None:
        code, out, err = run_cli(capsys, "run", str(program_file), "--config", "tiny", "-q")
        assert code == 0
        assert out.strip().startswith("exp8 on tiny: 168 cycles")
        assert len(out.strip().splitlines()) == 1
        assert err == ""

    def test_out_dir_and_json_then_report(self, capsys, tmp_path: Path,
                                          program_file: Path) -> None:
        out_dir = tmp_path / "out"
        code, _, _ = run_cli(capsys, "run", str(program_file), "--config", "tiny", "-q",
                             "--out", str(out_dir), "--json", str(tmp_path / "r.json"))
        assert code == 0
        for name in ("summary.txt", "trace.json", "result.json", "report.html"):
            assert (out_dir / name).is_file(), name
        assert list(out_dir.glob("*.png"))
        trace = json.loads((out_dir / "trace.json").read_text())
        assert sum(1 for e in trace["traceEvents"] if e.get("ph") == "X") == 3
        code, out, _ = run_cli(capsys, "report", str(tmp_path / "r.json"))
        assert code == 0
        assert "168 cycles" in out

    def test_report_renders_what_run_printed(self, capsys, tmp_path: Path,
                                             program_file: Path) -> None:
        # `report` is "re-render the report of a saved result.json": the same summary,
        # op table and critical path as the run (the critical path was left out).
        code, printed, _ = run_cli(capsys, "run", str(program_file), "--config", "tiny",
                                   "--json", str(tmp_path / "r.json"))
        assert code == 0 and "Critical path" in printed
        code, rendered, _ = run_cli(capsys, "report", str(tmp_path / "r.json"))
        assert code == 0
        assert rendered == printed

    def test_save_program_round_trips_through_show_and_run(self, capsys,
                                                           tmp_path: Path) -> None:
        # README's `archsim show prog.rbln` / `archsim run prog.rbln` need a program
        # file, which no command wrote.
        path = tmp_path / "gemm.rbln"
        code, first, err = run_cli(capsys, "run", "gemm", "--seq", "16", "-c", "tiny", "-q",
                                   "--save-program", str(path))
        assert code == 0 and f"wrote {path}" in err
        code, shown, _ = run_cli(capsys, "show", str(path), "-c", "tiny")
        assert code == 0 and shown.startswith('program "gemm s16 f32" target=tiny')
        code, again, _ = run_cli(capsys, "run", str(path), "-c", "tiny", "-q")
        assert code == 0
        cycles = first.split(": ")[1].split(",")[0]  # "... on tiny: N cycles, ..."
        assert cycles.endswith(" cycles") and again.split(": ")[1].startswith(cycles + ",")

    def test_a_program_saved_from_an_extended_run_says_it_holds_the_simulated_part(
            self, capsys, tmp_path: Path) -> None:
        # 4 layers: 3 simulated, the 4th extended; the program has the 3 only, and its
        # re-run took them for the whole run (a new-user probe: 295,090 cycles under a
        # header claiming 4 layers)
        path = tmp_path / "g4.rbln"
        code, _, err = run_cli(capsys, "run", "gpt2", "--layers", "4", "--seq", "8", "-q",
                               "-c", "tiny", "--save-program", str(path))
        assert code == 0
        assert f"wrote {path} (the simulated part only: 3 of 4 simulated, 1 extended at " \
            in err
        code, again, _ = run_cli(capsys, "run", str(path), "-c", "tiny", "-q")
        assert code == 0 and "[saved (the simulated part only: 3 of 4 simulated" in again

    def test_a_saved_program_runs_on_its_target_by_default(self, capsys, saved) -> None:
        # was atom, silently (22,144 cycles for a tiny program of 10,555); a tpu-v4
        # program failed with 44 problems
        for preset, path in saved.items():
            code, on_target, _ = run_cli(capsys, "run", str(path), "-c", preset, "-q")
            assert code == 0
            code, default, err = run_cli(capsys, "run", str(path), "-q")
            assert (code, err) == (0, "")
            assert default == on_target and f" on {preset}: " in default
        code, _, err = run_cli(capsys, "run", str(saved["tiny"]))
        assert code == 0
        assert err.startswith(f"{saved['tiny']}: on tiny, the preset it was compiled for "
                              f"(--config to choose another)\n")

    def test_show_verifies_on_the_target_by_default(self, capsys, saved) -> None:
        code, out, _ = run_cli(capsys, "show", str(saved["tpu-v4"]))
        assert code == 0 and out.rstrip().endswith("valid for tpu-v4")
        with pytest.raises(SystemExit):
            main(["show", "--help"])
        assert "default: a .rbln program's target" in " ".join(capsys.readouterr().out.split())

    @pytest.mark.parametrize("command", ["run", "show"])
    def test_another_preset_is_one_line_naming_the_target(self, capsys, saved,
                                                          command: str) -> None:
        quiet = ["-q"] if command == "run" else []  # no progress lines
        code, _, err = run_cli(capsys, command, str(saved["tpu-v4"]), "-c", "atom", *quiet)
        assert code == 1
        assert re.fullmatch(r"archsim: error: program 'gemm s16 f32' is invalid on atom "
                            r"\(\d+ problems; first: command \d+ .*\); it was compiled for "
                            r"tpu-v4: run it without --config to use that preset, or "
                            r"recompile the model for atom\n", err), err

    def test_a_program_broken_on_its_own_target_lists_every_problem(
            self, capsys, saved, tmp_path: Path) -> None:
        # a review's finding: every verify failure had been cut to its first problem
        broken = tmp_path / "broken.rbln"
        broken.write_text(saved["tiny"].read_text().replace("core1.dma0", "core7.dma0"))
        code, _, err = run_cli(capsys, "show", str(broken))
        problems = [line for line in err.splitlines() if line.startswith("  - command ")]
        assert code == 1 and len(problems) > 1
        assert all("unknown engine 'core7.dma0'" in line for line in problems)

    def test_a_program_saved_from_a_changed_preset_is_not_announced_as_it(
            self, capsys, tmp_path: Path) -> None:
        # a review's finding: saved with --set, its target read plain 'tiny', and a
        # re-run said 'on tiny, the preset it was compiled for' over another machine
        path = tmp_path / "p8.rbln"
        changes = ["--set", "core.matrix.rows=8", "--set", "core.matrix.cols=8"]
        code, out, _ = run_cli(capsys, "run", "gemm", "--seq", "64", "-c", "tiny", *changes,
                               "--save-program", str(path), "-q")
        assert code == 0 and path.read_text().splitlines()[0].endswith(
            'target="tiny (changed)"')
        code, _, err = run_cli(capsys, "run", str(path))
        assert err.splitlines()[0] == (f"{path}: compiled for tiny (changed), not a preset as "
                                      f"it is; on atom (give --config and --set as when it "
                                      f"was saved)")
        code, again, _ = run_cli(capsys, "run", str(path), "-c", "tiny", *changes, "-q")
        assert code == 0 and again == out

    def test_a_sweep_starts_from_the_programs_own_preset(self, capsys, saved) -> None:
        code, out, _ = run_cli(capsys, "sweep", str(saved["tiny"]), "-g",
                               "dram.channels=1,2", "-q")
        assert code == 0 and out.count(" ok") == 2

    def test_overrides_the_program_does_not_fit_are_one_line(self, capsys, saved) -> None:
        # was 280 lines, one per command
        code, _, err = run_cli(capsys, "run", str(saved["tiny"]), "-c", "tiny", "--set",
                               "core.scratchpad.size_bytes=512", "-q")
        assert code == 1 and len(err.splitlines()) == 1
        assert err.startswith("archsim: error: program 'gemm s16 f32' is invalid on tiny (")
        assert err.endswith("; it was compiled for tiny as the preset is: run it without "
                            "the changes (--set) or recompile the model with them\n")

    def test_overrides_change_the_machine(self, capsys, program_file: Path) -> None:
        code, out, _ = run_cli(capsys, "run", str(program_file), "--config", "tiny", "-q",
                               "--set", "core.vector.lanes=8")
        assert code == 0
        # exp now takes 2 + 8*4 = 34 cycles instead of 66
        assert "136 cycles" in out

    def test_builtin_model_runs_functionally(self, capsys) -> None:
        code, out, err = run_cli(capsys, "run", "gemm", "--seq", "32", "--config", "tiny")
        assert code == 0
        assert "functional run" in err
        error = re.search(r"numerics: max \|npu - torch cpu\| = (\S+) over 1 output", err)
        assert error, err
        assert float(error.group(1)) < 1e-4  # f32 GEMM of size 32 from the schedule itself
        assert "functional" in out


class TestLargeGemm:
    def test_simulates_its_first_tile_panels(self, capsys) -> None:
        """16384^3 (2 GiB of f32 inputs: performance-only, f16): 3 of 64 panels of 8
        output tiles simulated; simulating all 394,240 commands gives the same cycles
        (BENCHMARKS.md, Compiler)."""
        code, out, err = run_cli(capsys, "run", "gemm", "--seq", "16384")
        assert code == 0
        assert "simulating 18480 commands (performance-only)" in err
        assert ("  tiles           3 of 64 panels of mm simulated, 61 extended at 4,523,940 "
                "cycles each\n") in out
        assert "latency         289,572,956 cycles" in out

    def test_one_op_workload_has_the_exported_graphs_cycles(self, capsys) -> None:
        import torch

        import archsim
        from archsim.app.models import Gemm

        code, out, _ = run_cli(capsys, "run", "gemm", "--seq", "512", "--perf-only", "-q")
        assert code == 0
        a = torch.empty(512, 512, dtype=torch.float16, device="meta")
        exported = archsim.estimate(Gemm(), (a, a), "atom")
        assert f": {exported.total_cycles} cycles" in out


class TestCompare:
    def test_side_by_side(self, capsys, program_file: Path) -> None:
        code, out, _ = run_cli(capsys, "compare", str(program_file),
                               "--config", "tiny", "--config", "atom")
        assert code == 0
        header = out.splitlines()[0].split()
        assert header == ["tiny", "atom"] and "speedup vs tiny" in out

    def test_quiet_prints_the_summary_line_of_each_config(self, capsys, tmp_path: Path,
                                                          program_file: Path) -> None:
        # --help: 'print only the summary line'; it printed the whole table
        code, out, err = run_cli(capsys, "compare", str(program_file), "-q", "--config",
                                 "tiny", "--config", "atom", "--out", str(tmp_path))
        assert code == 0 and err == ""
        tiny, atom = out.splitlines()
        assert tiny.startswith("exp8 on tiny: 168 cycles, ")
        assert atom.startswith("exp8 on atom: ")
        assert (tmp_path / "pareto.png").is_file()


class TestWorkloads:
    def test_lists_builtins(self, capsys) -> None:
        code, out, _ = run_cli(capsys, "workloads")
        assert code == 0
        for name in ("gpt2", "bert-base", "llama-7b", "resnet-18", "resnet-50", "gemm", "conv",
                     "attention"):
            assert name in out


class TestBadArguments:
    def test_unknown_preset_lists_presets(self, capsys, program_file: Path) -> None:
        code, _, err = run_cli(capsys, "run", str(program_file), "--config", "tpu-v9")
        assert code == 1
        assert err.strip() == ("archsim: error: tpu-v9: 1 problem:\n  - unknown preset "
                               "'tpu-v9'; presets: atom, ascend-910b, ascend-910b4, edge, "
                               "tiny, tpu-v3, tpu-v4")

    def test_bad_override_path_names_the_fields(self, capsys, program_file: Path) -> None:
        code, _, err = run_cli(capsys, "run", str(program_file), "--set", "core.matrx.rows=8")
        assert code == 1
        assert ("core.matrx.rows: no field 'matrx' under core (fields: dma, matrix, "
                "scratchpad, vector)") in err

    def test_bad_override_value_names_the_allowed_values(self, capsys,
                                                         program_file: Path) -> None:
        code, _, err = run_cli(capsys, "run", str(program_file), "--set",
                               "core.matrix.dataflow=xs")
        assert code == 1
        assert "core.matrix.dataflow: 'xs' is not one of ws, os, is" in err

    def test_override_without_equals(self, capsys, program_file: Path) -> None:
        code, _, err = run_cli(capsys, "run", str(program_file), "--set", "core.matrix.rows")
        assert code == 1
        assert "--set 'core.matrix.rows': expected PATH=VALUE, e.g. core.matrix.rows=256" in err

    def test_unknown_model(self, capsys) -> None:
        code, _, err = run_cli(capsys, "run", "gpt5")
        assert code == 1
        assert err.startswith("archsim: error: unknown model 'gpt5': give a built-in workload "
                              "(gpt2, bert-base, ")

    def test_missing_files(self, capsys, tmp_path: Path) -> None:
        code, _, err = run_cli(capsys, "run", str(tmp_path / "nope.rbln"))
        assert (code, err.strip()) == (1, f"archsim: error: no such program file: "
                                          f"{tmp_path / 'nope.rbln'}")
        code, _, err = run_cli(capsys, "report", str(tmp_path / "nope.json"))
        assert (code, err.strip()) == (1, f"archsim: error: no such result file: "
                                          f"{tmp_path / 'nope.json'}")

    def test_parse_error_names_line_and_column(self, capsys, tmp_path: Path) -> None:
        bad = tmp_path / "bad.rbln"
        bad.write_text("program p\n0: core0.dma0 load %x[0:8] sram0[0x0] f32[8]\n")
        code, _, err = run_cli(capsys, "run", str(bad), "--config", "tiny")
        assert code == 1
        assert f"{bad}:2:" in err

    def test_usage_errors_exit_2(self, capsys) -> None:
        with pytest.raises(SystemExit) as info:
            main(["run"])
        assert info.value.code == 2
        assert "the following arguments are required: MODEL" in capsys.readouterr().err


def test_third_party_warnings_no_user_can_act_on_are_quiet(caplog) -> None:
    # torchao (imported by transformers) warns through these loggers that its CUDA and
    # mxfp8 extensions fail to load on a CPU-only machine; their errors still reach
    import logging

    from archsim.cli.main import main as cli_main

    assert cli_main(["configs"]) == 0
    for name in ("torchao", "torch.utils._pytree"):
        logger = logging.getLogger(name)
        logger.warning("Failed to load _C_mxfp8.so")
        logger.error("a real failure")
    assert [(r.name, r.levelno) for r in caplog.records] == [
        ("torchao", logging.ERROR), ("torch.utils._pytree", logging.ERROR)]
