"""The ``archsim`` command line.

    archsim run MODEL [--config atom] [--set core.matrix.rows=256] [--out DIR]
    archsim compare MODEL --config atom --config tpu-v3
    archsim configs
    archsim show PROGRAM.rbln
    archsim report RESULT.json

MODEL is a built-in workload (``archsim workloads``), a Python file defining a model
and example inputs, or a saved ``.rbln`` program. This is the application layer: it
imports the compiler and torch lazily, only for the commands that need them.
"""

from __future__ import annotations

import sys

from archsim.cli.main import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
