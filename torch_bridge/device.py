"""``torch.npu``: the device module of the simulated NPU.

There is one device, ``npu:0``. Execution is synchronous on the host; the device
clock (:func:`elapsed_cycles`) is the simulated time of everything run so far, kept
on one timeline (:mod:`torch_bridge.runtime`). Random numbers come from the CPU
default generator (a device generator cannot be made from Python), so seeding npu
seeds CPU too and ``torch.manual_seed`` reproduces CPU numbers on npu.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from archsim.config import NpuConfig
from torch_bridge import runtime, storage
from torch_bridge.streams import (
    Event,
    Stream,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

__all__ = [
    "current_device", "device", "device_count", "elapsed_cycles", "elapsed_seconds",
    "get_amp_supported_dtype", "get_config", "is_available", "is_bf16_supported",
    "is_initialized", "manual_seed", "manual_seed_all", "max_memory_allocated",
    "memory_allocated", "reset_peak_memory_stats", "set_config", "set_device",
    "synchronize", "get_rng_state", "set_rng_state", "get_rng_state_all",
    "set_rng_state_all", "get_device_properties", "get_device_name", "mem_get_info",
    "memory_stats", "memory_reserved", "max_memory_reserved", "empty_cache",
    "memory_summary", "get_device_capability", "reset_max_memory_allocated", "Event",
    "Stream", "current_stream", "default_stream", "set_stream", "stream", "init",
    "initial_seed", "seed", "seed_all", "set_offset", "get_offset",
]


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def init() -> None:
    """Initialize the device state, as ``torch.cuda.init``: the npu is ready once
    registered, so this does nothing (and works in forked children: the device is
    host memory)."""


def _index(device: int | str | torch.device | None) -> int:
    """The device index ``device`` names (the current one for ``None``)."""
    if device is None:
        return 0
    index = device if isinstance(device, int) else torch.device(device).index
    return 0 if index is None else index


def set_device(device: int | str | torch.device) -> None:
    """Select the device; only ``0`` / ``"npu"`` / ``"npu:0"`` exist. Another index
    raises ``RuntimeError`` as ``torch.cuda.set_device`` does for a missing GPU."""
    if _index(device) != 0:
        raise RuntimeError(f"npu device index {_index(device)} is out of range: "
                           f"there is one device (npu:0)")


class device:
    """Context manager selecting an npu device (only ``npu:0`` exists), as
    ``torch.cuda.device``; ``torch.load`` uses it to place storages."""

    def __init__(self, device: int | str | torch.device | None) -> None:
        if device is not None:
            set_device(device)

    def __enter__(self) -> "device":
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def synchronize(device: int | str | torch.device | None = None) -> None:
    """A no-op: every npu op has finished when it returns."""


def manual_seed(seed: int) -> None:
    """Seed the generator npu random ops use (the CPU default generator)."""
    torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    """Seed the generator npu random ops use with a non-deterministic number."""
    torch.default_generator.seed()


def seed_all() -> None:
    seed()


def initial_seed() -> int:
    """The seed last set by :func:`manual_seed` / :func:`seed` (as ``torch.cuda``)."""
    return torch.default_generator.initial_seed()


def set_offset(offset: int) -> None:
    """Not supported: npu random numbers come from the CPU generator (a Mersenne
    Twister), which has no Philox offset. Use :func:`set_rng_state`."""
    raise RuntimeError("npu does not support set_offset: its random numbers come from "
                       "the CPU generator, which has no offset (use set_rng_state)")


def get_offset() -> int:
    """Not supported, as :func:`set_offset`. Use :func:`get_rng_state`."""
    raise RuntimeError("npu does not support get_offset: its random numbers come from "
                       "the CPU generator, which has no offset (use get_rng_state)")


def get_rng_state(device: int | str | torch.device = "npu") -> torch.Tensor:
    """The state of the generator npu random ops use (a CPU uint8 tensor)."""
    return torch.default_generator.get_state()


def set_rng_state(new_state: torch.Tensor, device: int | str | torch.device = "npu") -> None:
    """Restore a state from :func:`get_rng_state`: the same random numbers follow."""
    torch.default_generator.set_state(new_state.to("cpu", torch.uint8))


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state()]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    set_rng_state(new_states[0])


def memory_reserved(device: int | str | torch.device | None = None) -> int:
    """No caching allocator: reserved memory is the allocated memory."""
    return storage.allocator.in_use_bytes


def max_memory_reserved(device: int | str | torch.device | None = None) -> int:
    return storage.allocator.peak_bytes


def empty_cache() -> None:
    """A no-op: freed npu storages are released at once (nothing is cached)."""


@dataclass(frozen=True)
class DeviceProperties:
    """What torch.cuda.get_device_properties reports, from the simulated preset."""

    name: str
    total_memory: int
    multi_processor_count: int
    clock_rate_hz: int
    matrix_arrays_per_core: int
    matrix_rows: int
    matrix_cols: int
    vector_lanes: int
    major: int = 0
    """With ``minor``: :func:`get_device_capability` (no CUDA compute capability)."""
    minor: int = 0


def _check_index(device: int | str | torch.device | None) -> None:
    """``AssertionError("Invalid device id")`` for a missing device, as torch.cuda's
    property queries raise."""
    if _index(device) != 0:
        raise AssertionError("Invalid device id")


def get_device_properties(device: int | str | torch.device | None = None) -> DeviceProperties:
    _check_index(device)
    cfg = runtime.get_config()
    m = cfg.core.matrix
    return DeviceProperties(cfg.name, cfg.dram.capacity_bytes, cfg.cores, cfg.clock_hz,
                            m.arrays, m.rows, m.cols, cfg.core.vector.lanes)


def get_device_capability(device: int | str | torch.device | None = None) -> tuple[int, int]:
    """(0, 0): an NPU has no CUDA compute capability. Code that picks features by it
    should ask :func:`is_bf16_supported` or :func:`get_device_properties` instead."""
    _check_index(device)
    return (0, 0)


def get_device_name(device: int | str | torch.device | None = None) -> str:
    _check_index(device)
    return runtime.get_config().name


def mem_get_info(device: int | str | torch.device | None = None) -> tuple[int, int]:
    """(free, total) bytes of device DRAM; total is the preset's DRAM capacity."""
    total = runtime.get_config().dram.capacity_bytes
    return max(0, total - storage.allocator.in_use_bytes), total


def memory_stats(device: int | str | torch.device | None = None) -> dict[str, int]:
    """torch.cuda key names for what archsim tracks (bytes held by npu storages)."""
    now, peak = storage.allocator.in_use_bytes, storage.allocator.peak_bytes
    stats = {}
    for kind in ("allocated_bytes", "reserved_bytes", "active_bytes"):
        stats[f"{kind}.all.current"] = now
        stats[f"{kind}.all.peak"] = peak
    return stats


def memory_summary(device: int | str | torch.device | None = None,
                   abbreviated: bool = False) -> str:
    """A short text table of :func:`memory_stats` (current and peak bytes)."""
    cfg = runtime.get_config()
    stats = memory_stats(device)
    rows = [f"npu:0 memory ({cfg.name}, {cfg.dram.capacity_bytes:,} bytes of DRAM)",
            f"{'':14}{'current':>16}{'peak':>16}"]
    for kind in ("allocated", "reserved", "active"):
        rows.append(f"{kind:14}{stats[f'{kind}_bytes.all.current']:>16,}"
                    f"{stats[f'{kind}_bytes.all.peak']:>16,}")
    return "\n".join(rows)


def memory_allocated(device: int | str | torch.device | None = None) -> int:
    """Bytes of device memory held by npu storages now."""
    return storage.allocator.in_use_bytes


def max_memory_allocated(device: int | str | torch.device | None = None) -> int:
    """Peak of :func:`memory_allocated` since start or :func:`reset_peak_memory_stats`."""
    return storage.allocator.peak_bytes


def reset_peak_memory_stats(device: int | str | torch.device | None = None) -> None:
    storage.allocator.reset_peak()


def reset_max_memory_allocated(device: int | str | torch.device | None = None) -> None:
    """torch.cuda's older name for :func:`reset_peak_memory_stats`."""
    storage.allocator.reset_peak()


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def set_config(config: str | Path | NpuConfig) -> NpuConfig:
    """Simulate another NPU: a preset name (``"tpu-v3"``), a YAML path or an
    ``NpuConfig``. Restarts the device clock; tensors on the device stay."""
    if isinstance(config, Path):
        config = str(config)
    return runtime.set_config(config)


def get_config() -> NpuConfig:
    """The simulated hardware (preset ``atom`` unless :func:`set_config` was called)."""
    return runtime.get_config()


def elapsed_cycles() -> int:
    """Device cycles of all work recorded on the timeline since it (re)started."""
    return runtime.timeline().now_cycles


def elapsed_seconds() -> float:
    """:func:`elapsed_cycles` at the config's clock."""
    return runtime.get_config().cycles_to_seconds(runtime.timeline().now_cycles)


def _is_in_bad_fork() -> bool:
    return False
