"""Every ```python block in README.md runs as written.

A block whose fence says ``python needs-file`` uses files the reader has (a model
file) and is skipped explicitly; ``python saved-program`` reads the program the README's
``archsim run gemm --seq 64 -c tiny --save-program prog.rbln`` saves, made first;
shell blocks have no language.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from archsim.cli.main import main

README = Path(__file__).resolve().parents[2] / "README.md"
FENCE = re.compile(r"^```(python[^\n]*)\n(.*?)^```", re.S | re.M)
TEXT = README.read_text()
# each block padded so its line numbers are README's: inspect.getsource (Triton's
# @triton.jit reads its kernel's source) finds the right lines
BLOCKS = [(m.group(1).split()[1:], "\n" * TEXT.count("\n", 0, m.start(2)) + m.group(2))
          for m in FENCE.finditer(TEXT)]


def test_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("markers,code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_block_runs(markers: list[str], code: str, tmp_path: Path,
                    monkeypatch: pytest.MonkeyPatch) -> None:
    if "needs-file" in markers:
        pytest.skip("block reads files the reader provides (marked needs-file)")
    monkeypatch.chdir(tmp_path)
    if "saved-program" in markers:  # the program the README's shell commands save
        assert main(["run", "gemm", "--seq", "64", "-c", "tiny", "--save-program",
                     "prog.rbln", "--quiet"]) == 0
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
