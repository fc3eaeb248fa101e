"""The names of a chip's engines and SRAM spaces: the one place they are spelled.

Engines: ``coreN.dmaM`` (a core's DMA engines), ``coreN.mxuM`` (one per systolic
array), ``coreN.vpu`` (the vector unit), ``tdma`` (DRAM <-> shared SRAM), ``hdma`` (the
host link), ``host`` (fallback work on the host). SRAM spaces: ``sramN`` (core N's
scratchpad) and ``shared``. A leaf module: the config, the IR, the hardware model, the
compiler and the reports all name engines through it.
"""

from __future__ import annotations

import re
from functools import lru_cache

TDMA = "tdma"
HDMA = "hdma"
HOST = "host"
SHARED = "shared"
"""The shared SRAM's space."""

ENGINE_PATTERN = re.compile(r"core([0-9]+)\.(?:(dma|mxu)[0-9]+|(vpu)[0-9]*)|(tdma|hdma|host)")
"""Well-formed engine names: ``coreN.dmaM``, ``coreN.mxuM``, ``coreN.vpu``, ``tdma``,
``hdma``, ``host``. Whether an engine exists on a given NPU is the verifier's call."""


def dma_engine(core: int, index: int) -> str:
    return f"core{core}.dma{index}"


def mxu_engine(core: int, index: int) -> str:
    return f"core{core}.mxu{index}"


def vpu_engine(core: int) -> str:
    return f"core{core}.vpu"


def sram_space(core: int) -> str:
    """Core ``core``'s scratchpad."""
    return f"sram{core}"


def space_core(space: str) -> int | None:
    """The core owning a scratchpad space; None for shared SRAM or a malformed name."""
    digits = space.removeprefix("sram")
    return int(digits) if digits != space and digits.isdigit() else None


@lru_cache(maxsize=4096)
def engine_kind(engine: str) -> str:
    """``"dma"``, ``"mxu"``, ``"vpu"``, ``"tdma"``, ``"hdma"`` or ``"host"``
    (``""`` for a malformed name)."""
    match = ENGINE_PATTERN.fullmatch(engine)
    if match is None:
        return ""
    return match.group(2) or match.group(3) or match.group(4)


@lru_cache(maxsize=4096)
def engine_core(engine: str) -> int | None:
    """The core index of ``coreN.xxx`` engines, else None."""
    match = ENGINE_PATTERN.fullmatch(engine)
    return int(match.group(1)) if match and match.group(1) else None


__all__ = ["ENGINE_PATTERN", "HDMA", "HOST", "SHARED", "TDMA", "dma_engine", "engine_core",
           "engine_kind", "mxu_engine", "space_core", "sram_space", "vpu_engine"]
