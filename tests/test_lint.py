"""ruff with the curated rule set of pyproject.toml ([tool.ruff.lint]) over every
package, the tests, benchmarks and examples: a new unused import, undefined name or
mutable default fails the suite."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("archsim", "compiler", "torch_bridge", "reports", "serving", "tests",
           "benchmarks", "examples")


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "ruff"] if shutil.which("ruff") is None else ["ruff"]
    return subprocess.run([*command, "check", "--output-format", "concise", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_finds_nothing() -> None:
    result = _ruff(*CHECKED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_would_catch_an_unused_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f(x=[]):\n    return undefined\n")
    result = _ruff("--config", str(ROOT / "pyproject.toml"), str(bad))
    assert result.returncode == 1
    assert {"F401", "B006", "F821"} <= {line.split()[1] for line in result.stdout.splitlines()
                                        if line.startswith(str(bad))}
