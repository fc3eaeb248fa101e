"""Runs the adapted torch_openreg cases (``cases/``) in a child interpreter.

A case that kills the interpreter (a segfault in torch's C++) is recorded as
``CRASHED`` under its own name and the run resumes without it, so one crash neither
hides the other results nor takes pytest down. ``python openreg_suite.py [ROOT]``
prints the counts for the archsim checkout at ROOT (default: this one), which is how
the pass rate before and after a change is measured.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

CASES = Path(__file__).parent / "cases"
ROOT = Path(__file__).resolve().parents[3]
MAX_CRASHES = 20
_RESULT = re.compile(r"^(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")
_STARTED = re.compile(r"^(\S+::\S+) ?$")


def run(root: Path = ROOT, cases: Path = CASES, timeout_s: float = 600.0) -> dict[str, str]:
    """Outcome of every case (``PASSED``, ``FAILED``, ``SKIPPED``, ``ERROR``,
    ``CRASHED``) by pytest node id, with ``root``'s packages imported first."""
    path = os.pathsep.join([str(root), str(Path(__file__).parent),
                            os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}  # unbuffered: a
    results: dict[str, str] = {}                          # crash loses no printed line
    deselected: list[str] = []
    for _ in range(MAX_CRASHES):
        env[_DESELECT_VAR] = "\n".join(deselected)
        cmd = [sys.executable, "-m", "pytest", str(cases), f"--rootdir={cases}", "-vv",
               "-p", "no:cacheprovider", "-p", "openreg_suite",
               "-o", "python_files=openreg_*.py", "-W", "ignore"]
        # from the cases' folder, the node ids printed are the items' own
        proc = subprocess.run(cmd, cwd=cases, env=env, capture_output=True, text=True,
                              timeout=timeout_s)
        started = None
        for line in proc.stdout.splitlines():
            if match := _RESULT.match(line):
                results[match[1]] = match[2]
            elif match := _STARTED.match(line):
                started = match[1]
        crashed = proc.returncode < 0 or proc.returncode > 5
        if not crashed:
            return results
        if started is None or started in results:
            raise RuntimeError(f"the case run died (exit {proc.returncode}) outside a test: "
                               f"{proc.stderr.strip()[-300:]}")
        results[started] = "CRASHED"
        deselected.append(started)
    return results


_DESELECT_VAR = "ARCHSIM_OPENREG_DESELECT"


def pytest_collection_modifyitems(config: object, items: list) -> None:
    """As a pytest plugin in the child: drop the cases that crashed, by exact node id
    (``--deselect`` drops every id it prefixes: ``test_x`` would take ``test_x_y``)."""
    crashed = set(filter(None, os.environ.get(_DESELECT_VAR, "").split("\n")))
    items[:] = [item for item in items if item.nodeid not in crashed]


def summary(results: dict[str, str]) -> str:
    counts = Counter(results.values())
    runnable = len(results) - counts["SKIPPED"]
    rate = counts["PASSED"] / runnable if runnable else 0.0
    return (f"{runnable} runnable, {counts['PASSED']} passed ({rate:.1%}), "
            f"{counts['FAILED'] + counts['ERROR']} failed, {counts['CRASHED']} crashed, "
            f"{counts['SKIPPED']} skipped")


if __name__ == "__main__":
    outcome = run(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT)
    for node, result in sorted(outcome.items()):
        if result not in ("PASSED", "SKIPPED"):
            print(result, node)
    print(summary(outcome))
