"""Hardware design-space sweeps: one workload on the cartesian product of config values.

    >>> from archsim.sweep import sweep
    >>> points = sweep("gemm", "tiny", {"core.matrix.rows": [4, 8], "dram.channels": [1, 2]},
    ...                seq=64)
    >>> [(p.label, p.status, p.report.total_cycles if p.report else None) for p in points]

Each point applies its grid values as overrides (``NpuConfig.with_overrides``) to the
base config, then compiles and simulates the workload exactly as ``archsim run`` does
(:func:`archsim.app.run`), performance-only by default: its cycles
equal those of ``archsim run MODEL --perf-only --set PATH=VALUE ...``. A point whose
config is invalid or whose workload does not fit is recorded with its status and error
text; it never stops the sweep. Errors that are not :class:`ArchsimError` are bugs and
propagate.

Points are independent, so they run on an execution backend from :data:`BACKENDS`
(``serial`` in this process, ``process`` a local process pool, ``ray`` Ray tasks); all
of them run the same :func:`run_point`. Each point returns a trace-free
:class:`~reports.data.ReportData` (totals and peaks, ``commands=()``), small enough to
ship between processes; tables, CSV, JSON and the Pareto plot are in
:mod:`reports.sweep`.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archsim.config import NpuConfig, load_config
from archsim.errors import ArchsimError, CapacityError, ConfigError

from archsim.app.workload import Kind, Workload

if TYPE_CHECKING:
    from compiler.ir.ops import Program
    from reports.data import ReportData

MAX_POINTS = 10_000
"""Points one sweep may have (a typo such as an extra axis should not queue a week of runs)."""
STATUS_OK = "ok"

ERROR_STATUS: tuple[tuple[type[ArchsimError], str], ...] = (
    (ConfigError, "invalid config"),   # with_overrides rejected the point's values
    (CapacityError, "does not fit"),   # no tiling fits the SRAM, DRAM too small...
    (ArchsimError, "failed"),          # any other error a config can cause
)
"""A point's status by the error it raised; the first matching class wins."""


@dataclass(frozen=True)
class PointTask:
    """One point to run: picklable, so any backend can ship it."""

    index: int
    workload: Workload
    mode: str
    """A mode of :func:`archsim.app.run` (``performance`` unless ``--functional``)."""
    base: NpuConfig
    overrides: Mapping[str, Any]
    """Plain dicts here and in :class:`SweepPoint`: a MappingProxyType does not pickle."""


@dataclass(frozen=True)
class SweepPoint:
    """One point's outcome."""

    index: int
    """Position in the grid's cartesian product (first axis slowest)."""
    overrides: Mapping[str, Any]
    """The grid values of this point, by dotted path."""
    status: str
    """``ok`` or a status of :data:`ERROR_STATUS`."""
    error: str = ""
    """The error text on one line (empty when ok)."""
    report: ReportData | None = field(default=None, repr=False)
    """Totals of the run without its trace (None unless ok)."""
    wall_seconds: float = 0.0
    """Time this point took to compile and simulate (not a result: varies by host)."""

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK

    @property
    def label(self) -> str:
        """``rows=64 channels=8``: the last part of each path (the full path where two
        axes end the same)."""
        return point_label(self.overrides)


DVFS_AXIS = "dvfs"
"""A grid axis of operating points, each ``CLOCK_HZ:VOLTAGE_V`` (``1.2e9:0.85``): it sets
``clock_hz`` and ``energy.voltage_v`` together, as DVFS tables pair them (a cartesian
product of the two would include points no chip runs at)."""


def expand_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The point's overrides as config paths: a :data:`DVFS_AXIS` value becomes its clock
    and voltage; a malformed one is a ConfigError naming what is accepted."""
    expanded = {path: value for path, value in overrides.items() if path != DVFS_AXIS}
    if DVFS_AXIS in overrides:
        point = str(overrides[DVFS_AXIS])
        clock, colon, voltage = point.partition(":")
        try:
            expanded["clock_hz"] = int(float(clock))
            expanded["energy.voltage_v"] = float(voltage)
        except ValueError:
            colon = ""
        if not colon:
            raise ConfigError([f"dvfs: {point!r} is not CLOCK_HZ:VOLTAGE_V "
                               f"(e.g. 1.2e9:0.85)"], source="sweep grid")
    return expanded


def check_axes(base: NpuConfig, grid: Mapping[str, Sequence[Any]]) -> None:
    """Refuse, before any point runs, what would make every point invalid: an axis path
    that names no field (the ConfigError ``--set`` gives) or a malformed DVFS point.
    Values a field refuses stay errors of their points (the other points still run)."""
    for value in grid.get(DVFS_AXIS, ()):
        expand_overrides({DVFS_AXIS: value})
    base.check_override_paths(path for path in grid if path != DVFS_AXIS)


def point_label(overrides: Mapping[str, Any]) -> str:
    short = [path.rpartition(".")[2] for path in overrides]
    names = [s if short.count(s) == 1 else path for s, path in zip(short, overrides)]
    return " ".join(f"{name}={value}" for name, value in zip(names, overrides.values()))


# ---------------------------------------------------------------- the grid


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """The cartesian product of the axes, first axis slowest; one empty point for an
    empty grid."""
    for path, values in grid.items():
        if not path or not isinstance(values, Sequence) or isinstance(values, str):
            raise ArchsimError(f"grid axis {path!r}: expected a dotted path and a list of "
                               f"values, got {values!r}")
        if not values:
            raise ArchsimError(f"grid axis {path!r} has no values")
    total = math.prod(len(values) for values in grid.values())
    if total > MAX_POINTS:
        sizes = " x ".join(f"{len(values)} {path}" for path, values in grid.items())
        raise ArchsimError(f"the grid has {total:,} points ({sizes}), more than "
                           f"{MAX_POINTS:,}; sweep fewer values per axis, or split the "
                           f"sweep into several runs")
    paths = list(grid)
    return [dict(zip(paths, combo)) for combo in itertools.product(*grid.values())]


# ---------------------------------------------------------------- one point


def run_point(task: PointTask) -> SweepPoint:
    """Build the point's config, compile and simulate; every backend runs this."""
    from archsim.app.pipeline import run
    from compiler.ir.collector import paused

    start = time.perf_counter()
    try:
        config = task.base.with_overrides(expand_overrides(task.overrides))
        with paused():  # the collector walks the point's objects once, when it is done
            result = run(task.workload, config, mode=task.mode)
    except ArchsimError as exc:
        return SweepPoint(task.index, task.overrides, _status(exc), one_line(exc),
                          wall_seconds=time.perf_counter() - start)
    from reports.sweep import run_totals

    return SweepPoint(task.index, task.overrides, STATUS_OK, "", run_totals(result),
                      wall_seconds=time.perf_counter() - start)


def _status(exc: ArchsimError) -> str:
    return next(status for kind, status in ERROR_STATUS if isinstance(exc, kind))


def one_line(exc: ArchsimError) -> str:
    """The error's text on one line (a ConfigError's problems joined by ``; ``)."""
    if isinstance(exc, ConfigError):
        return "; ".join(exc.problems)
    return " ".join(part.strip() for part in str(exc).splitlines() if part.strip())


# ---------------------------------------------------------------- backends

Backend = Callable[[Sequence[PointTask], int], Iterator[SweepPoint]]
"""(tasks, workers) -> points in completion order."""


def _run_serial(tasks: Sequence[PointTask], workers: int) -> Iterator[SweepPoint]:
    for task in tasks:
        yield run_point(task)


def _run_process_pool(tasks: Sequence[PointTask], workers: int) -> Iterator[SweepPoint]:
    """A local pool. Workers fork from a clean server process that has imported torch
    and the compiler once (never from this process, whose threads fork would copy)."""
    if workers <= 1 or len(tasks) <= 1:
        yield from _run_serial(tasks, workers)
        return
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_preload(tasks))
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)),
                             mp_context=context) as pool:
        futures = [pool.submit(run_point, task) for task in tasks]
        try:
            for future in as_completed(futures):
                yield future.result()
        except BrokenProcessPool:
            raise ArchsimError("a sweep worker process died: out of memory, or a script "
                               "calls sweep() outside 'if __name__ == \"__main__\":' "
                               "(workers import the main script)") from None
        finally:
            for future in futures:
                future.cancel()


def _preload(tasks: Sequence[PointTask]) -> list[str]:
    """Modules the pool's server imports once (torch takes seconds per process), if
    the points compile models; only the first pool of a process starts the server."""
    modules = ["archsim.sweep", "archsim.simulator"]
    if any(task.workload.kind is not Kind.PROGRAM for task in tasks):
        # torch loads these lazily on the first export and compile (~3 s)
        modules += ["torch", "torch._dynamo", "torch.export", "torch._export",
                    "torch._functorch.aot_autograd", "torch._inductor.decomposition",
                    "networkx", "compiler.compile", "compiler.lowerings", "compiler.kernels",
                    "archsim.app.pipeline"]
    return modules


def _run_ray(tasks: Sequence[PointTask], workers: int) -> Iterator[SweepPoint]:
    """Ray tasks: on the Ray this process is connected to, else on the cluster
    ``RAY_ADDRESS`` names, else on a new local Ray with ``workers`` CPUs. Workers must
    be able to import archsim (local ones share this Python)."""
    try:
        import ray
    except ImportError:
        raise ArchsimError("the ray backend needs Ray: pip install ray "
                           "(or pip install 'archsim[ray]')") from None
    if not ray.is_initialized() and os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=False)
    elif not ray.is_initialized():
        ray.init(address="local", num_cpus=workers, include_dashboard=False,
                 log_to_driver=False)
    remote = ray.remote(run_point)
    pending = [remote.remote(task) for task in tasks]
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    finally:
        for ref in pending:
            ray.cancel(ref)


BACKENDS: dict[str, Backend] = {
    "serial": _run_serial,
    "process": _run_process_pool,
    "ray": _run_ray,
}
"""Execution backends by name; each runs :func:`run_point` on every task."""


# ---------------------------------------------------------------- the sweep


def sweep(model: str | Program | Workload, config: str | Path | NpuConfig,
          grid: Mapping[str, Sequence[Any]], *, overrides: Mapping[str, Any] | None = None,
          backend: str = "process", workers: int | None = None, batch: int | None = None,
          seq: int | None = None, layers: int | None = None, dtype: str | None = None,
          perf_only: bool = True,
          on_point: Callable[[SweepPoint, int, int], None] | None = None
          ) -> tuple[SweepPoint, ...]:
    """Run ``model`` on every point of ``grid`` (dotted path -> values) applied to
    ``config`` (a preset name, YAML path or ``NpuConfig``) with the fixed ``overrides``
    first. Returns one :class:`SweepPoint` per grid point, in grid order.

    ``model`` is what ``archsim run`` takes (a built-in workload, a ``.py`` or ``.rbln``
    path; ``batch``/``seq``/``layers``/``dtype`` are its options, refused where they
    cannot apply), a :class:`Program` or a :class:`~archsim.app.Workload`. ``backend`` is a key of :data:`BACKENDS`; ``workers`` defaults
    to ``os.cpu_count()``. ``on_point(point, done, total)`` is called as each point
    finishes (in completion order).

    The process pool's workers import the main script, as with any multiprocessing: in
    a script, call this under ``if __name__ == "__main__":`` (notebooks need nothing).
    """
    run = BACKENDS.get(backend)
    if run is None:
        raise ArchsimError(f"unknown sweep backend {backend!r}; choose one of "
                           f"{', '.join(BACKENDS)}")
    workers = workers if workers is not None else os.cpu_count() or 1
    if workers < 1:
        raise ArchsimError(f"workers must be >= 1, got {workers}")
    clash = sorted(set(grid) & set(overrides or {}))
    if clash:
        raise ArchsimError(f"{', '.join(clash)}: both swept and fixed; drop one")
    base = config if isinstance(config, NpuConfig) else load_config(str(config))
    if overrides:
        base = base.with_overrides(dict(overrides))
    check_axes(base, grid)
    if isinstance(model, Workload):
        workload = model
    elif isinstance(model, str):
        workload = Workload.parse(model, batch=batch, seq=seq, layers=layers, dtype=dtype)
    else:
        workload = Workload.of_program(model)
    mode = "performance" if perf_only else "auto"
    tasks = [PointTask(i, workload, mode, base, point)
             for i, point in enumerate(grid_points(grid))]
    points: list[SweepPoint] = []
    for point in run(tasks, workers):
        points.append(point)
        if on_point is not None:
            on_point(point, len(points), len(tasks))
    return tuple(sorted(points, key=lambda p: p.index))


__all__ = ["BACKENDS", "ERROR_STATUS", "PointTask", "STATUS_OK", "SweepPoint",
           "grid_points", "one_line", "point_label", "run_point", "sweep"]
