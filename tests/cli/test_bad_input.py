"""Bad input on the command line gets one line, ``archsim: error: ...`` (or argparse's
``archsim run: error: ...``), a non-zero exit and no traceback."""

from __future__ import annotations

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
