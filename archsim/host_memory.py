"""Host memory a functional run needs, checked before anything is allocated.

A functional run holds every DRAM tensor of the program as a numpy array. A hand-edited
or oversized program can ask for more than the machine has; numpy would then fail
half-way with ``MemoryError`` or the machine would swap. :func:`check_host_memory`
refuses such a run up front with a :class:`~archsim.errors.HostMemoryError` naming the
largest tensor and the bytes needed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from archsim.errors import HostMemoryError
from compiler.ir.operands import DramTensor

ENV_LIMIT = "ARCHSIM_HOST_MEMORY_BYTES"
"""Environment variable that overrides the host memory a functional run may use."""
ALWAYS_FITS = 64 << 20
"""Runs needing less than this are not checked against the machine (unless the limit is
set explicitly): any machine that runs torch has 64 MiB to spare."""
HEADROOM = 0.8
"""Share of the available memory a functional run may take (the rest is torch, numpy
temporaries and the outputs' copies)."""


def host_memory_limit() -> int:
    """Bytes a functional run may use: ``ARCHSIM_HOST_MEMORY_BYTES`` if set, else 80% of
    the memory available now (MemAvailable, else free physical pages)."""
    text = os.environ.get(ENV_LIMIT)
    if text:
        try:
            value = int(float(text))
        except ValueError:
            raise HostMemoryError(f"{ENV_LIMIT}={text!r}: expected a number of bytes") from None
        if value <= 0:
            raise HostMemoryError(f"{ENV_LIMIT}={text!r}: must be > 0 bytes")
        return value
    return int(_available_bytes() * HEADROOM)


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: do not refuse


def check_host_memory(program_name: str, tensors: Iterable[DramTensor],
                      sram_bytes: int = 0) -> None:
    """Raise HostMemoryError if the program's DRAM tensors (and SRAM) exceed the limit."""
    tensors = list(tensors)
    needed = sum(t.nbytes for t in tensors) + sram_bytes
    if needed <= ALWAYS_FITS and not os.environ.get(ENV_LIMIT):
        return  # not worth reading /proc/meminfo for (eager ops run this per call)
    limit = host_memory_limit()
    if needed <= limit:
        return
    largest = max(tensors, key=lambda t: t.nbytes, default=None)
    biggest = ("" if largest is None else
               f"; largest tensor %{largest.name} {largest.dtype.name}"
               f"{list(largest.shape)} = {_bytes(largest.nbytes)}")
    raise HostMemoryError(
        f"functional run of {program_name!r} needs {_bytes(needed)} of host memory for its "
        f"{len(tensors)} DRAM tensors{biggest}, but {_bytes(limit)} is available "
        f"(set {ENV_LIMIT} to change the limit); run it performance-only instead "
        f"(--perf-only, or no inputs)")


def _bytes(n: int) -> str:
    if n >= 1 << 60:
        return f"{n:.3g} bytes"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit} ({n:,} bytes)"
    return f"{n:,} bytes"


__all__ = ["ENV_LIMIT", "check_host_memory", "host_memory_limit"]
