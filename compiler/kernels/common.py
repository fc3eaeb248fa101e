"""What every kernel needs: the emitter, where values live in DRAM, tile pipelining."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from archsim.config.model import NpuConfig
from compiler.emit import DramView, Emitter
from compiler.graph import Value, base_of
from compiler.kernels.matmul_panels import TilePanels
from compiler.options import CompileOptions

Box = tuple[tuple[int, int], ...]


@dataclass
class Context:
    em: Emitter
    config: NpuConfig
    options: CompileOptions
    tensors: dict[int, str] = field(default_factory=dict)
    """Base value id -> DRAM tensor name (materialized values only)."""
    scalars: dict[int, float] = field(default_factory=dict)
    """Splat value id -> its scalar (used as an operand, never materialized)."""
    constants: dict[str, object] = field(default_factory=dict)
    """DRAM tensors kernels add for their own constants (name -> object with .array())."""
    partial_limit: int = 0
    """Commands above which the kernel being lowered may compile only its first panels
    of output tiles (set for the program's last kernel; 0: whole)."""
    tile_panels: TilePanels | None = None
    """Set by a matmul kernel compiled in part."""
    matmul_sram_end: int = 0
    """Where the scratchpad buffers of the last matmul kernel end (the same offset on
    every core): the next matmul kernel places its buffers from there
    (:func:`compiler.kernels.matmul.operand_arena`)."""
    choices: dict[str, str] = field(default_factory=dict)
    """Kernel source -> the mapping a kernel chose among several, and why (reports
    show them: ``CompiledProgram.choices``)."""

    @property
    def cores(self) -> int:
        return self.config.cores if self.options.multicore else 1

    @property
    def capacity(self) -> int:
        return self.config.core.scratchpad.size_bytes

    @property
    def sets(self) -> int:
        return 2 if self.options.double_buffering else 1

    def view(self, value: Value) -> DramView:
        base = base_of(value)
        name = self.tensors.get(base.id)
        if name is None:
            raise KeyError(f"value {value.name} has no DRAM tensor")
        return DramView(name, base.shape or (1,), value.shape or (1,), value.dtype)

    def materialized(self, value: Value) -> bool:
        return value.id in self.tensors


@dataclass
class TileSteps:
    """A tile's work in phases, so the pipeline can issue loads ahead of compute."""

    load: Callable[[], None]
    compute: Callable[[], None]
    store: Callable[[], None]


def pipeline(per_core: list[list[TileSteps]], lag: int) -> None:
    """Issue tiles core by core in lockstep: load(t), then compute/store(t - lag)."""
    longest = max((len(t) for t in per_core), default=0)
    for step in range(longest + lag):
        for tiles in per_core:
            if step < len(tiles):
                tiles[step].load()
            back = step - lag
            if 0 <= back < len(tiles):
                tiles[back].compute()
                tiles[back].store()


def unravel(index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The multi-index of flat ``index`` in row-major ``shape``."""
    out = []
    for size in reversed(shape):
        out.append(index % size)
        index //= size
    return tuple(reversed(out))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def box_shape(box: Box) -> tuple[int, ...]:
    return tuple(hi - lo for lo, hi in box)
