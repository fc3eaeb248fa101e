"""Run a launch three ways: lowered and simulated by archsim, by Triton's own
interpreter (on CPU copies), and compare."""

from __future__ import annotations

from typing import Any

import torch

from archsim.config import load_config
from compiler.torch_types import to_numpy, to_torch
from compiler.triton import compile_launch


def simulate(kernel: Any, args: tuple, kwargs: dict, grid: tuple, preset: str = "atom"
             ) -> tuple[dict[str, torch.Tensor], Any, Any]:
    """(written arguments by name, SimResult, KernelProgram)."""
    program = compile_launch(kernel, args, kwargs, grid, load_config(preset))
    names = program.arguments
    tensors = _tensors(kernel, args, kwargs)
    outputs, result = program.run({n: to_numpy(tensors[n]) for n in names})
    typed = {n: to_torch(outputs[n], program.program.tensor(n).dtype).reshape(tensors[n].shape)
             for n in program.written}
    return typed, result, program


def interpret(kernel: Any, args: tuple, kwargs: dict, grid: tuple) -> dict[str, torch.Tensor]:
    """Triton's interpreter on clones of the tensors: name -> tensor after the launch."""
    from compiler.triton.interpret import interpret as run_interpreter

    clones = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    kw = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    run_interpreter(kernel, grid, clones, kw)
    return _tensors(kernel, clones, kw)


def _tensors(kernel: Any, args: tuple, kwargs: dict) -> dict[str, torch.Tensor]:
    import inspect

    names = list(inspect.signature(kernel.fn).parameters)
    pairs = list(zip(names, args)) + list(kwargs.items())
    return {n: v for n, v in pairs if isinstance(v, torch.Tensor)}
