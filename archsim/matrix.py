"""The matrix engine: systolic arrays timed by their fold structure.

A tile ``out[m, n] (+)= a[m, k] @ b[k, n]`` is mapped onto an R x C array as SCALE-Sim
3.0.0 maps a GEMM (its compute model, ``scalesim/compute/systolic_compute_*.py``): the
dataflow decides which two dimensions are spread over the array (``Sr`` over rows,
``Sc`` over columns) and which one is streamed in time (``T``); the work is cut into
ceil(Sr / R) x ceil(Sc / C) folds, each taking

=========  ====  ====  ===  ==================  ==========================================
dataflow    Sr    Sc    T    cycles per fold     why
=========  ====  ====  ===  ==================  ==========================================
ws          k     n     m    2R + C + T - 2      R to shift the weights in, T rows streamed
                                                  with R + C - 2 of skew and drain
os          m     n     k    R + C + T - 2       nothing to preload (the outputs stay in
                                                  the PEs); T streamed with R + C - 2 skew,
                                                  the results shift out under the skew
is          k     m     n    2R + C + T - 2      like ws, the inputs are the stationary one
=========  ====  ====  ===  ==================  ==========================================

(SCALE-Sim reports the 0-based index of the last busy cycle, one less than these
counts: see :mod:`archsim.agreement`.)

With double-buffered weights (``weight_buffers: 2``, ws only) the next fold's weights
shift in while the current fold streams: a matmul takes ``folds x max(T, R) + 2R + C -
2``, and one that starts the cycle the previous matmul on its array ends overlaps its
fill with that one's drain (the simulator subtracts ``2R + C - 2``).
"""
from __future__ import annotations

import math

from archsim.config.model import MatrixConfig, ceil_div
from archsim.timing import CommandTiming
from compiler.ir.dtypes import DType
from compiler.ir.ops import MatMul


def fold_dims(m: int, k: int, n: int, dataflow: str) -> tuple[int, int, int]:
    """``(Sr, Sc, T)`` for a GEMM under a dataflow."""
    if dataflow == "ws":
        return k, n, m
    if dataflow == "os":
        return m, n, k
    if dataflow == "is":
        return k, m, n
    raise ValueError(f"unknown dataflow {dataflow!r}")


def matmul_cycles(m: int, k: int, n: int, matrix: MatrixConfig,
                  operand_dtype: DType = DType.f32) -> int:
    """Compute cycles of one tile on one array (SCALE-Sim's closed form). Narrow inputs
    the array has a mode for pack ``matrix.rates`` K elements into each PE, so K
    shrinks by that factor whichever dimension the dataflow puts it on."""
    k = ceil_div(k, matrix.rates.of(operand_dtype.rate_name))
    rows, cols = matrix.rows, matrix.cols
    t = fold_dims(m, k, n, matrix.dataflow)[2]
    folds = fold_count(m, k, n, matrix)
    if matrix.dataflow == "ws" and matrix.weight_buffers > 1:
        # the next fold's weights load while this one streams: fill and drain once
        cycles = folds * max(t, rows) + 2 * rows + cols - 2
    else:
        cycles = fold_cycles(t, matrix) * folds
    return cycles * passes(operand_dtype, matrix)


def fold_count(m: int, k: int, n: int, matrix: MatrixConfig) -> int:
    """Folds of a GEMM: ceil(Sr / rows) x ceil(Sc / cols)."""
    sr, sc, _ = fold_dims(m, k, n, matrix.dataflow)
    return ceil_div(sr, matrix.rows) * ceil_div(sc, matrix.cols)


def fold_cycles(t: int, matrix: MatrixConfig) -> int:
    """Cycles of one fold streaming ``t`` rows, one stationary tile per fold."""
    preload = 0 if matrix.dataflow == "os" else matrix.rows  # os keeps outputs in place
    return preload + matrix.rows + matrix.cols + t - 2


def back_to_back_saving(matrix: MatrixConfig) -> int:
    """Cycles a matmul saves when it starts the cycle the previous one on its array
    ends: with double-buffered weights its fill overlaps that one's drain."""
    if matrix.dataflow == "ws" and matrix.weight_buffers > 1:
        return 2 * matrix.rows + matrix.cols - 2
    return 0


def steady_cycles(m: int, k: int, n: int, matrix: MatrixConfig,
                  operand_dtype: DType = DType.f32) -> int:
    """Cycles of a tile issued the cycle the previous one on its array ends (a k loop's
    steps, a fold after a fold): its fill hidden under that one's drain."""
    return matmul_cycles(m, k, n, matrix, operand_dtype) - back_to_back_saving(matrix)


def passes(operand_dtype: DType, matrix: MatrixConfig) -> int:
    """f32 operands on a 16-bit array take the passes of the config's ``f32_precision``
    (1 for ``default``, 3 for ``high``, 6 for ``highest``); all else one."""
    if operand_dtype is DType.f32 and matrix.input_dtype != "f32":
        return matrix.f32_passes
    return 1


class MatrixEngine:
    """One systolic array of a core (engine ``coreN.mxuM``)."""

    def __init__(self, name: str, config: MatrixConfig) -> None:
        self.name = name
        self.config = config

    @property
    def back_to_back_saving(self) -> int:
        return back_to_back_saving(self.config)

    def timing(self, op: MatMul) -> CommandTiming:
        *rows, k = op.a.shape  # leading dims of a are all rows
        m = math.prod(rows)
        n = op.columns  # two per byte of packed int4 weights
        cycles = matmul_cycles(m, k, n, self.config, op.a.dtype)
        return CommandTiming(fixed_cycles=cycles, flops=2 * m * k * n)
