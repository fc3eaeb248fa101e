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
the vector unit the last columns of such a matmul, as many as keep it and the arrays
busy for about the same time and the DRAM under its rate: the arrays take columns
``0 .. first`` as they would the whole matmul, each core's vector unit one range of the
rest over all of K, in k steps issued between the arrays' (``compiler.kernels.matmul``).
This is the mapping batch-1 weight-only GEMVs get on GPUs, whose GEMV kernels run on
the CUDA cores rather than the tensor cores; here it is taken only where the estimate
below says it is faster, so a GEMV the DRAM binds (16-bit weights) keeps every column
on the arrays.

The estimate is per core, in weights a cycle: the arrays' steady fold rate (the fold's
cycles less the fill a back-to-back fold hides), the vector unit's lanes over its
operations a weight (:func:`archsim.vector.matvec_ops`; at most its scratchpad bandwidth
over the bytes a weight), and the core's share of the sustained DRAM bandwidth over the
bytes a weight (with its scales).
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.config.model import NpuConfig
from archsim.matrix import back_to_back_saving, matmul_cycles
from archsim.vector import matvec_ops
from compiler.ir.dtypes import DType
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

    @property
    def width(self) -> int:
        """The widest core's columns (its buffers' width)."""
        return max(c1 - c0 for c0, c1 in self.columns)


@dataclass(frozen=True)
class Rates:
    """Weights a cycle one core's arrays, vector unit and DRAM share can take."""

    arrays: float
    vector: float
    dram: float


def rates(config: NpuConfig, cores: int, m: int, tile: tuple[int, int], arrays: int,
          a_dtype: DType, b_dtype: DType, dq: DequantWeights | None) -> Rates:
    """The per-core rates of an ``m``-row matmul of ``b_dtype`` weights (``dq``: weights
    dequantized on the way in) whose arrays, ``arrays`` a core, multiply ``tile``
    ``(kt, nt)`` a command back to back."""
    matrix, vector = config.core.matrix, config.core.vector
    kt, nt = tile
    command = matmul_cycles(m, kt, nt, matrix, a_dtype) - back_to_back_saving(matrix)
    if dq is not None:
        unpack, group, item = dq.unpack_ops, dq.spec.group, dq.item_bytes
    else:
        unpack, group, item = int(b_dtype is not a_dtype), 0, float(b_dtype.itemsize)
    k = group or 1  # a group's worth of k rows, one column: its operations a weight
    per_weight = matvec_ops(m, k, 1, unpack, 1 if group else 0) / k
    vec = vector.lanes / (per_weight * vector.costs.elementwise)
    if vector.sram_bandwidth_bytes_per_cycle:
        vec = min(vec, vector.sram_bandwidth_bytes_per_cycle / item)
    return Rates(arrays * kt * nt / command, vec,
                 config.dram_sustained_bytes_per_cycle / cores / item)


def plan_share(config: NpuConfig, cores: int, m: int, n: int, tile: tuple[int, int],
               arrays: int, a_dtype: DType, b_dtype: DType, dq: DequantWeights | None
               ) -> VectorShare | None:
    """The vector units' columns of an ``m``-row, ``n``-column one-row-block matmul
    (its arrays' tiles :func:`rates` says), or None where the arrays alone are as fast
    (they are not intake-bound, or the share is too small to count)."""
    r = rates(config, cores, m, tile, arrays, a_dtype, b_dtype, dq)
    if r.arrays >= r.dram:
        return None
    share = min(r.vector / (r.arrays + r.vector), 1 - r.arrays / r.dram)
    unit = dq.n_unit if dq is not None and dq.packed else 16
    per_core = int(share * n / cores) // unit * unit
    if per_core < unit:
        return None
    first = n - per_core * cores
    before = n / cores / r.arrays
    after = max(first / cores / r.arrays, per_core / r.vector, n / cores / r.dram)
    if after > GAIN * before:
        return None
    return VectorShare(first, tuple((first + c * per_core, first + (c + 1) * per_core)
                                    for c in range(cores)))


__all__ = ["GAIN", "Rates", "VectorShare", "plan_share", "rates"]
