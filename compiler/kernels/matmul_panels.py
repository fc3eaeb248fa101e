"""A large matmul compiled in part: its first panels of output tiles.

The matmul kernel hands output tiles to the cores in turn (tile ``t`` to core
``t % cores``), so a round of ``cores`` consecutive tiles gives every core one tile. When
every tile has the same shape (the tiles divide M and N, whole rounds) the rounds differ
only in their DRAM addresses; the SRAM buffers they use rotate with a short period (the
accumulator sets, the operand sets over the k-steps, a resident A row block's sets).
A *panel* is the smallest number of rounds after which every core is back at the same
buffers: panels are identical pieces of the schedule. Tiles past the last whole panel
(a last round that does not reach every core: 4,096 tiles over 20 cores) are simulated
with the last panel as the tail.

When allowed (:attr:`CompileOptions.partial_matmul_commands`, performance-only, the
program's last kernel, so no later kernel waits for tiles that were not computed), the
kernel emits only the first :data:`KEEP_PANELS` panels and records which commands
belong to which panel; :func:`archsim.repeated.extend_tiles` extends the simulated run
to the whole matmul. Work, bytes and FLOPs are exact; cycles are the first panel
(pipeline fill), the last simulated one (drain) and, for each other panel, the mean of
the middle simulated ones (``tests/compiler/test_matmul_panels.py`` compares with full
runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from archsim.result import SimResult

T = TypeVar("T")

KEEP_PANELS = 3
"""Panels compiled and simulated: the first (pipeline fill), a steady-state one that each
other panel adds, the last (drain)."""

PARTIAL_COMMANDS = 50_000
"""The ``partial_matmul_commands`` of performance-only runs (``archsim run``,
``archsim.estimate``): a 16384^3 GEMM (394k commands on ``atom``) runs in part, an
8192^3 one (49k) whole."""

MIN_PANELS = 8
"""Matmuls with fewer panels run whole (extending would save little)."""


@dataclass(frozen=True)
class PanelPlan:
    """Output tiles grouped into identical panels; ``kept`` of them are compiled: the
    first ones and, when ``remainder`` tiles follow the last whole panel, a tail of the
    last panel and those tiles in place of the last kept panel."""

    tiles_per_panel: int
    total: int
    """Whole panels in the matmul (the remainder counts with the last)."""
    kept: int
    remainder: int = 0

    def emitted(self, tiles: list[T]) -> list[T]:
        """The tiles compiled, in order. A tail starts a whole number of panels after
        the first kept ones, so its tiles meet the cores and buffers they would in
        the whole matmul at their position in this list."""
        size = self.tiles_per_panel
        if not self.remainder:
            return tiles[:self.kept * size]
        return tiles[:(self.kept - 1) * size] + tiles[len(tiles) - size - self.remainder:]

    def panel_of(self, position: int) -> int:
        """The panel of the tile at ``position`` of :meth:`emitted` (the tail is one)."""
        return min(position // self.tiles_per_panel, self.kept - 1)


@dataclass(frozen=True)
class TilePanels:
    """Which commands of a program belong to which panel of its partial matmul."""

    kernel: str
    panel: tuple[tuple[int, int, int], ...]
    """(first command, end command, panel) ranges; commands outside belong to none."""
    total: int
    tiles_per_panel: int

    def index(self, commands: int) -> np.ndarray:
        """Per command of a ``commands``-long program, its panel (-1: none)."""
        out = np.full(commands, -1, dtype=np.int64)
        for first, end, panel in self.panel:
            out[first:end] = panel
        return out

    def extend(self, result: SimResult) -> SimResult:
        """The run of the program (with the first panels) extended to the whole matmul."""
        from archsim.repeated import extend_tiles

        return extend_tiles(result, self.index(len(result.program.commands)), self.total,
                            self.kernel, self.tiles_per_panel)


def panel_plan(tiles: int, cores: int, full_shapes: bool, acc_sets: int, op_sets: int,
               k_steps: int, a_resident: bool, col_tiles: int, commands: int,
               limit: int) -> PanelPlan | None:
    """How to compile a matmul of ``tiles`` output tiles (``col_tiles`` per row block,
    ``k_steps`` each, ``commands`` in all) in part under ``limit`` commands, or None
    when it runs whole (``limit`` 0, small, tiles of several shapes, a resident A row
    block shared unevenly by the cores)."""
    if limit <= 0 or commands <= limit or not full_shapes:
        return None
    rounds = acc_sets  # accumulator set: (own tile count) % acc_sets
    rounds = math.lcm(rounds, op_sets // math.gcd(k_steps, op_sets))  # operand sets
    if a_resident:  # a core keeps its A row block while its columns last
        if col_tiles % cores:
            return None
        rounds = math.lcm(rounds, col_tiles // cores * op_sets)
    per_panel = rounds * cores
    if tiles // per_panel < MIN_PANELS:
        return None
    return PanelPlan(per_panel, tiles // per_panel, KEEP_PANELS, tiles % per_panel)


__all__ = ["KEEP_PANELS", "MIN_PANELS", "PARTIAL_COMMANDS", "PanelPlan", "TilePanels", "panel_plan"]
