"""The ``archsim`` command line.

    archsim run MODEL [--config atom] [--set core.matrix.rows=256] [--out DIR]
    archsim compare MODEL --config atom --config tpu-v3
    archsim configs
    archsim show PROGRAM.rbln
    archsim report RESULT.json

MODEL is a built-in or sized workload (``archsim workloads``), a Python file defining a
model and example inputs, a saved ``.rbln`` program or a transformers ``config.json``:
an :class:`archsim.app.Workload`, run through :func:`archsim.app.run`. The CLI is the top
layer: it parses arguments and prints, and imports the compiler and torch lazily, only
for the commands that need them.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence

from archsim.cli.main import main

__all__ = ["console", "main"]


def console(argv: Sequence[str] | None = None) -> int:
    """The ``archsim`` console script: :func:`main`, then the process's objects are left
    to the exit (``gc.freeze``): Python's collections at shutdown would otherwise walk
    every object of the compiled program and of torch, about 1 s of the main job."""
    try:
        return main(argv, exiting=True)
    finally:
        gc.freeze()


if __name__ == "__main__":
    sys.exit(console())
