"""``archsim.estimate``: a model's latency on an NPU from shapes alone (no weights, no
data), through the one pipeline (:func:`archsim.app.run`, performance-only)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archsim.app.pipeline import run
from archsim.app.workload import Workload

if TYPE_CHECKING:
    import torch

    from archsim.config import NpuConfig
    from archsim.result import SimResult


def estimate(model: torch.nn.Module, example_inputs: Any, config: str | Path | NpuConfig = "atom",
             *, kwargs: Mapping[str, Any] | None = None, options: Any = None,
             all_layers: bool = False) -> SimResult:
    """Simulate one call ``model(*example_inputs, **kwargs)`` performance-only on
    ``config`` (preset name, YAML path or ``NpuConfig``) and return its ``SimResult``.

    ``example_inputs`` is a tensor or a tuple of tensors (any device, or ``meta``); only
    their shapes and dtypes matter. On ``meta`` the model is mirrored there too (no
    weight is copied; the caller's model is not touched); otherwise it is exported as
    it is (``torch.export`` traces with fake tensors). The model runs as it is
    (``train()`` / ``eval()`` mode included). ``options`` are
    ``compiler.CompileOptions``.

    A stack of at least four identical layers (``model.layers`` of a transformer) is
    simulated in part: its first three layers are compiled and simulated and the result
    is extended to the whole stack, each other layer adding what the middle ones added
    (``result.layers`` says so; :mod:`archsim.repeated`) — unless the model does work
    of its own between its layers, which a partial run would leave out.
    Likewise a matmul ending the program that would take more than
    ``compiler.kernels.matmul_panels.PARTIAL_COMMANDS`` commands (a 16384^3 GEMM) is
    compiled and simulated in its first panels of output tiles and extended to the
    rest (``result.tiles``) when ``options`` are not given.
    ``all_layers=True`` simulates every layer and every tile.
    """
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"estimate expects an nn.Module, got {type(model).__name__}")
    return run(Workload.of_module(model, example_inputs, kwargs), config, mode="performance",
               all_layers=all_layers, options=options)


__all__ = ["estimate"]
