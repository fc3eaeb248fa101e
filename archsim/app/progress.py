"""How the pipeline reports what it is doing: steps with their time, and notes.

The pipeline never prints. A front door passes a :class:`Progress`: the CLI's prints
one line per step on stderr (silent with ``--quiet``), a library call gets
:data:`SILENT`.
"""

from __future__ import annotations

import sys
import time
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Protocol


class Progress(Protocol):
    """What the pipeline calls: ``with progress.step("compiling"): ...`` around each
    step, ``progress.note(text)`` for a fact the user should see (what mode a model runs
    in, a converted dtype, the numerics check)."""

    def step(self, text: str) -> AbstractContextManager[object]: ...

    def note(self, text: str) -> None: ...


class Silent:
    """A progress that shows nothing (library calls, sweep points)."""

    def step(self, text: str) -> AbstractContextManager[object]:
        return _Step(text, None)

    def note(self, text: str) -> None:
        pass


SILENT = Silent()


class StderrProgress:
    """One line per step on stderr with its time, and each note on a line of its own;
    nothing when ``quiet``."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet

    def step(self, text: str) -> AbstractContextManager[object]:
        return _Step(text, None if self.quiet else sys.stderr)

    def note(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr)


class _Step(AbstractContextManager["_Step"]):
    def __init__(self, text: str, stream: object) -> None:
        self.text = text
        self.stream = stream

    def __enter__(self) -> _Step:
        self.start = time.perf_counter()
        if self.stream is not None:
            print(f"{self.text} ...", end="", file=self.stream, flush=True)  # type: ignore[arg-type]
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.stream is not None:
            outcome = "failed" if kind else f"{time.perf_counter() - self.start:.2f} s"
            print(f" {outcome}", file=self.stream, flush=True)  # type: ignore[arg-type]


__all__ = ["SILENT", "Progress", "Silent", "StderrProgress"]
