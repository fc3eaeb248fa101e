"""Shared helpers: compile one aten op, run it functionally, compare with torch."""

from __future__ import annotations

from typing import Any

import torch

from archsim.agreement import array_config
from archsim.config import load_config
from compiler import compile_op
from compiler.compile import CompiledProgram

_CONFIGS: dict[str, Any] = {}

ARRAY = array_config(128, 128, "ws").with_overrides({
    "core.dma.bandwidth_bytes_per_cycle": 4096, "dram.channel_bandwidth_gb_per_s": 4096.0,
    "noc.link_bandwidth_bytes_per_cycle": 4096,
    "core.scratchpad.port_bandwidth_bytes_per_cycle": 8192, "core.vector.lanes": 128})
"""One 128x128 weight-stationary array, one weight buffer, memory that does not bound
(benchmarks/conv_mapping.py's configuration)."""


def config(preset):
    """The preset of that name (loaded once), or ``preset`` itself when it is a config."""
    if not isinstance(preset, str):
        return preset
    if preset not in _CONFIGS:
        _CONFIGS[preset] = load_config(preset)
    return _CONFIGS[preset]


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    if dtype in (torch.bfloat16, torch.float16):
        return {"rtol": 2e-2, "atol": 2e-2}
    return {"rtol": 1e-4, "atol": 1e-4}


def check_op(op: Any, args: tuple[Any, ...], preset: str, kwargs: dict | None = None,
             tol: dict[str, float] | None = None) -> tuple[CompiledProgram, Any]:
    """Compile ``op`` for ``preset``, simulate functionally (verified), compare to torch."""
    kwargs = kwargs or {}
    compiled = compile_op(op, args, kwargs, config(preset))
    tensors = [a for a in _flat(args) + _flat(list(kwargs.values()))
               if isinstance(a, torch.Tensor)]
    outs, result = compiled.run(*tensors)
    want = op(*args, **kwargs)
    wants = [want] if isinstance(want, torch.Tensor) else [w for w in want
                                                           if isinstance(w, torch.Tensor)]
    for got, expected in zip(outs, wants):
        if expected.dtype == torch.bool or not expected.dtype.is_floating_point:
            assert torch.equal(got, expected), f"{op}: {got} != {expected}"
            continue
        torch.testing.assert_close(got, expected, **(tol or tolerance(expected.dtype)))
    return compiled, result


def _flat(items: Any) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if isinstance(x, (list, tuple)):
            out += _flat(x)
        else:
            out.append(x)
    return out
