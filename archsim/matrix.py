"""The matrix engine: systolic arrays timed by their fold structure.

A tile ``out[m, n] (+)= a[m, k] @ b[k, n]`` is mapped onto an R x C array as SCALE-Sim
maps a GEMM (its analytical compute-cycle model): the operand held stationary is folded
into ceil(Sr / R) x ceil(Sc / C) folds, and each fold takes ``2R + C + T - 2`` cycles
(R cycles to fill the stationary operand, T to stream, R + C - 2 to drain) where

=========  ====  ====  ===
dataflow    Sr    Sc    T
=========  ====  ====  ===
ws          k     n     m
os          m     n     k
is          k     m     n
=========  ====  ====  ===

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
    """Compute cycles of one tile on one array (SCALE-Sim's closed form)."""
    rows, cols = matrix.rows, matrix.cols
    sr, sc, t = fold_dims(m, k, n, matrix.dataflow)
    folds = ceil_div(sr, rows) * ceil_div(sc, cols)
    if matrix.dataflow == "ws" and matrix.weight_buffers > 1:
        # the next fold's weights load while this one streams: fill and drain once
        cycles = folds * max(t, rows) + 2 * rows + cols - 2
    else:
        cycles = (2 * rows + cols + t - 2) * folds
    return cycles * passes(operand_dtype, matrix)


def back_to_back_saving(matrix: MatrixConfig) -> int:
    """Cycles a matmul saves when it starts the cycle the previous one on its array
    ends: with double-buffered weights its fill overlaps that one's drain."""
    if matrix.dataflow == "ws" and matrix.weight_buffers > 1:
        return 2 * matrix.rows + matrix.cols - 2
    return 0


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
        n = op.b.shape[1]
        cycles = matmul_cycles(m, k, n, self.config, op.a.dtype)
        return CommandTiming(fixed_cycles=cycles, flops=2 * m * k * n)
