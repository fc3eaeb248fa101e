"""Bad input on the command line gets one line, ``archsim: error: ...`` (or argparse's
``archsim run: error: ...``), a non-zero exit and no traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from archsim.cli.main import main


def _error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) if argv[0] == "argparse" else _nothing():
        code = main(list(argv[1:] if argv[0] == "argparse" else argv))
        assert code != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_program_that_is_not_utf8(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.rbln"
    path.write_bytes(b"program p\n\xff\xfe")
    err = _error(capsys, "show", str(path))
    assert err.strip() == f"archsim: error: {path}:2:1: not UTF-8 text (byte 0xff); a .rbln " \
                          f"program is UTF-8"


def test_a_result_that_is_not_json(tmp_path: Path, capsys) -> None:
    path = tmp_path / "result.json"
    path.write_bytes(b"\xff\xfe not json")
    err = _error(capsys, "report", str(path))
    assert err.startswith(f"archsim: error: {path}: not an archsim result.json (")


def test_out_pointing_at_a_file(tmp_path: Path, capsys) -> None:
    path = tmp_path / "a_file"
    path.write_text("x")
    err = _error(capsys, "run", "gemm", "--seq", "16", "-c", "tiny", "-q", "--out", str(path))
    assert err.strip() == f"archsim: error: --out {path}: is a file; give a directory " \
                          f"(created if missing)"


def test_set_with_a_value_that_is_not_yaml(capsys) -> None:
    err = _error(capsys, "run", "gemm", "--seq", "16", "-c", "tiny",
                 "--set", "core.matrix.rows=[1,")
    assert "--set 'core.matrix.rows=[1,': the value is not valid YAML" in err


@pytest.mark.parametrize("flag", ["--seq", "--batch", "--layers"])
def test_non_positive_sizes(flag: str, capsys) -> None:
    err = _error(capsys, "argparse", "run", "gemm", flag, "-5")
    assert f"argument {flag}: expected a positive integer, got -5" in err


@pytest.mark.parametrize("command", ["run", "report"])
def test_top_must_be_positive(command: str, capsys) -> None:
    # --top -1 listed every op but the last (a Python slice), --top 0 none.
    err = _error(capsys, "argparse", command, "x.json", "--top", "-1")
    assert "argument --top: expected a positive integer, got -1" in err


@pytest.mark.parametrize("flag, value", [
    ("--micro-batches", "0"),  # was taken as "not given" and served
    ("--batch", "-1"),  # was "batch must be >= 1, got -1; micro-batches must be ..."
    ("--pp", "0"),  # was also blamed on the micro-batches nobody gave
    ("--chips", "0"),  # was "--chips 0 is not --tp 1 x --pp 1 = 1"
    ("--tp", "0"), ("--prefill", "0")])
def test_llm_counts_must_be_positive(flag: str, value: str, capsys) -> None:
    err = _error(capsys, "argparse", "llm", "llama-2-7b", flag, value)
    assert err.splitlines()[-1] == (f"archsim llm: error: argument {flag}: expected a "
                                    f"positive integer, got {value}")


@pytest.mark.parametrize("flags, message", [
    # it said "--chips 4 is not --tp 1 x --pp 3 = 3", blaming a --tp nobody gave
    (("--chips", "4", "--pp", "3"), "--chips 4 is not a multiple of --pp 3"),
    (("--chips", "6", "--tp", "4"), "--chips 6 is not a multiple of --tp 4"),
    (("--chips", "8", "--tp", "2", "--pp", "2"), "--chips 8 is not --tp 2 x --pp 2 = 4"),
    # on one stage it was taken and the batch split into slower steps (TPOT 11.4 -> 23.3 ms)
    (("--micro-batches", "2"), "--micro-batches 2 needs --pp > 1 (they overlap pipeline "
     "stages; on one stage they only split the batch into slower steps)")])
def test_llm_chips_that_do_not_split(flags: tuple[str, ...], message: str, capsys) -> None:
    err = _error(capsys, "llm", "llama-2-7b", *flags)
    assert err.strip() == f"archsim: error: {message}"


def test_json_into_a_missing_directory_is_refused_before_simulating(tmp_path: Path,
                                                                    capsys) -> None:
    target = tmp_path / "missing" / "result.json"
    err = _error(capsys, "argparse", "run", "gemm", "--seq", "16", "--json", str(target))
    assert f"argument --json: {target}: directory '{target.parent}' does not exist" in err
    assert "simulating" not in err


def test_json_naming_a_directory(tmp_path: Path, capsys) -> None:
    err = _error(capsys, "argparse", "llm", "llama-2-7b", "--json", str(tmp_path))
    assert f"argument --json: {tmp_path}: is a directory; give a file name" in err


def test_a_model_file_with_a_syntax_error_names_file_and_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "model.py"
    path.write_text("import torch\nmodel = (\n")
    err = _error(capsys, "run", str(path))
    assert err.strip() == f"archsim: error: {path}:2: not valid Python: '(' was never closed"


def test_a_model_file_that_is_not_utf8(tmp_path: Path, capsys) -> None:
    path = tmp_path / "model.py"
    path.write_bytes(b"x = '\xff\xfe'\n")
    err = _error(capsys, "run", str(path))
    assert err.startswith(f"archsim: error: {path}:1: not valid Python: (unicode error) "
                          f"'utf-8' codec can't decode byte 0xff")


def test_a_model_file_that_raises_names_file_line_and_exception(tmp_path: Path,
                                                                 capsys) -> None:
    # was a 37-line traceback through runpy and archsim.app.workload
    path = tmp_path / "model.py"
    path.write_text("import torch\nraise ValueError('boom')\n")
    err = _error(capsys, "run", str(path))
    assert err.strip() == (f"archsim: error: {path}:2: ValueError: boom (raised while "
                           f"loading the model file)")


def test_get_inputs_that_raises_names_its_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "model.py"
    path.write_text("import torch\n"
                    "def get_model():\n"
                    "    return torch.nn.Linear(4, 4)\n"
                    "def get_inputs():\n"
                    "    return (1 / 0,)\n")
    err = _error(capsys, "run", str(path))
    assert err.strip() == (f"archsim: error: {path}:5: ZeroDivisionError: division by zero "
                           f"(raised by get_inputs())")


def test_a_model_that_branches_on_its_data_is_one_line(tmp_path: Path, capsys) -> None:
    """Longformer's forward asks whether any token attends globally (``.item()`` in an
    ``if``): torch.export cannot trace that, and the error names the line."""
    path = tmp_path / "branchy.py"
    path.write_text("import torch\n"
                    "class Branchy(torch.nn.Module):\n"
                    "    def forward(self, x):\n"
                    "        if (x > 0).any().item():\n"
                    "            return x * 2\n"
                    "        return x\n"
                    "model = Branchy()\n"
                    "example_inputs = (torch.randn(3),)\n")
    err = _error(capsys, "run", str(path), "--config", "tiny")
    assert re.search(r"archsim: error: torch\.export cannot trace Branchy into one graph: its "
                     r"forward pass branches on a tensor's values at \S*branchy\.py:4 in "
                     r"forward \(data-dependent control flow\)", err), err


def test_a_sweep_over_10000_points_is_refused(capsys) -> None:
    cols = ",".join(str(v) for v in range(1, 41))
    err = _error(capsys, "sweep", "gemm", "--grid", "core.matrix.rows=" + cols,
                 "--grid", "core.matrix.cols=" + cols, "--grid", "cores=1,2,4,8,16,32,64")
    assert err.strip() == ("archsim: error: the grid has 11,200 points (40 core.matrix.rows x "
                           "40 core.matrix.cols x 7 cores), more than 10,000; sweep fewer "
                           "values per axis, or split the sweep into several runs")


def test_a_sweep_writing_into_a_file_is_refused_before_running(tmp_path: Path, capsys) -> None:
    path = tmp_path / "a_file"
    path.write_text("x")
    err = _error(capsys, "sweep", "gemm", "-c", "tiny", "--grid", "cores=1,2", "--out",
                 str(path))
    assert err.strip() == f"archsim: error: --out {path}: is a file; give a directory " \
                          f"(created if missing)"
    assert "[1/2]" not in err


def test_a_gemm_too_large_to_compile_is_refused_early(monkeypatch, capsys) -> None:
    """gemm --seq 100000 once grew to 23 GB of host memory: its inputs now make it
    performance-only (> 1 GiB) and the compiler refuses a plan past the command cap
    before building it (here a 16384^3 GEMM, 2 GiB of f32 inputs, against a cap of 1,000
    commands; with --all-layers, as a performance-only run compiles such a GEMM's first
    panels of tiles only; `tiny`'s DRAM raised to 4 GiB, or its 1 GiB would refuse the
    inputs first)."""
    monkeypatch.setenv("ARCHSIM_MAX_COMMANDS", "1000")
    err = _error(capsys, "run", "gemm", "--seq", "16384", "-c", "tiny", "--all-layers",
                 "--set", f"dram.capacity_bytes={4 << 30}")
    assert "performance-only (shapes only; --perf-only, > 30M parameters or > 1 GiB" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("archsim: error: program ") and \
        "needs more than 1,000 commands (at mm: " in last and \
        last.endswith("raise the cap with ARCHSIM_MAX_COMMANDS")
    # refused for the whole plan before it was built, not one command past the cap
    planned = int(re.search(r"at mm: ([\d,]+) more", last).group(1).replace(",", ""))
    assert planned > 1000


def test_llm_trace_into_a_missing_directory_is_refused_before_serving(tmp_path: Path,
                                                                       capsys) -> None:
    target = tmp_path / "missing" / "trace.json"
    err = _error(capsys, "argparse", "llm", "llama-2-7b", "--trace", str(target))
    assert f"argument --trace: {target}: directory '{target.parent}' does not exist" in err


def test_run_of_a_json_that_is_no_transformers_config(tmp_path: Path, capsys) -> None:
    # An archsim result.json given to `run` was read as a transformers config, and
    # transformers' error listed its ~900 model types in the one line.
    result = tmp_path / "result.json"
    result.write_text('{"format": "archsim.report", "version": 1}')
    err = _error(capsys, "run", str(result))
    assert err.strip() == (f"archsim: error: {result}: not a transformers config.json: it has "
                           f"no 'model_type'; it is an archsim result: re-render it with "
                           f"'archsim report {result}'")
    unknown = tmp_path / "foo.json"
    unknown.write_text('{"model_type": "foo"}')
    err = _error(capsys, "run", str(unknown))
    assert err.strip() == (f"archsim: error: {unknown}: transformers cannot read this config "
                           f"(Unrecognized model identifier: foo.)")


def test_a_transformers_model_without_transformers_says_which_extra(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # import raises ImportError
    err = _error(capsys, "run", "llama-2-7b", "--layers", "1", "--seq", "8")
    assert err == ("archsim: error: a transformers config needs transformers: pip install "
                   "-e '.[hf]' (archsim's hf extra) or pip install transformers\n")


_SMALL_LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                "num_hidden_layers": 1, "intermediate_size": 128, "vocab_size": 100}


@pytest.mark.parametrize("command", ["run", "llm"])
@pytest.mark.parametrize("change, message", [
    # run: torch's RuntimeError 'Trying to create tensor with negative dimension -64'
    ({"hidden_size": -64}, "hidden_size is -64: expected an integer >= 1"),
    # run: huggingface_hub's StrictDataclassClassValidationError; llm printed numbers
    ({"num_attention_heads": 5}, "hidden_size 64 is not a multiple of num_attention_heads 5"),
    # llm: 'config has no num_hidden_layers or n_layer'; run simulated no layers
    ({"num_hidden_layers": 0}, "num_hidden_layers is 0: expected an integer >= 1"),
    # both: silently 4 x hidden_size
    ({"intermediate_size": 0}, "intermediate_size is 0: expected an integer >= 1"),
    ({"vocab_size": 1.5, "n_head": True},
     "n_head is True: expected an integer >= 1; vocab_size is 1.5: expected an integer >= 1"),
])
def test_a_transformers_config_with_impossible_sizes_is_one_line(
        tmp_path: Path, capsys, command: str, change: dict, message: str) -> None:
    import json

    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({**_SMALL_LLAMA, **change}))
    err = _error(capsys, command, str(path))
    assert err.strip() == f"archsim: error: cfg: {message}"


def test_a_config_transformers_validates_is_one_line(tmp_path: Path, capsys) -> None:
    # hidden 64 over 5 heads of an explicit head_dim: archsim's blocks take it, but
    # transformers' Llama refuses it (was StrictDataclassClassValidationError's traceback)
    import json

    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({**_SMALL_LLAMA, "num_attention_heads": 5, "head_dim": 16}))
    err = _error(capsys, "run", str(path))
    assert err.strip() == (f"archsim: error: {path}: transformers cannot read this config "
                           f"(The hidden size (64) is not a multiple of the number of "
                           f"attention heads (5).)")


@pytest.mark.parametrize("argv, flag", [
    # serve: FileExistsError from mkdir after the whole simulation
    (["serve", "SMALL", "-c", "tiny", "--requests", "2", "--prompt-tokens", "8",
      "--output-tokens", "2", "--figures"], "--figures"),
    # run and compare: refused only after simulating
    (["run", "gemm", "--seq", "16", "-c", "tiny", "--out"], "--out"),
    (["compare", "gemm", "--seq", "16", "-c", "tiny", "-c", "edge", "--out"], "--out"),
])
def test_an_output_directory_that_is_a_file_is_refused_before_simulating(
        tmp_path: Path, capsys, argv: list[str], flag: str) -> None:
    import json

    small = tmp_path / "small.json"
    small.write_text(json.dumps({**_SMALL_LLAMA, "max_position_embeddings": 256}))
    path = tmp_path / "a_file"
    path.write_text("x")
    err = _error(capsys, *[str(small) if a == "SMALL" else a for a in argv], str(path))
    # one line: no progress ('exporting with torch.export ...') before it
    assert err == f"archsim: error: {flag} {path}: is a file; give a directory (created " \
                  f"if missing)\n"


def test_compare_refuses_a_bad_config_before_simulating_any(capsys) -> None:
    # `-c tiny -c nope` simulated tiny (its progress and numerics printed) first.
    err = _error(capsys, "compare", "gemm", "--seq", "16", "-c", "tiny", "-c", "nope")
    assert err.startswith("archsim: error: nope: 1 problem:\n  - unknown preset 'nope'; "
                          "presets: atom")
    assert "exporting" not in err and "numerics" not in err


@pytest.fixture(scope="module")
def saved_result(tmp_path_factory) -> dict:
    import json

    path = tmp_path_factory.mktemp("result") / "result.json"
    assert main(["run", "gemm", "--seq", "16", "-c", "tiny", "-q", "--json", str(path)]) == 0
    return json.loads(path.read_text())


@pytest.mark.parametrize("where, value, message", [
    # was: TypeError: unsupported operand type(s) for /: 'str' and 'int' (reports/data.py)
    (("run", "total_cycles"), "x", "run.total_cycles is 'x': expected an integer"),
    (("run", "clock_hz"), 0, "run.clock_hz is 0: expected > 0"),
    (("run", "functional"), 1, "run.functional is 1: expected true or false"),
    (("engines", "names"), "core0.vpu", "engines.names is 'core0.vpu': expected a list of "
                                        "strings"),
    (("sram", "peak_bytes"), {"sram0": "1k"}, "sram.peak_bytes is {'sram0': '1k'}: expected "
                                              "an object of integers"),
    (("trace", "deps"), [["0"]], "trace.deps[0] is ['0']: expected a list of integers"),
    (("energy", "energy_j"), None, "energy.energy_j is None: expected a number"),
    (("trace", "start"), None, "trace.start is None: expected a list"),
])
def test_a_malformed_result_is_one_line_naming_the_field(
        tmp_path: Path, capsys, saved_result: dict, where: tuple[str, str], value,
        message: str) -> None:
    import copy
    import json

    data = copy.deepcopy(saved_result)
    section, field = where
    data[section][field] = value
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data))
    err = _error(capsys, "report", str(path))
    assert err == f"archsim: error: {path}: not an archsim result.json ({message})\n"


def test_a_result_whose_timeline_was_edited_is_one_line(tmp_path: Path, capsys,
                                                         saved_result: dict) -> None:
    import copy
    import json

    data = copy.deepcopy(saved_result)
    trace = data["trace"]
    for i, op in enumerate(trace["op"]):  # each store starts a cycle after its matmul ends
        if op == "store":
            for dep in trace["deps"][i]:
                trace["end"][trace["id"].index(dep)] -= 1
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data))
    err = _error(capsys, "report", str(path))
    assert err.startswith(f"archsim: error: {path}: not a consistent archsim result (command ")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    # torch raised IndexError on each (wpe has 1024 rows); the run reported cycles
    (["gpt2", "--seq", "1500", "--layers", "1"],
     "gpt2: 1500 tokens exceed its 1024 positions; give --seq 1024 or fewer"),
    (["bert-base", "--seq", "600"],
     "bert-base: 600 tokens exceed its 512 positions; give --seq 512 or fewer"),
])
def test_a_seq_past_a_built_in_models_positions(argv: list[str], message: str,
                                                 capsys) -> None:
    from archsim.app.workload import Workload
    from archsim.errors import SequenceTooLongError

    err = _error(capsys, "run", *argv, "-q")
    assert err == f"archsim: error: {message}\n"
    with pytest.raises(SequenceTooLongError):
        Workload.parse(argv[0], seq=int(argv[2]))
    assert Workload.parse(argv[0], seq=int(message.split()[-3])).seq  # exactly: fine


@pytest.mark.parametrize("seq, message", [
    (["--seq", "100"], "g2: 100 tokens exceed its 64 positions; give --seq 64 or fewer"),
    ([], "g2: 128 tokens exceed its 64 positions; give --seq 64 or fewer"),  # the default
])
def test_a_seq_past_a_transformers_configs_positions(tmp_path: Path, capsys, seq: list[str],
                                                      message: str) -> None:
    # GPT-2's n_positions (transformers' max_position_embeddings), the check archsim llm
    # makes of its prompt and generated tokens
    import json

    path = tmp_path / "g2.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 1,
                                "n_head": 4, "vocab_size": 500, "n_positions": 64,
                                "bos_token_id": 0, "eos_token_id": 0}))
    err = _error(capsys, "run", str(path), *seq, "-q")
    assert err == f"archsim: error: {message}\n"


def test_a_rotary_config_stating_no_limit_runs_past_its_class_default(tmp_path: Path,
                                                                     capsys) -> None:
    # a review's finding: Llama's class default (2048) refused --seq 4096 for a config
    # that states no limit, which ran before (a rotary model computes any position)
    import json

    path = tmp_path / "nomax.json"
    path.write_text(json.dumps(_SMALL_LLAMA))
    assert main(["run", str(path), "--seq", "2100", "-q"]) == 0
    assert "2100" not in capsys.readouterr().err


_WRONG_FEATURES = ("import torch\nmodel = torch.nn.Linear(4, 4)\n"
                   "example_inputs = (torch.randn(2, 5),)\n")
_WRONG_FEATURES_ERROR = ("archsim: error: torch.export cannot trace Linear into one graph: "
                         "RuntimeError: a and b must have same reduction dim, but got "
                         "[2, 5] X [4, 4].")


def test_an_export_error_is_one_line_on_stderr(tmp_path: Path) -> None:
    # torch's fake tensors logged ~220 lines (the failing op's traceback) before the
    # one-line ExportError; a subprocess, as torch's log handler writes to the real stderr
    import os
    import subprocess
    import sys

    path = tmp_path / "m4.py"
    path.write_text(_WRONG_FEATURES)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", "import sys; from archsim.cli import "
                           "console; sys.exit(console())", "run", str(path), "-q"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr == _WRONG_FEATURES_ERROR + "\n"


def test_export_silences_torchs_fake_tensor_log_and_restores_it() -> None:
    # archsim.estimate logged the same; a handler on the logger itself, as torch's
    # loggers do not propagate to the root (caplog's)
    import logging

    import torch

    import archsim
    from archsim.errors import ExportError

    class Records(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.DEBUG)
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    logger, records = logging.getLogger("torch._subclasses.fake_tensor"), Records()
    before = logger.level
    logger.addHandler(records)
    try:
        with pytest.raises(ExportError):
            archsim.estimate(torch.nn.Linear(4, 4), torch.randn(2, 5), "tiny")
        assert logger.level == before  # restored
    finally:
        logger.removeHandler(records)
    assert records.records == []
