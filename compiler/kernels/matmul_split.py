"""A one-row-block matmul (a decode GEMV) balanced over every array: its last round's
columns dealt evenly, the columns left over split by K.

The matmul kernel deals output tiles of ``nt`` columns per array to the cores in
rounds. When the columns do not divide evenly (Llama-2-7B's gate projection on
``tpu-v4``: 86 column tiles of 128 over 8 arrays), the last round leaves arrays idle:
some arrays shift 11 column tiles of weights in, others 10 or fewer, and the kernel
takes the longest. Weight-stationary arrays at M = 1 are bound by shifting weights in
(a 128-row tile a fold, whatever the batch), so what counts is the column tiles times
the k folds each array gets.

The last round is dealt again: its column units (``unit`` columns: an array's width)
go to the cores as evenly as whole units allow; on each core each array takes the same
number of whole units as a plain tile (all of K), and the units left over (fewer than
the arrays) are *split by K*: every array of the core multiplies all of them over its
own share of K into an accumulator of its own, and the vector unit adds the partial
sums before the epilogue. Gate on ``tpu-v4``: 43 units a core, 10 a array whole and 3
split four ways (8 of their 32 k folds each): 10 x 32 + 3 x 8 = 344 folds an array,
86 x 32 / 8 exactly, instead of 352 on the busiest.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from archsim.config.model import NpuConfig
from archsim.matrix import steady_cycles
from compiler.cost import MatmulTiling, load_bandwidth
from compiler.ir.dtypes import DType
from compiler.kernels.matmul_dequant import DequantWeights


@dataclass(frozen=True)
class Lane:
    """What one array of a tile multiplies: columns ``cols`` over K range ``ks``."""

    cols: tuple[int, int]
    ks: tuple[int, int]

    def step(self, s: int, kt: int) -> tuple[int, int] | None:
        """The K range of this lane's k-step ``s`` (None: it has no step ``s``)."""
        k0 = self.ks[0] + s * kt
        return (k0, min(k0 + kt, self.ks[1])) if k0 < self.ks[1] else None

    def folds(self, unit: int, k_unit: int) -> int:
        """Column units times k units: the weight tiles the array shifts in."""
        return -(-(self.cols[1] - self.cols[0]) // unit) * \
            -(-(self.ks[1] - self.ks[0]) // k_unit)


@dataclass(frozen=True)
class TailTile:
    """A tile of the rebalanced last round on ``core``. ``split``: its lanes share the
    columns and split K; their partial sums are added before the epilogue."""

    core: int
    lanes: tuple[Lane, ...]
    split: bool
    kt: int
    """Its k-step: the tiling's for a plain tile; for a split one as long as the B
    buffer holds at its width, so a step's loads are about a plain step's and stay
    hidden under the multiplies before it."""

    @property
    def steps(self) -> int:
        """Its k-steps: the longest lane's."""
        return max(-(-(lane.ks[1] - lane.ks[0]) // self.kt) for lane in self.lanes)

    def folds(self, unit: int, k_unit: int) -> int:
        """The weight tiles its busiest array shifts in."""
        return max(lane.folds(unit, k_unit) for lane in self.lanes)


def balanced_tail(first: int, n: int, k: int, cores: int, arrays: int, tile: tuple[int, int],
                  unit: int, k_unit: int, fits: Callable[[int, int], bool]) -> list[TailTile]:
    """Columns ``first .. n`` (all of K) dealt to ``cores`` x ``arrays`` arrays: units of
    ``unit`` columns evenly over the cores (the first cores one more), whole units
    evenly over a core's arrays as a plain tile of the tiling's ``tile`` (``kt, nt``),
    the rest split by K in chunks of at most ``nt`` columns, each array a share of K in
    whole ``k_unit`` rows (a fold's), in k-steps of equal whole ``k_unit``s as long as
    ``fits(rows, columns)`` (an array's buffers hold them)."""
    kt, nt = tile
    units = -(-(n - first) // unit)
    tiles: list[TailTile] = []
    start = 0  # in units from ``first``
    k_units = -(-k // k_unit)
    parts = min(arrays, k_units)
    share = -(-k_units // parts) * k_unit
    k_parts = [(lo, min(lo + share, k)) for lo in range(0, k, share)]

    def cols(lo: int, hi: int) -> tuple[int, int]:
        return (first + lo * unit, min(first + hi * unit, n))

    def split_step(width: int) -> int:
        longest = k_unit  # the longest step that fits, at most the share
        while longest < share and fits(longest + k_unit, width):
            longest += k_unit
        steps = -(-share // longest)
        return -(-share // steps // k_unit) * k_unit if steps > 1 else share

    for core in range(cores):
        own = units // cores + (core < units % cores)
        whole, rest = divmod(own, arrays)
        if whole:
            tiles.append(TailTile(core, tuple(
                Lane(cols(start + j * whole, start + (j + 1) * whole), (0, k))
                for j in range(arrays)), False, kt))
        lo = start + whole * arrays
        chunk = max(1, nt // unit)
        for c0 in range(lo, lo + rest, chunk):
            c1 = min(c0 + chunk, lo + rest)
            width = cols(c0, c1)[1] - cols(c0, c1)[0]
            tiles.append(TailTile(core, tuple(Lane(cols(c0, c1), ks) for ks in k_parts),
                                  True, split_step(width)))
        start += own
    return tiles


Tile = tuple[int, int, int]
"""(batch index, first row, first column) of a plain output tile."""


def rebalanced(tiles: list[Tile], cores: int, n: int, k: int, tile: tuple[int, int],
               arrays: int, unit: int, k_unit: int, fits: Callable[[int, int], bool],
               worth: Callable[[int, int], bool]) -> tuple[list[Tile], list[TailTile]]:
    """The plain tiles of a one-row-block matmul (dealt to the cores in turn, ``tile``
    ``(kt, nt)`` an array) without their last round, and that round dealt again by
    :func:`balanced_tail`, when ``worth(folds saved, tail tiles on a core)`` for the
    weight tiles its busiest array no longer shifts in; else ``tiles`` as they are and
    no tail."""
    nt = tile[1]
    if not tiles or cores < 1:
        return tiles, []
    last = tiles[(len(tiles) - 1) // cores * cores:]
    first = last[0][2]
    k_units = -(-k // k_unit)
    widths = [min(n0 + (j + 1) * nt, n) - (n0 + j * nt) for _, _, n0 in last
              for j in range(arrays) if n0 + j * nt < n]
    before = max(-(-w // unit) for w in widths) * k_units
    tail = balanced_tail(first, n, k, cores, arrays, tile, unit, k_unit, fits)
    busiest = max(sum(t.folds(unit, k_unit) for t in tail if t.core == c)
                  for c in range(cores))
    narrow = all(lane.cols[1] - lane.cols[0] <= nt for t in tail for lane in t.lanes)
    per_core = max(sum(t.core == c for t in tail) for c in range(cores))
    if busiest >= before or not narrow or not worth(before - busiest, per_core):
        return tiles, []
    return tiles[:len(tiles) - len(last)], tail


def column_unit(config: NpuConfig, dq: DequantWeights | None = None) -> int:
    """The columns a rebalanced round deals whole: an array's width, in whole blocks of
    packed weights."""
    cols = config.core.matrix.cols
    return cols if dq is None else math.lcm(cols, dq.n_unit)


def rebalanced_for(config: NpuConfig, tiles: list[Tile], cores: int, m: int, n: int,
                   k: int, tiling: MatmulTiling, a_dtype: DType,
                   dq: DequantWeights | None = None) -> tuple[list[Tile], list[TailTile]]:
    """An ``m``-row matmul's tiles (one row block) without their last round, and that
    round dealt evenly over every array (:func:`rebalanced`), if the array cycles that
    saves on the busiest core outweigh loading A again for each tile of the new round
    (all of K each; a plain tile of a resident A row block loads none): a decode GEMV's
    A is one row, a prefill's a block as large as its weights (Llama-2-7B's TTFT on
    ``tpu-v4`` rose 1.6% with every prefill projection rebalanced).

    Weights dequantized on the way in (``dq``) split in whole blocks of packed columns,
    and a split step's groups' scales must fit the array's scales buffer too."""
    matrix = config.core.matrix
    kt, nt = tiling.kt, tiling.nt
    k_unit = matrix.rows * matrix.rates.of(a_dtype.rate_name)  # K rows of a fold
    unit = column_unit(config, dq)

    def fits(rows: int, width: int) -> bool:  # an array's B buffer (and its widened copy)
        return rows * width <= kt * nt and (
            dq is None or dq.max_groups(rows) * width <= dq.max_groups(kt) * nt)

    def worth(folds: int, tail_tiles: int) -> bool:
        fold = steady_cycles(m, k_unit, matrix.cols, matrix, a_dtype)
        a_bytes = tail_tiles * m * k * a_dtype.itemsize
        return folds * fold > a_bytes / load_bandwidth(config)
    return rebalanced(tiles, cores, n, k, (kt, nt), tiling.arrays, unit, k_unit, fits, worth)


def full_width(config: NpuConfig, tiling: MatmulTiling, n: int, arrays: int,
               dq: DequantWeights | None = None) -> MatmulTiling | None:
    """For a matmul of at most one array's ``n`` columns, a tiling whose every array
    holds all of them (an array wide where ``tiling`` spreads them narrower) over all of
    the core's ``arrays``, so the rebalanced round splits it by K over them (None where
    ``tiling`` is that already, or there is one array). At a few rows a fold of a
    weight-stationary array takes its ``rows`` cycles to shift the weights in however
    few columns it holds: spread, Llama-2-70B's K projection on 8 tpu-v4 chips (8,192 x
    128) gave each of 4 arrays 32 columns and took 10,321 cycles (bf16), 4 times the
    folds of the split. A tiling that holds the columns already keeps its width (wider
    buffers would only lengthen the split's k steps past what the multiplies hide)."""
    unit = column_unit(config, dq)
    if arrays < 2 or n > unit:
        return None
    nt = tiling.nt if tiling.nt >= n else unit
    if (nt, tiling.arrays) == (tiling.nt, arrays):
        return None
    return dataclasses.replace(tiling, nt=nt, arrays=arrays)


__all__ = ["Lane", "TailTile", "Tile", "balanced_tail", "column_unit", "full_width",
           "rebalanced", "rebalanced_for"]
