"""archsim: a cycle-approximate NPU simulator.

Kept light: ``import archsim`` loads nothing heavy; names resolve on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Simulator", "SimResult", "estimate", "load_config"]


def __getattr__(name: str) -> Any:
    if name == "Simulator":
        from archsim.simulator import Simulator
        return Simulator
    if name == "SimResult":
        from archsim.result import SimResult
        return SimResult
    if name == "estimate":
        from archsim.app.estimator import estimate
        globals()["estimate"] = estimate
        return estimate
    if name == "load_config":
        from archsim.config import load_config
        return load_config
    raise AttributeError(f"module 'archsim' has no attribute {name!r}")
