"""The npu device against PyTorch's reference backend tests (torch_openreg), adapted in
``cases/`` and run in a child interpreter by :mod:`openreg_suite` (a crash fails the
case that crashed, by name). One test per case file."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from openreg_suite import CASES, run

CASE_FILES = sorted(p.name for p in CASES.glob("openreg_*.py"))


@pytest.fixture(scope="module")
def results() -> dict[str, str]:
    return run()


@pytest.mark.parametrize("case_file", CASE_FILES)
def test_openreg_cases(results: dict[str, str], case_file: str) -> None:
    mine = {node.split("::", 1)[1]: outcome for node, outcome in results.items()
            if Path(node.split("::", 1)[0]).name == case_file}
    assert mine, f"no case of {case_file} ran"
    bad = {name: outcome for name, outcome in mine.items()
           if outcome not in ("PASSED", "SKIPPED")}
    assert not bad, f"{case_file}: " + ", ".join(f"{n} {o}" for n, o in sorted(bad.items()))


def test_a_crash_is_reported_by_name_and_the_rest_still_run(tmp_path: Path) -> None:
    (tmp_path / "openreg_crash.py").write_text(textwrap.dedent("""
        import os

        def test_before():
            pass

        def test_dies():
            os.abort()

        def test_after():
            pass
    """))
    outcome = {node.split("::")[1]: result for node, result in run(cases=tmp_path).items()}
    assert outcome == {"test_before": "PASSED", "test_dies": "CRASHED", "test_after": "PASSED"}
