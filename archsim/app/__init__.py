"""The application layer: the one pipeline that runs a workload on a config.

Every front door (``archsim run``/``compare``/``sweep``/``validate``/``llm``,
``archsim.estimate``, :mod:`serving`) builds a :class:`Workload` and calls :func:`run`:

    >>> from archsim.app import Workload, run
    >>> result = run(Workload.builtin("gpt2", layers=2, seq=64), "atom")
    >>> result = run(Workload.of_module(model, inputs), "tpu-v4", mode="performance")

Modules: :mod:`~archsim.app.workload` (what to run), :mod:`~archsim.app.catalog` (the
models archsim builds by name), :mod:`~archsim.app.pipeline` (export -> compile ->
simulate -> extend -> numerics check, :mod:`~archsim.app.numerics`), :mod:`~archsim.app.progress` (what a front door
is told), :mod:`~archsim.app.estimator`, :mod:`~archsim.app.validate`.
Kept light: names resolve on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MODES", "SILENT", "StderrProgress", "Workload", "estimate", "run"]

_HOMES = {"MODES": "pipeline", "run": "pipeline", "Workload": "workload",
          "SILENT": "progress", "StderrProgress": "progress", "estimate": "estimator"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'archsim.app' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"archsim.app.{home}"), name)
    globals()[name] = value
    return value
