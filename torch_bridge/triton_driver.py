"""A Triton driver for the npu: what host code asks Triton about the device.

Tutorials and serving engines ask ``triton.runtime.driver.active`` for the current
device, its properties (to size grids: ``multiprocessor_count``; to pick block sizes:
``max_shared_mem``) and the target; ``@triton.autotune`` and
``triton.testing.do_bench`` time launches through its benchmarker. With no GPU, Triton
has no active driver ("0 active drivers"); :func:`install` makes this one active, so
those calls answer with the simulated device: the properties are the current preset's
(cores, scratchpad bytes, clock) and the times are simulated. Autotuning therefore
picks the configuration with the lowest simulated time, and says which it picked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torch_bridge import runtime

log = logging.getLogger("archsim.triton")

WARP = 1
"""Lanes per Triton program as the npu runs them: a program is one core's work."""

REGISTERS = 65536
"""``max_num_regs``: not a register file (the npu has none to share), a budget that
warmed kernels divide by their ``num_warps`` so occupancy comes out as one program per
core (``Warmed.n_regs``)."""


def simulated_milliseconds(fn: Callable[[], Any]) -> float:
    """The simulated device time of ``fn()`` in ms (its launches are deterministic, so
    one run is every run)."""
    timeline = runtime.timeline()
    before = timeline.now_cycles
    fn()
    return runtime.get_config().cycles_to_seconds(runtime.timeline().now_cycles - before) * 1e3


def benchmark(fn: Callable[[], Any], quantiles: Sequence[float] | None = None,
              **unused: Any) -> float | list[float]:
    """``triton.testing.do_bench``'s contract on the simulator: the time of ``fn`` in
    ms (every quantile is that time; warmup and repetitions are not needed)."""
    ms = simulated_milliseconds(fn)
    return [ms for _ in quantiles] if quantiles else ms


class _Utils:
    """``driver.active.utils``: device properties in CUDA's names, from the preset."""

    def get_device_properties(self, device: int = 0) -> dict[str, Any]:
        config = runtime.get_config()
        return {
            "multiprocessor_count": config.cores,
            "max_shared_mem": config.core.scratchpad.size_bytes,
            "max_num_regs": REGISTERS,
            "warpSize": WARP,
            "sm_clock_rate": config.clock_hz // 1000,
            "mem_clock_rate": config.clock_hz // 1000,
            "mem_bus_width": 0,
            "name": f"archsim {config.name}",
        }


def _driver_class() -> type:
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class NpuDriver(DriverBase):
        """The simulated npu as Triton's active driver."""

        def __init__(self) -> None:
            super().__init__()
            self.utils = _Utils()

        @classmethod
        def is_active(cls) -> bool:
            return True

        def map_python_to_cpp_type(self, ty: str) -> str:
            return "void*" if ty.startswith("*") else ty

        def get_current_target(self) -> Any:
            return GPUTarget("npu", runtime.get_config().name, WARP)

        def get_active_torch_device(self) -> torch.device:
            return torch.device("npu", 0)

        def get_current_device(self) -> int:
            return 0

        def set_current_device(self, device: int) -> None:
            if device != 0:
                raise ValueError(f"the npu has one device (0), not {device}")

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

        def get_device_interface(self) -> Any:
            return torch.npu

        def get_benchmarker(self) -> Callable[..., Any]:
            return benchmark

        def get_empty_cache_for_benchmark(self) -> torch.Tensor:
            return torch.empty(0, device="npu")

        def clear_cache(self, cache: torch.Tensor) -> None:
            pass

    return NpuDriver


def install() -> None:
    """Make the npu Triton's active driver when Triton has none of its own (no GPU), and
    report autotuning choices; ``triton.testing.do_bench`` of npu work is simulated."""
    from triton import knobs
    from triton.runtime import driver as drivers

    if drivers._active is None:
        try:
            drivers.set_active(drivers.default)  # a GPU driver, if the machine has one
        except RuntimeError:
            drivers.set_active(_driver_class()())
    if knobs.autotuning.listener is None:
        knobs.autotuning.listener = _report_choice
    import triton.testing

    if not getattr(triton.testing.do_bench, "archsim", False):
        triton.testing.do_bench = _do_bench(triton.testing.do_bench)


def _do_bench(original: Callable[..., Any]) -> Callable[..., Any]:
    def do_bench(fn: Callable[[], Any], *args: Any, quantiles: Sequence[float] | None = None,
                 **kwargs: Any) -> Any:
        if _is_npu_driver():
            return benchmark(fn, quantiles)
        return original(fn, *args, quantiles=quantiles, **kwargs)
    do_bench.archsim = True  # type: ignore[attr-defined]
    do_bench.__doc__ = original.__doc__
    return do_bench


def _is_npu_driver() -> bool:
    from triton.runtime import driver as drivers

    active = drivers._active
    return active is not None and type(active).__name__ == "NpuDriver"


def _report_choice(fn: Any, key: Any, best_config: Any, configs_timings: dict[Any, Any],
                   **unused: Any) -> None:
    """One line per autotuning: the chosen config and every config's simulated time."""
    def ms(timing: Any) -> float:
        return float(timing[0] if isinstance(timing, (list, tuple)) else timing)

    def short(config: Any) -> str:
        return ", ".join(f"{k}={v}" for k, v in config.kwargs.items())

    times = "; ".join(f"{short(config)}: {ms(t) * 1e3:.2f} us" for config, t in
                      sorted(configs_timings.items(), key=lambda item: ms(item[1])))
    log.warning("autotune %s: chose %s by simulated time (%s)", fn.__name__,
                short(best_config), times)
