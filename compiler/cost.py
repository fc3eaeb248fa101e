"""A cheap analytic cost model used to choose tilings.

:class:`Cost` is a small value type that adds up: busy cycles per engine kind and DRAM
bytes. ``estimate`` turns it into cycles assuming engines overlap (the pipelined
schedule's goal), bounded below by DRAM bandwidth.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, replace

from archsim.config.model import NpuConfig
from archsim.errors import CapacityError
from archsim.matrix import back_to_back_saving, steady_cycles
from compiler.emit import ALIGN_BYTES
from compiler.ir.dtypes import DType
from compiler.kernels.packed_runs import packed_commands


DRAM_EFFICIENCY = 0.85
"""Fraction of DRAM peak a schedule sustains once latencies and contention bite; a tiling
that needs more is DRAM-bound."""


@dataclass(frozen=True)
class Cost:
    mxu_cycles: float = 0.0
    vpu_cycles: float = 0.0
    dma_cycles: float = 0.0
    dram_bytes: float = 0.0
    serial_cycles: float = 0.0
    """Cycles nothing overlaps (pipeline fill, epilogue stalls)."""

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.mxu_cycles + other.mxu_cycles, self.vpu_cycles + other.vpu_cycles,
                    self.dma_cycles + other.dma_cycles, self.dram_bytes + other.dram_bytes,
                    self.serial_cycles + other.serial_cycles)

    def scaled(self, factor: float) -> "Cost":
        return Cost(self.mxu_cycles * factor, self.vpu_cycles * factor,
                    self.dma_cycles * factor, self.dram_bytes * factor,
                    self.serial_cycles * factor)

    def estimate(self, config: NpuConfig) -> float:
        dram = self.dram_bytes / (config.dram_sustained_bytes_per_cycle * DRAM_EFFICIENCY)
        return max(self.mxu_cycles, self.vpu_cycles, self.dma_cycles, dram) + \
            self.serial_cycles


STAGING_GAIN = 0.10
"""A tiling that stages A in shared SRAM is taken only when its estimate beats the best
unstaged one by this fraction: the extra hop (task DMA, then a copy per core) and the
rounds' lockstep change how a kernel overlaps its neighbours, which the estimate of one
kernel does not see (Llama-2-7B prefill on tpu-v4 was 6.8% slower with stagings
estimated within a few percent of the unstaged tilings)."""

COMMAND_TOLERANCE = 0.05
"""Among tilings within this fraction of the fastest estimate, take the one issuing the
fewest commands (cheaper to compile and simulate, less per-command overhead)."""


@dataclass(frozen=True)
class MatmulTiling:
    """Output tile ``mt x (nt * arrays)`` accumulated over ``kt`` steps."""

    mt: int
    kt: int
    nt: int
    """Columns per systolic array."""
    arrays: int
    acc_sets: int
    cost: Cost
    op_sets: int = 2
    """Operand buffer sets: loads run ``op_sets - 1`` k-steps ahead of the arrays."""
    a_resident: bool = False
    """A core keeps the A row block (every k-step's tile) across the tiles of its
    columns, loading it once per row block instead of once per tile (``op_sets`` row
    blocks rotate, as operand sets do)."""
    k_steps: int = 1
    a_staged: bool = False
    """The cores multiplying the same A row block at the same time share its tiles: the
    task DMA loads each once from DRAM into shared SRAM and every core copies it into
    its scratchpad over the NoC (:mod:`compiler.kernels.matmul_staging`)."""
    b_staged: bool = False
    """B's tiles are kept in shared SRAM after the first row block loads them, and the
    later row blocks copy them from there (:class:`compiler.kernels.matmul_staging.StagedB`):
    B crosses DRAM once (:func:`with_staged_weights`)."""

    @property
    def n_tile(self) -> int:
        return self.nt * self.arrays


def tile_sizes(size: int, unit: int) -> list[int]:
    """``size`` and the powers of two times ``unit`` below it."""
    out = {size}
    t = unit
    while t < size:
        out.add(t)
        t *= 2
    return sorted(out)


def split_sizes(size: int, unit: int, parts: int) -> list[int]:
    """:func:`tile_sizes` plus the sizes that cut ``size`` into 2..``parts`` near-equal
    tiles, rounded up to ``unit`` and, when narrower than ``unit``, also as they are: a
    weight-streaming matmul whose columns fit one power-of-two tile still spreads evenly
    over the cores (768 columns on 2 cores x 4 arrays: 96 an array)."""
    out = set(tile_sizes(size, unit))
    for d in range(2, parts + 1):
        share = -(-size // d)
        out.add(min(size, -(-share // unit) * unit))
        if share < unit:  # narrower than an array: rounding up would leave a core idle
            out.add(share)
    return sorted(out)


def _packed_steps(kt: int, k: int, nt: int, n_unit: int) -> list[list]:
    """The kernel's DMA commands of the first two k steps of one array's packed tile
    (:func:`compiler.kernels.packed_runs.packed_commands`), ``n_unit`` columns a block,
    each block ``n_unit`` rows of the stored ``[N, K / 2]``."""
    kt, half = min(kt, k), n_unit // 2
    blocks = (0, -(-nt // n_unit))
    return [packed_commands(blocks, (k0, min(k0 + kt, k)), k, half, k * half // n_unit)
            for k0 in range(0, min(k, 2 * kt), kt)]


def b_runs(kt: int, k: int, nt: int, n_unit: int) -> int:
    """DMA commands of one array's B tile: one, or for packed int4 weights (``n_unit`` >
    1: blocks of ``n_unit`` columns, each ``n_unit`` rows of the stored ``[N, K / 2]``)
    the kernel's commands of its busier of the first two k steps (a command per stored
    row a block's step meets, strided over the tile's blocks, or a run per block,
    whichever is fewer; one for all blocks when the tile spans all of ``k``), and one
    for the scales."""
    if n_unit == 1:
        return 1
    return 1 + max(len(step) for step in _packed_steps(kt, k, nt, n_unit))


def b_strided(kt: int, k: int, nt: int, n_unit: int) -> bool:
    """Whether an array's packed tile loads in commands strided over its blocks. The
    estimate counts such a tile's commands on one engine's in-flight slots, as the
    kernel issued them before the emitter tracked strided writes run by run
    (:data:`~compiler.ir.operands.EXACT_RUNS`); the kernel now spreads them over the
    load engines, but counted as spread, Llama-2-7B's 11008 x 4096 int4 GEMV on tpu-v4
    takes 512-row k steps that simulate 18% slower than the 1024-row steps this
    count picks (a k step's own latencies the estimate lacks): kept as the ranking."""
    return n_unit > 1 and any(step[0].strides is not None
                              for step in _packed_steps(kt, k, nt, n_unit))


def staging_bytes(sets: int, cores: int, sharing: int, a_bytes: int) -> int:
    """Shared SRAM a staged matmul holds: ``sets`` buffer sets of one A tile per distinct
    row block a round of ``cores`` tiles meets (one more when a round straddles two
    row blocks unevenly)."""
    blocks = min(cores, -(-cores // sharing) + (cores % sharing != 0))
    return sets * blocks * a_bytes


def vector_rate(config: NpuConfig, item: int) -> float:
    """Elements per cycle the vector engine streams through a copy-like op (read and
    write ``item``-byte elements): its lanes, or its scratchpad bandwidth if lower."""
    vector = config.core.vector
    bandwidth = vector.sram_bandwidth_bytes_per_cycle
    return min(vector.lanes, bandwidth / (2 * item)) if bandwidth else vector.lanes


def loads_in_flight(config: NpuConfig) -> int:
    """Transfers a core's loads keep in flight: its DMA engines but the one that stores,
    each with its outstanding transfers."""
    return max(1, config.core.dma.engines - 1) * config.core.dma.outstanding


def load_bandwidth(config: NpuConfig) -> float:
    """Bytes per cycle one core's loads can reach."""
    engines = max(1, config.core.dma.engines - 1)
    return min(engines * config.core.dma.bandwidth_bytes_per_cycle,
               config.noc.link_bandwidth_bytes_per_cycle,
               config.core.scratchpad.port_bandwidth_bytes_per_cycle)


@functools.lru_cache(maxsize=4096)
def choose_matmul_tiling(config: NpuConfig, batch: int, m: int, k: int, n: int, dtype: DType,
                         out_dtype: DType, cores: int, arrays: int,
                         op_sets: int, epilogue_bytes: int, capacity: int,
                         b_dtype: DType | None = None, b_item_bytes: float = 0.0,
                         n_unit: int = 1, widen: float = 0.0) -> MatmulTiling:
    """The tiling with the lowest estimated time that fits the scratchpad.

    ``epilogue_bytes`` is SRAM per output element the epilogue needs besides the
    accumulator; ``b_dtype``: B's dtype when it differs (weight-only int8 weights);
    ``b_item_bytes``: bytes per B element when B is packed int4 weights (with their
    scales); ``n_unit``: columns an array's tile must be a multiple of (unless it is all
    of ``n``): the packed weights' blocks, each its own DRAM run unless a tile spans all
    of ``k`` (:func:`b_runs`); ``widen``: vector cycles a lane spends on each weight when
    the vector unit dequantizes each B tile into A's dtype before its multiply
    (``core.matrix.dequant: vector``; 0: the arrays' input path does, or B is plain):
    the copies take scratchpad, and a k step waits for its tiles' dequantization."""
    matrix = config.core.matrix
    item = dtype.itemsize
    b_item = b_item_bytes or (b_dtype or dtype).itemsize
    acc_item = 4
    dma_bw = config.core.dma.bandwidth_bytes_per_cycle
    setup = config.core.dma.setup_latency_cycles + config.dram.latency_cycles + \
        config.noc.latency_cycles
    load_engines = max(1, config.core.dma.engines - 1)
    in_flight = loads_in_flight(config)
    best: MatmulTiling | None = None
    options: list[tuple[float, int, MatmulTiling]] = []
    per_array_n = -(-n // arrays)
    widths = sorted({min(n, -(-nt // n_unit) * n_unit)  # whole units (packed blocks)
                     for nt in split_sizes(per_array_n, matrix.cols, cores)})
    for mt, kt, nt in itertools.product(tile_sizes(m, matrix.rows), tile_sizes(k, matrix.rows),
                                        widths):
        used = min(arrays, -(-n // nt))
        a_bytes, b_bytes = mt * kt * item, kt * nt * b_item
        steps = -(-k // kt)
        n_tiles = -(-n // (nt * used))
        sharing = min(n_tiles, cores)  # cores of a round multiplying one A row block
        for sets, acc_sets, resident, staged in itertools.product(
                sorted({op_sets, op_sets + (op_sets > 1)}), (2, 1),
                (False, True) if n_tiles > 1 else (False,),
                (False, True) if sharing > 1 and config.shared_sram.size_bytes else (False,)):
            if resident and staged:
                continue
            operands = sets * (used * (b_bytes + (kt * nt * item if widen else 0))
                               + (steps if resident else 1) * a_bytes)
            acc = acc_sets * used * mt * nt * (acc_item + epilogue_bytes)
            if operands + acc + 4096 > capacity or (
                    staged and staging_bytes(sets, cores, sharing, a_bytes) >
                    config.shared_sram.size_bytes):
                continue
            tiles = batch * -(-m // mt) * n_tiles
            per_core = -(-tiles // cores)
            # one core's loads reach its DMA/NoC bandwidth, or their share of DRAM
            load_bw = min(load_bandwidth(config), config.dram_sustained_bytes_per_cycle *
                          DRAM_EFFICIENCY / min(cores, tiles))
            # the k-steps of a tile follow each other on an array
            step_mxu = steady_cycles(min(mt, m), min(kt, k), min(nt, n), matrix, dtype)
            # the vector unit's dequantization of a step's B tiles, one after another
            dequant = used * min(kt, k) * min(nt, n) * widen / config.core.vector.lanes
            step_mxu = max(step_mxu, dequant)
            mxu = steps * step_mxu + back_to_back_saving(matrix)
            # a resident A row block is loaded once per core that meets it, not per tile;
            # a staged one once per round from DRAM (the task DMA), copied to each core
            a_loads = min(n_tiles, cores) / n_tiles if resident else 1.0
            if staged:
                a_loads = 1 / sharing
            load_bytes = steps * (a_bytes * a_loads + used * b_bytes)
            # a step's loads start when the step sets - 1 back is done with its buffers:
            # what the steps in between do not cover of their latency and transfer shows
            # (a step in between takes at least its own transfer: a DMA-bound loop
            # hides the latency behind the transfers, not behind the arrays)
            transfer = (a_bytes + used * b_bytes) / load_bw
            # a load's latency holds one of a core's in-flight transfers: a step of more
            # loads than fit in flight waits for several in a row (counted for packed
            # int4 weights, :func:`b_runs`; the one-run tiles are calibrated as they are)
            extra_runs = used * (b_runs(kt, k, nt, n_unit) - 1)
            # (strided packed tiles: an array's commands on one engine, so the busiest
            # engine's arrays' commands and the A tile's share its slots)
            queued, slots = (used + 1 + extra_runs, in_flight)
            if extra_runs and b_strided(kt, k, nt, n_unit):
                queued = -(-used // load_engines) * b_runs(kt, k, nt, n_unit) + 1
                slots = config.core.dma.outstanding
            latency = setup * (-(-queued // slots) if extra_runs else 1)
            if staged:  # A: DRAM -> shared SRAM, then shared SRAM -> the scratchpad
                copy_bw = load_bandwidth(config)
                transfer = a_bytes / copy_bw + used * b_bytes / load_bw
                latency += config.shared_sram.tdma_setup_latency_cycles + \
                    a_bytes / config.shared_sram.tdma_bandwidth_bytes_per_cycle
            exposed = max(0.0, latency + transfer - (sets - 1) * max(step_mxu, transfer))
            dma = (steps * transfer if staged else load_bytes / load_bw) + steps * exposed
            if extra_runs:  # each command holds an in-flight slot for its latency at
                # least: a step's commands take that long on the slots they share
                dma = max(dma, steps * setup * queued / slots)
            if staged:  # the task DMA loads every round's A tiles for all the cores,
                # one transfer at a time (latency, then the bytes)
                tdma = tiles / sharing * steps * (
                    config.shared_sram.tdma_setup_latency_cycles + config.dram.latency_cycles
                    + a_bytes / config.shared_sram.tdma_bandwidth_bytes_per_cycle)
                dma = max(dma, tdma / per_core)  # per tile, as dma is
            store = used * mt * nt * out_dtype.itemsize / dma_bw + setup
            # the epilogue: a cast or the fused group, a pass over the f32 accumulator
            vpu = used * mt * nt * (1 + (epilogue_bytes > 0)) / vector_rate(config, acc_item)
            stall = store + vpu / max(steps, 1) if acc_sets == 1 else 0
            first_load = (a_bytes + used * b_bytes) / load_bw  # nothing to overlap it with
            cost = Cost(mxu_cycles=per_core * mxu,
                        vpu_cycles=per_core * (vpu + steps * dequant),
                        dma_cycles=per_core * dma,
                        dram_bytes=tiles * (load_bytes + used * mt * nt * out_dtype.itemsize),
                        serial_cycles=per_core * stall + setup + first_load + vpu + store)
            options.append((cost.estimate(config),
                            tiles * steps * (2 + used * (1 + bool(widen)) + staged + extra_runs),
                            MatmulTiling(mt, kt, nt, used, acc_sets, cost, sets, resident,
                                         steps, staged)))
    staged = [o for o in options if o[2].a_staged]
    unstaged = [o for o in options if not o[2].a_staged]
    if staged and unstaged and min(o[0] for o in staged) > \
            (1 - STAGING_GAIN) * min(o[0] for o in unstaged):
        options = unstaged
    if options:
        fastest = min(o[0] for o in options)
        near = [o for o in options if o[0] <= fastest * (1 + COMMAND_TOLERANCE)]
        fewest = min(near, key=lambda o: (o[1], o[0]))
        # a compute-bound matmul's traffic costs no time, but it is DRAM energy and
        # bandwidth its neighbours could use: among the near ties estimated faster than
        # the fewest-commands one and differing from it only in the row block and the
        # k-step (the same columns per array, buffering and A reuse: what the estimate
        # of one kernel does not see, its neighbours' overlap and the pipeline's depth,
        # then stays as it was), the least traffic, then the fewest commands
        def shape(t: MatmulTiling) -> tuple:
            return (t.nt, t.arrays, t.op_sets, t.acc_sets, t.a_resident, t.a_staged)
        pool = [fewest] + [o for o in near
                           if o[0] < fewest[0] and shape(o[2]) == shape(fewest[2])]
        least = min(o[2].cost.dram_bytes for o in pool)
        best = min((o for o in pool if o[2].cost.dram_bytes <= least * (1 + COMMAND_TOLERANCE)),
                   key=lambda o: (o[1], o[0]))[2]
    if best is None:
        raise CapacityError(f"matmul {m}x{k}x{n} ({dtype}): no tiling fits {capacity} B of "
                            f"scratchpad even at {matrix.rows}x{matrix.cols} tiles")
    if batch == 1 and not b_item_bytes:  # not batched, not dequantized
        return with_staged_weights(best, config, m, k, n, b_item)
    return best


def with_staged_weights(tiling: MatmulTiling, config: NpuConfig, m: int, k: int, n: int,
                        b_item: float) -> MatmulTiling:
    """``tiling`` with its weights kept in shared SRAM across row blocks (``b_staged``)
    when there are several row blocks, the shared SRAM holds every B tile and A is not
    staged there, and B is not dequantized on the way in (its scales would need keeping
    too): each later row block copies B over the NoC instead of reading it from DRAM
    again, so DRAM carries B once. The estimate's time is left as it was: the copies
    move at the shared SRAM's rate, about the DRAM share a core loads at on the presets
    that have it, and simulated they cost a prefill 0.5-0.8% (BENCHMARKS.md)."""
    row_blocks = -(-m // tiling.mt)
    column_tiles = -(-n // tiling.n_tile)
    tile = -(-int(tiling.kt * tiling.nt * b_item) // ALIGN_BYTES) * ALIGN_BYTES
    shared = column_tiles * tiling.k_steps * tiling.arrays * tile
    if row_blocks < 2 or tiling.a_staged or shared > config.shared_sram.size_bytes:
        return tiling
    saved = (row_blocks - 1) * k * n * b_item
    return replace(tiling, b_staged=True,
                   cost=replace(tiling.cost, dram_bytes=tiling.cost.dram_bytes - saved))
