"""Choosing a vector kernel's tile: which dims to split, how long, and how evenly.

A tile is a box of the kernel's iteration space: some dims 1, one dim cut to a length,
the rest whole (reduced axes always whole). Which dims are cut first decides what
each DMA command moves: splitting the leading dims of the space suits tensors laid out
like the space, but a permute's input is laid out in another order, and cutting the
space's leading dim there can select single elements of the input's innermost dim
(``v.permute(2, 0, 1)`` on ``[128, 128, 8]`` read one element in 8 per tile, 16x the
bytes in bf16). When the leading order's DMA commands are wasteful, :func:`plan_tile`
also tries splitting in each permuted input's own order and keeps the clearly cheaper
tile. Each candidate is evened over the cores (:func:`balanced`); a tile that ends
mid-row of a merged view is a few strided boxes (:func:`compiler.views.place_box`),
charged as such by :class:`DmaCost`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from archsim.config.model import NpuConfig
from archsim.dram import box_layout
from archsim.errors import CapacityError
from compiler.emit import DramView
from compiler.ir.operands import DramRef, DramTensor, Slice
from compiler.views import place_box

Box = tuple[tuple[int, int], ...]
Shape = tuple[int, ...]

MIN_TILE_BYTES = 32 * 1024

WASTEFUL = 1.25
"""Other split orders are tried only when the leading one's DMA commands cost more than
this many times one dense command per tile and tensor: a leading order that moves
whole runs keeps its schedule (and its tensors' on-chip residency, which needs each
transfer to be one contiguous run)."""

CLEARLY_CHEAPER = 0.9
"""Another split order replaces the leading one only below this share of its DMA cost
(a near tie keeps the schedule every other kernel has)."""

SAMPLED_TILES = 64
"""Tiles whose DMA commands the cost model looks at (evenly spaced; scaled up)."""

BALANCED_TILES = 4096
"""Above this many tiles the last round's imbalance is noise: tiles are not evened."""


@dataclass(frozen=True)
class Access:
    """A DRAM tensor a vector kernel moves: its view, its box for a box of the space,
    and the view's dim that a dim of the space runs along (None: broadcast)."""

    view: DramView
    box: Callable[[Box], Box]
    dim: Callable[[int], int | None]


@dataclass(frozen=True)
class DmaCost:
    """What DMA costs a vector kernel, in cycles: a command's bytes as DRAM charges them
    (runs rounded up to the access granularity) at the DRAM's sustained rate plus its
    setup and DRAM latency spread over the engines that run side by side
    (:meth:`cycles`); for evening tiles (:func:`balanced`), a core's share of the
    bandwidth and a tile's latency."""

    bytes_per_cycle: float
    granule_bytes: int
    command_cycles: float
    core_bytes_per_cycle: float
    """A core's share of the DRAM when every core streams, or its engines' peak."""
    tile_cycles: float
    """A DMA command's setup and DRAM latency: with two buffer sets a tile's load waits
    for the store of the tile before it in the same buffers, so every tile of a core
    adds a latency to its chain."""

    @classmethod
    def of(cls, config: NpuConfig, cores: int) -> "DmaCost":
        dma = config.core.dma
        parallel = max(1, dma.engines * cores)
        latency = dma.setup_latency_cycles + config.dram.latency_cycles
        dram = config.dram_sustained_bytes_per_cycle
        return cls(dram, config.dram.access_granularity_bytes, latency / parallel,
                   min(dram / max(1, cores), dma.bandwidth_bytes_per_cycle * dma.engines),
                   latency)

    def cycles(self, view: DramView, box: Box) -> float:
        tensor = DramTensor(view.tensor, view.base_shape, view.dtype)
        total = 0.0
        for piece in place_box(view.shape, view.base_shape, box):
            ref = DramRef(view.tensor, tuple(Slice(lo, hi) for lo, hi in piece.base_box))
            count, run = box_layout(ref, tensor)
            runs_bytes = -(-run * view.dtype.itemsize // self.granule_bytes) * self.granule_bytes
            total += self.command_cycles + (count // run) * runs_bytes / self.bytes_per_cycle
        return total


def choose_tile(space: Shape, whole: set[int], budget: int, bytes_of: Callable[[Shape], int],
                what: str, target: int | None = None,
                order: tuple[int, ...] | None = None) -> Shape:
    """Largest tile within ``budget`` bytes that splits dims in ``order`` (default: the
    leading dims first): dims before the split one are 1, the rest whole; whole axes
    never split.

    ``target`` (bytes) asks for smaller tiles, to spread them over cores; it is a wish,
    not a limit: a tile that cannot be that small is as small as it can be, if that
    fits the budget."""
    if target is not None:
        smallest = bytes_of(tuple(n if d in whole else 1 for d, n in enumerate(space)))
        budget = min(budget, max(target, smallest))
    tile = list(space)
    if bytes_of(tuple(tile)) <= budget:
        return tuple(tile)
    for d in order if order is not None else range(len(space)):
        if d in whole:
            continue
        tile[d] = 1
        if bytes_of(tuple(tile)) <= budget:
            lo, hi = 1, space[d]
            while lo < hi:
                mid = (lo + hi + 1) // 2
                tile[d] = mid
                if bytes_of(tuple(tile)) <= budget:
                    lo = mid
                else:
                    hi = mid - 1
            tile[d] = lo
            return tuple(tile)
    raise CapacityError(f"{what}: even a minimal tile {tile} needs {bytes_of(tuple(tile))} B "
                        f"of SRAM, budget {budget} B (reduced axes {sorted(whole)} of "
                        f"{list(space)} must fit)")


def tiles_of(space: Shape, tile: Shape) -> list[Box]:
    """The tiles covering ``space``; none when it is empty (Phi-3's pass-through half)."""
    if 0 in space:
        return []
    boxes: list[Box] = [()]
    for n, t in zip(space, tile):
        boxes = [b + ((lo, min(lo + t, n)),) for b in boxes for lo in range(0, n, t)]
    return boxes


def split_dim(space: Shape, tile: Shape, order: tuple[int, ...]) -> int | None:
    """The dim :func:`choose_tile` cut to a length: the last of ``order`` that the tile
    does not take whole (those before it are 1, those after it whole)."""
    cut = [d for d in order if tile[d] < space[d]]
    return cut[-1] if cut else None


def balanced(space: Shape, tile: Shape, dim: int | None, cores: int,
             allowed: Callable[[Shape], bool], row_cycles: float, tile_cycles: float
             ) -> Shape:
    """``tile`` with its length along ``dim`` chosen so the cores, dealt tiles in turn,
    finish together: 128 rows in tiles of 31 are 31, 31, 31, 31, 4, the 4-row tail
    running alone after the rest (a tenth of a GELU on ``[1, 128, 3072]`` on tpu-v4);
    in tiles of 32 each of two cores gets two. A core's time is modelled as its rows
    at ``row_cycles`` each plus ``tile_cycles`` per tile. Lengths for up to
    ``2 * cores`` tiles fewer or ``cores`` more than ``tile`` gives are tried (those
    ``allowed``, and giving the busiest core two tiles if it had two or more: one tile
    a core cannot overlap its loads with its compute); the busiest core's time decides,
    then how short the last tile falls, then the count nearest the original one."""
    if dim is None or cores <= 1:
        return tile
    n, t = space[dim], tile[dim]
    count = -(-n // t)
    outer = math.prod(-(-space[d] // tile[d]) for d in range(dim))
    inner = math.prod(-(-space[d] // tile[d]) for d in range(dim + 1, len(space)))
    if outer * count * inner > BALANCED_TILES:
        return tile

    def shares(length: int) -> tuple[list[int], list[int], list[int]]:
        """Per core: rows, tiles; and the tiles' lengths along ``dim``."""
        pieces = -(-n // length)
        lengths = [length] * (pieces - 1) + [n - length * (pieces - 1)]
        rows, tiles = [0] * cores, [0] * cores
        i = 0
        for _ in range(outer):
            for size in lengths:
                for _ in range(inner):
                    rows[i % cores] += size
                    tiles[i % cores] += 1
                    i += 1
        return rows, tiles, lengths

    pipelined = min(2, max(shares(t)[1]))

    def score(length: int) -> tuple[float, int, int]:
        rows, tiles, lengths = shares(length)
        if max(tiles) < pipelined:
            return math.inf, 0, 0
        busiest = max(r * row_cycles + k * tile_cycles for r, k in zip(rows, tiles))
        return busiest, length - lengths[-1], abs(len(lengths) - count)

    lengths = {-(-n // k) for k in range(max(1, count - 2 * cores), count + cores + 1)}
    options = [t] + [length for length in sorted(lengths - {t})
                     if allowed(tile[:dim] + (length,) + tile[dim + 1:])]
    best = min(options, key=score)
    return tile[:dim] + (best,) + tile[dim + 1:]


def row_cycles(tile: Shape, dim: int | None, accesses: list[Access], cost: DmaCost) -> float:
    """A core's DMA cycles per unit of ``tile``'s length along ``dim``: the bytes the
    accesses running along it move, at a core's share of the bandwidth."""
    if dim is None:
        return 0.0
    box = tuple((0, 1) if d == dim else (0, n) for d, n in enumerate(tile))
    moved = sum(math.prod(hi - lo for lo, hi in a.box(box)) * a.view.dtype.itemsize
                for a in accesses if a.dim(dim) is not None)
    return moved / cost.core_bytes_per_cycle


def _sample(boxes: list[Box], count: int) -> list[Box]:
    if len(boxes) <= count:
        return boxes
    return [boxes[i * len(boxes) // count] for i in range(count)]


def dma_cycles(space: Shape, tile: Shape, accesses: list[Access], cost: DmaCost
               ) -> tuple[float, float]:
    """The DMA commands' cost over all tiles (a sample of them, scaled), and what it
    would be with one dense command per tile and access (each moving just its
    bytes)."""
    boxes = tiles_of(space, tile)
    sample = _sample(boxes, SAMPLED_TILES)
    total = ideal = 0.0
    for box in sample:
        for a in accesses:
            part = a.box(box)
            total += cost.cycles(a.view, part)
            ideal += cost.command_cycles + \
                math.prod(hi - lo for lo, hi in part) * a.view.dtype.itemsize / \
                cost.bytes_per_cycle
    scale = len(boxes) / max(1, len(sample))
    return total * scale, ideal * scale


def access_order(rank: int, access: Access) -> tuple[int, ...]:
    """The space's dims outermost first as ``access``'s tensor lays them out (dims it
    is broadcast along last: splitting those would load it again per tile)."""
    return tuple(sorted(range(rank), key=lambda d: (access.dim(d) is None, access.dim(d) or 0,
                                                    d)))


def plan_tile(space: Shape, whole: set[int], budget: int, bytes_of: Callable[[Shape], int],
              what: str, target: int | None, cores: int, accesses: list[Access],
              cost: DmaCost) -> Shape:
    """A vector kernel's tile: for the leading split order and each order in which an
    access lays out the space (a permute's input), the largest tile within ``budget``
    (near ``target``), evened over ``cores``; the
    leading order's unless its DMA commands are wasteful (:data:`WASTEFUL`) and
    another's cost clearly less."""
    leading = tuple(range(len(space)))
    orders = [leading]
    for access in accesses:
        order = access_order(len(space), access)
        if order not in orders:
            orders.append(order)

    def allowed(t: Shape, chosen: Shape) -> bool:
        """A longer tile than the chosen one must fit the budget; a shorter one must
        keep :data:`MIN_TILE_BYTES` (tiny work is not worth spreading)."""
        size = bytes_of(t)
        return size <= budget if size > bytes_of(chosen) else size >= MIN_TILE_BYTES

    def planned(order: tuple[int, ...]) -> Shape:
        chosen = choose_tile(space, whole, budget, bytes_of, what, target, order)
        dim = split_dim(space, chosen, order)
        return balanced(space, chosen, dim, cores, lambda t: allowed(t, chosen),
                        row_cycles(chosen, dim, accesses, cost), cost.tile_cycles)

    first = planned(leading)
    if len(orders) == 1:
        return first
    cycles, ideal = dma_cycles(space, first, accesses, cost)
    if cycles <= WASTEFUL * ideal:
        return first
    best, best_cycles = first, CLEARLY_CHEAPER * cycles
    for order in orders[1:]:
        tile = planned(order)
        other, _ = dma_cycles(space, tile, accesses, cost)
        if other < best_cycles:
            best, best_cycles = tile, other
    return best


@dataclass(frozen=True)
class WideRuns:
    """A tile whose kept dim is cut long enough for whole DRAM runs, and the buffer
    sets it runs with (one when it needs the whole scratchpad: then no core has more
    than one tile, so a second set would have nothing to overlap)."""

    tile: Shape
    sets: int
    dim: int


def wide_runs(space: Shape, tile: Shape, sets: int, capacity: int,
              bytes_of: Callable[[Shape], int], cores: int, accesses: list[Access],
              cost: DmaCost, planned: tuple[float, float] | None = None
              ) -> WideRuns | None:
    """A wider tile than ``tile`` (the planned one) along the dim it cuts, when that
    cut leaves DRAM runs shorter than the access granularity and a wider one's DMA
    commands cost clearly less (:data:`CLEARLY_CHEAPER`); None otherwise.

    A reduction over leading axes keeps them whole in a tile, so the planned tile cuts
    the kept innermost dim: ``vector_norm(v, dim=(0, 1))`` of ``[768, 48, 128]`` bf16
    on atom took ``[768, 48, 8]`` tiles, 16-byte runs that DRAM charges as 32. Lengths
    that are multiples of the granule (in the narrowest access's elements) are tried,
    from the shortest up, that fit a buffer set's share of ``capacity`` bytes (``sets``
    of them) or, one tile a core at most, all of it; never fewer tiles than the cores
    the planned tile keeps busy. ``planned``: :func:`dma_cycles` of ``tile``, when the
    caller has it."""
    cycles, ideal = planned or dma_cycles(space, tile, accesses, cost)
    if cycles <= WASTEFUL * ideal:
        return None
    dim = split_dim(space, tile, tuple(range(len(space))))
    if dim is None:
        return None
    budget = capacity // sets
    busy = min(cores, len(tiles_of(space, tile)))
    itemsize = min(a.view.dtype.itemsize for a in accesses)
    unit = max(1, cost.granule_bytes // itemsize)
    best: WideRuns | None = None
    best_cycles = CLEARLY_CHEAPER * cycles
    for length in range(-(-(tile[dim] + 1) // unit) * unit, space[dim] + unit, unit):
        wide = tile[:dim] + (min(length, space[dim]),) + tile[dim + 1:]
        count = len(tiles_of(space, wide))
        size = bytes_of(wide)
        if count < busy or size > capacity:
            break
        if size > budget and count > cores:
            continue
        other, _ = dma_cycles(space, wide, accesses, cost)
        if other < best_cycles:
            best = WideRuns(wide, sets if size <= budget else 1, dim)
            best_cycles = CLEARLY_CHEAPER * other
    return best


def granule_aligned(space: Shape, tile: Shape, accesses: list[Access], cost: DmaCost
                    ) -> Shape:
    """``tile`` with its cut of the innermost dim shortened to a whole number of DRAM
    granules, when that makes its DMA commands cost less: the largest tile that fits
    may end mid-granule (``[192, 48, 22]`` f32 tiles of a norm over dims 0 and 1 on
    tpu-v4, 88-byte runs charged 96, where 16 columns are 64 bytes)."""
    dim = split_dim(space, tile, tuple(range(len(space))))
    if dim is None or any(n > 1 for n in space[dim + 1:]) or not accesses:
        return tile
    unit = max(1, cost.granule_bytes // min(a.view.dtype.itemsize for a in accesses))
    if tile[dim] <= unit or tile[dim] % unit == 0:
        return tile
    shorter = tile[:dim] + (tile[dim] // unit * unit,) + tile[dim + 1:]
    cycles, _ = dma_cycles(space, tile, accesses, cost)
    return shorter if dma_cycles(space, shorter, accesses, cost)[0] < cycles else tile
