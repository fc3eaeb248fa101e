"""Triton kernels to scheduled programs: trace a launch, lower it, cache it.

>>> kernel = compile_launch(add_kernel, (x, y, out, n), {"BLOCK": 1024}, (4,), config)
>>> outputs, result = kernel.run({"x_ptr": x_np, "y_ptr": y_np, "out_ptr": out_np})

:func:`compile_launch` traces ``jit_fn[grid](*args, **kwargs)`` shape-only
(:mod:`compiler.triton.interpret`), lowers it (:mod:`compiler.triton.lower`), verifies
the program and caches it by the kernel, the grid, the argument shapes, dtypes and
scalar values, and the hardware config. The numbers come from the simulator running
the lowered program, as for every other op.

A kernel whose loop bounds, branches or addresses depend on values it loads (sequence
lengths, block tables, sorted token ids) is traced again on the launch's data, as the
device would run it: the program is built for those values (``KernelProgram.resolved``
says which arguments decided what) and cached by their contents. Without data (meta
tensors) such a launch is refused naming the arguments it needs.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from archsim.config.model import NpuConfig
from compiler.emit import Emitter
from compiler.ir.ops import Program
from compiler.triton.interpret import PIN, require_triton, trace
from compiler.triton.lower import Lowering
from compiler.triton.trace import KernelTrace


@dataclass(frozen=True)
class KernelProgram:
    """A lowered launch: DRAM tensors are named after the kernel's tensor arguments."""

    name: str
    program: Program
    config: NpuConfig
    arguments: tuple[str, ...]
    """Tensor arguments, in call order (each a DRAM tensor of the same name)."""
    written: tuple[str, ...]
    """Arguments the kernel stores to."""
    constants: Mapping[str, np.ndarray]
    programs: int
    """Program instances in the grid."""
    trace_seconds: float = 0.0
    lower_seconds: float = 0.0
    timing: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    resolved: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Arguments whose values this program was built for -> what they decided."""

    @property
    def note(self) -> str:
        """One line saying the program holds for this launch's data only ('' if not)."""
        if not self.resolved:
            return ""
        what = "; ".join(f"{name}: {', '.join(uses)}" for name, uses in self.resolved.items())
        return (f"kernel {self.name}: built for the values in this launch's tensors "
                f"({what}); other values give another program")

    def run(self, arrays: Mapping[str, np.ndarray], verify: bool = True) -> tuple[
            dict[str, np.ndarray], Any]:
        """Simulate with data: returns the written arguments' new contents and the
        SimResult."""
        from archsim.simulator import Simulator

        feed = dict(arrays)
        feed.update(self.constants)
        result = Simulator(self.config).run(self.program, feed, verify=verify)
        return {name: np.asarray(result.outputs[name]) for name in self.written}, result

    def simulate(self, verify: bool = True) -> Any:
        """Performance only (no data)."""
        from archsim.simulator import Simulator

        return Simulator(self.config).run(self.program, None, verify=verify)


_CACHE: dict[tuple[Any, ...], KernelProgram] = {}
_TRACES: dict[tuple[Any, ...], tuple[KernelTrace, float]] = {}
_DEPENDS: dict[tuple[Any, ...], tuple[str, ...]] = {}
"""Launch key -> arguments whose values its trace depends on (data-dependent kernels)."""

Data = Mapping[str, Any]
"""Argument name -> its contents (a CPU torch tensor or a numpy array, None where
unknown: a trace that consults it stops naming it)."""


def trace_launch(jit_fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                 grid: Any, data: Data | None = None) -> KernelTrace:
    """The trace of a launch (cached by kernel, grid and argument signature, and by the
    contents of the arguments a data-dependent kernel consults)."""
    return _traced(_launch_key(jit_fn, args, kwargs, grid), jit_fn, args, kwargs, grid,
                   data)[1]


def _traced(key: tuple[Any, ...], jit_fn: Any, args: tuple[Any, ...],
            kwargs: Mapping[str, Any], grid: Any, data: Data | None
            ) -> tuple[tuple[Any, ...], KernelTrace, float]:
    from compiler.triton.record import NeedsData

    if data is None:
        data = _cpu_data(jit_fn, args, kwargs)
    names = _DEPENDS.get(key)
    full = key if names is None or data is None else (key, _digest(data, names))
    found = _TRACES.get(full)
    if found is not None:
        return full, *found
    start = time.perf_counter()
    try:
        if names is not None and data is not None:
            raise NeedsData("", names)
        traced = trace(jit_fn, tuple(args), dict(kwargs), grid)
    except NeedsData:
        if data is None:
            raise
        traced = trace(jit_fn, tuple(args), dict(kwargs), grid, memory=_numpy(data))
        names = _DEPENDS[key] = tuple(sorted(traced.consulted))
        full = (key, _digest(data, names))
    found = _TRACES[full] = (traced, time.perf_counter() - start)
    return full, *found


def _cpu_data(jit_fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
              ) -> Data | None:
    """The contents of a launch's tensors when all of them are CPU tensors."""
    import inspect

    names = list(inspect.signature(_fn(jit_fn)).parameters)
    tensors = {n: v for n, v in (*zip(names, args), *kwargs.items())
               if hasattr(v, "data_ptr") and hasattr(v, "device")}
    if not tensors or any(t.device.type != "cpu" for t in tensors.values()):
        return None
    return tensors


def _numpy(data: Data) -> dict[str, np.ndarray | None]:
    """Contents as byte arrays (bf16 keeps its bits); None stays unknown."""
    out = {}
    for name, value in data.items():
        if value is None:  # unknown (a value computed in a graph): never consulted
            out[name] = None
            continue
        if hasattr(value, "numpy"):
            import torch

            flat = value.detach().contiguous().reshape(-1)
            value = flat.view(torch.uint8).numpy() if flat.numel() else np.zeros(0, np.uint8)
        out[name] = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
    return out


def _digest(data: Data, names: tuple[str, ...]) -> str:
    arrays = _numpy({n: data[n] for n in names})
    digest = hashlib.blake2b(digest_size=16)
    for name in names:
        digest.update(name.encode())
        digest.update(arrays[name].tobytes())
    return digest.hexdigest()


def _launch_key(jit_fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                grid: Any) -> tuple[Any, ...]:
    return (_fn(jit_fn), _grid_key(grid), tuple(_arg_key(a) for a in args),
            tuple(sorted((k, _arg_key(v)) for k, v in kwargs.items())))


def compile_launch(jit_fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                   grid: Any, config: NpuConfig, source: str = "",
                   data: Data | None = None) -> KernelProgram:
    """Trace, lower and verify one launch (cached). ``data`` gives the tensors'
    contents when they are not CPU tensors (npu tensors' host buffers); a kernel that
    needs them and has none is refused naming the arguments."""
    launch = _launch_key(jit_fn, args, kwargs, grid)
    full, traced, trace_s = _traced(launch, jit_fn, args, kwargs, grid, data)
    key = (full, config)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    start = time.perf_counter()
    program = lower(traced, config, source or traced.name)
    program = _with_times(program, trace_s, time.perf_counter() - start)
    _CACHE[key] = program
    return program


def lower(traced: KernelTrace, config: NpuConfig, source: str) -> KernelProgram:
    """A traced launch as a verified program of its own."""
    from compiler.ir.verify import verify

    em = Emitter(traced.name, config)
    for p in traced.pointers:
        em.tensor(p.name, p.shape, p.dtype, "inout")
    lowering = Lowering(traced, em, config, {p.name: p.name for p in traced.pointers},
                        source)
    lowering.run()
    for p in traced.pointers:
        em.set_role(p.name, "inout" if p.name in lowering.written else "in")
    program = em.build()
    verify(program, config)
    nx, ny, nz = traced.grid
    return KernelProgram(traced.name, program, config,
                         tuple(p.name for p in traced.pointers),
                         tuple(p.name for p in traced.pointers if p.name in lowering.written),
                         dict(lowering.constants), nx * ny * nz,
                         resolved=dict(traced.consulted))


def clear_cache() -> None:
    _CACHE.clear()
    _TRACES.clear()
    _DEPENDS.clear()


def _with_times(program: KernelProgram, trace_s: float, lower_s: float) -> KernelProgram:
    import dataclasses

    return dataclasses.replace(program, trace_seconds=trace_s, lower_seconds=lower_s)


def _fn(jit_fn: Any) -> Any:
    return getattr(jit_fn, "fn", jit_fn)


def _grid_key(grid: Any) -> Any:
    if not callable(grid):
        return tuple(grid)
    cells = tuple(c.cell_contents for c in (grid.__closure__ or ()))
    return (grid.__code__, tuple(c if isinstance(c, (int, float, str)) else id(c)
                                 for c in cells))


def _arg_key(value: Any) -> Any:
    if hasattr(value, "data_ptr") and hasattr(value, "shape"):
        return ("tensor", tuple(value.shape), str(value.dtype), tuple(value.stride()))
    if isinstance(value, (int, float, bool, str, type(None))):
        return (type(value).__name__, value)
    return ("object", repr(value))


__all__ = ["KernelProgram", "PIN", "clear_cache", "compile_launch", "lower",
           "require_triton", "trace", "trace_launch"]
