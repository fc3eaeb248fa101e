"""The vector unit's share of a decode GEMV whose arrays are bound by taking weights in.

At a few rows a weight-stationary array is bound by shifting its weights in: a fold of
``rows x cols`` weights takes ``rows`` cycles whatever the rows streamed through it
(:func:`archsim.matrix.matmul_cycles`; the same holds for the other dataflows' edges). A
``tpu-v4`` core's four arrays so take 512 weights a cycle, while int4 weights arrive from
HBM at about 1,100 a cycle a core: narrow weights make such a GEMV intake-bound, not
bandwidth-bound. The vector unit is idle meanwhile, and it can multiply-add weights too
(:class:`~compiler.ir.ops.VectorMatMul`: each weight unpacked and widened once, then a
multiply-add a weight and row, a group's scale and zero applied to its sums): at one row
and int4, 1,024 lanes / 3 operations = 341 weights a cycle. So the matmul kernel gives
the vector unit the last columns of such a matmul (packed int4, or one-byte weights the
arrays widen exactly), split by the two units' steady rates so both take about as long
(the vector unit's at most what one DMA engine brings it, :func:`feed_rate`):
the arrays take columns ``0 .. first`` as they would the whole matmul, each core's
vector unit one range of the rest over all of K, in k steps issued among the arrays'
in the order their work is due (:func:`interleaved`). This is the mapping batch-1
weight-only GEMVs get on GPUs, whose GEMV kernels run on the CUDA cores rather than the
tensor cores; here it is taken only where the estimate below says it pays.

The estimate is the tiling's own (:mod:`compiler.cost`): its arrays' cycles shrink to
their columns' share, the vector unit's are its lanes over the operations a weight
(:func:`vector_rate`) after its first weights arrive (:func:`start`), plus the epilogue
work it had anyway, and its loads (DMA commands, DRAM bytes) are counted as they were,
though the share adds a few commands (its own A and scales): a GEMV its loads bind
(bf16 weights; a 2048 x 2048 int4 one on ``tpu-v4``) keeps every column on the arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.config.model import NpuConfig
from archsim.matrix import steady_cycles
from archsim.vector import matvec_ops
from compiler.cost import DRAM_EFFICIENCY, MatmulTiling, load_bandwidth
from compiler.ir.dtypes import DType
from compiler.kernels.common import TileSteps
from compiler.kernels.matmul_dequant import DequantWeights

GAIN = 0.9
"""A compiler choice, not a hardware fact: the share is taken when its estimate is at
most this fraction of the arrays' alone (the share's own k steps and epilogue cost a
little that the rates leave out)."""


@dataclass(frozen=True)
class VectorShare:
    """The columns of a matmul the vector units take: ``first ..`` the end, as
    ``columns[c]`` on core ``c``."""

    first: int
    columns: tuple[tuple[int, int], ...]
    kt: int
    """Its k step: the arrays' (halving it, for an earlier start and finer interleaving,
    made a 4096 x 4096 int4 GEMV on ``tpu-v4`` 27% slower: each step's loads are issued
    fewer cycles ahead of it in the DMA queues)."""
    step_cycles: float
    """The vector unit's estimated cycles a k step."""

    @property
    def width(self) -> int:
        """The widest core's columns (its buffers' width)."""
        return max(c1 - c0 for c0, c1 in self.columns)


def array_rate(config: NpuConfig, m: int, tile: tuple[int, int], arrays: int,
               a_dtype: DType) -> float:
    """Weights a cycle one core's ``arrays`` arrays multiply into ``m`` rows, a ``tile``
    ``(kt, nt)`` a command back to back (their fill hidden, as in a k loop)."""
    matrix = config.core.matrix
    kt, nt = tile
    return arrays * kt * nt / steady_cycles(m, kt, nt, matrix, a_dtype)


def vector_rate(config: NpuConfig, m: int, a_dtype: DType, b_dtype: DType,
                dq: DequantWeights | None) -> float:
    """Weights a cycle one core's vector unit multiplies into ``m`` rows: its lanes over
    the element operations a weight takes (:func:`archsim.vector.matvec_ops`), at most
    its scratchpad bandwidth over the bytes a weight (with its scales)."""
    vector = config.core.vector
    if dq is not None:
        unpack, group, item = dq.unpack_ops, dq.spec.group, dq.item_bytes
    else:  # weight-only int8 widened, or weights in a's dtype
        unpack, group, item = int(b_dtype is not a_dtype), 0, float(b_dtype.itemsize)
    k = group or 1  # a group's worth of k rows, one column: its operations a weight
    per_weight = matvec_ops(m, k, 1, unpack, 1 if group else 0) / k
    rate = vector.lanes / (per_weight * vector.costs.elementwise)
    if vector.sram_bandwidth_bytes_per_cycle:
        rate = min(rate, vector.sram_bandwidth_bytes_per_cycle / item)
    return rate


def feed_rate(config: NpuConfig, item: float) -> float:
    """Packed weights a cycle one DMA engine brings: the most the vector share's rate
    counts. Without a bound, ``tpu-v4`` with twice its lanes gave the vector units 57% of
    a 4096 x 4096 int4 GEMV's columns, whose packed weights then blocked the arrays' loads
    queued behind them (33% slower than with its own 1,024 lanes). Its commands go to the
    load engines in turn since the emitter tracks strided tiles run by run
    (:meth:`DequantWeights.load_packed`), yet the bound stays one engine's: at all three
    load engines' rate that GEMV takes 12,762 cycles instead of 14,218, but the
    11,008-wide ones lose their share (48,157 and 47,688 instead of 33,436 and 36,913)."""
    return config.core.dma.bandwidth_bytes_per_cycle / item


def start(config: NpuConfig, kt: int, width: int, item: float) -> float:
    """Cycles before a core's vector share can start: its first k step's weights
    (``kt`` rows of ``width`` columns at ``item`` bytes) requested and loaded, behind
    nothing (the arrays' first loads are issued before them, so this is the least)."""
    return (config.dram.latency_cycles + config.core.dma.setup_latency_cycles
            + kt * width * item / load_bandwidth(config))


def plan_share(config: NpuConfig, cores: int, m: int, n: int, k: int, tiling: MatmulTiling,
               a_dtype: DType, b_dtype: DType, dq: DequantWeights | None
               ) -> VectorShare | None:
    """The vector units' columns of an ``m x k x n`` one-row-block matmul whose arrays'
    ``tiling`` the cost model chose, or None where the arrays alone are as fast.

    The tiling's estimate (:class:`compiler.cost.Cost`) splits into the arrays' cycles
    and the loads' (DMA commands and DRAM bytes): the share moves the same bytes, so
    those stay; it takes columns off the arrays, as many as the vector unit multiplies
    in the arrays' time for the rest, and adds the wait for its first weights
    (:func:`start`). The columns are split by the arrays' steady rate
    (:func:`array_rate`), not by the estimate's cycles, which count fills the k loop
    mostly hides: split by those, the vector unit took more columns and Llama-2-7B's
    int4 TPOT on ``tpu-v4`` was 1.5% longer (4.66 ms against 4.59)."""
    cost = tiling.cost
    arrays = array_rate(config, m, (tiling.kt, tiling.nt), tiling.arrays, a_dtype)
    vector = vector_rate(config, m, a_dtype, b_dtype, dq)
    if dq is not None and dq.packed:
        vector = min(vector, feed_rate(config, dq.item_bytes))
    unit = dq.n_unit if dq is not None and dq.packed else 16
    per_core = int(vector / (arrays + vector) * n / cores) // unit * unit
    if per_core < unit:
        return None
    first = n - per_core * cores
    loads = max(cost.dma_cycles,
                cost.dram_bytes / (config.dram_sustained_bytes_per_cycle * DRAM_EFFICIENCY))
    item = dq.item_bytes if dq is not None else float(b_dtype.itemsize)
    after = max(cost.mxu_cycles * first / n,  # the vector unit's epilogue work stays
                per_core * k / vector + start(config, tiling.kt, per_core, item)
                + cost.vpu_cycles, loads) + cost.serial_cycles
    if after > GAIN * cost.estimate(config):
        return None
    return VectorShare(first, tuple((first + c * per_core, first + (c + 1) * per_core)
                                    for c in range(cores)), tiling.kt,
                       per_core * tiling.kt / vector)


@dataclass(frozen=True)
class TimedStep:
    """An array k step's estimated cycles, and whether it ends a tile (its epilogue)."""

    cycles: int
    ends_tile: bool


def interleaved(arrays: list[TileSteps], timed: list[TimedStep], vector_cycles: float,
                vector: list[TileSteps]) -> list[TileSteps]:
    """A core's array steps and its vector share's steps in the order their work is
    due: each array step at its estimated start, its epilogue (when it ends a tile) split
    off to its estimated end, each vector step at its own start (``vector_cycles``
    apart), the arrays' first at a tie (the sort is stable and they come first). The
    loads issue in that order (the pipeline runs them ahead), and in the vector unit's
    in-order queue no vector step waits behind an array tile's epilogue that is due
    after it (a tile's epilogue waits for its last multiply). The order by step count
    instead (vector step ``i`` of ``V`` before array step ``i A / V + 1``) made
    Llama-2-7B's int4 TPOT on ``tpu-v4`` 4.59 ms."""
    due: list[tuple[float, TileSteps]] = []
    t = 0.0
    for step, time in zip(arrays, timed, strict=True):
        if time.ends_tile:
            due.append((t, TileSteps(step.load, step.compute, lambda: None)))
            due.append((t + time.cycles, TileSteps(lambda: None, lambda: None, step.store)))
        else:
            due.append((t, step))
        t += time.cycles
    due += [(i * vector_cycles, step) for i, step in enumerate(vector)]
    return [step for _, step in sorted(due, key=lambda d: d[0])]


__all__ = ["GAIN", "TimedStep", "VectorShare", "array_rate", "feed_rate", "interleaved",
           "plan_share", "start", "vector_rate"]
