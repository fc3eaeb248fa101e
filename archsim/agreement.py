"""SCALE-Sim agreement mode: archsim's cycles for one layer on one systolic array.

SCALE-Sim 3.0.0 times a layer as a GEMM on a single R x C array whose operands are
already in its SRAMs (its "Total Cycles", the compute cycles of ``COMPUTE_REPORT.csv``;
with enough SRAM bandwidth there are no stall cycles). This module asks archsim the
same question: the layer becomes one ``MatMul`` command on ``core0.mxu0`` of a one-array
core whose scratchpad holds every operand (memory unconstrained: nothing is loaded),
and the simulator runs it. No DMA, no vector work, one pass (the operands are in the
array's input dtype), one weight buffer (SCALE-Sim's model: every fold loads its own
stationary tile).

How SCALE-Sim states a layer (its topology CSV), and the GEMM it maps it to:

- a GEMM ``M, N, K`` row is ``a[M, K] @ b[K, N]``;
- a convolution row gives the ifmap height and width (padding already included: SCALE-
  Sim applies none), the filter height and width, the channels, the filter count and
  one stride for both axes. It is lowered by im2col: M = ofmap pixels ``ceil((H - R +
  s) / s) * ceil((W - S + s) / s)``, K = window ``R * S * C``, N = filters; batch 1.

SCALE-Sim reports the 0-based index of the layer's last busy cycle, so its "Total
Cycles" is archsim's cycle count minus one (:attr:`Agreement.scalesim_total_cycles`).
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.config import load_config
from archsim.config.model import DATAFLOWS, NpuConfig
from archsim.errors import AgreementError
from archsim.matrix import fold_count
from archsim.simulator import Simulator
from compiler.ir import DType, MatMul, SramRef
from compiler.ir.builder import ProgramBuilder

_ENGINE = "core0.mxu0"
_DTYPE = DType.f32  # the array's input dtype below: one pass, whatever the size


@dataclass(frozen=True)
class ConvLayer:
    """A convolution as a SCALE-Sim topology row (no padding, no batch)."""

    ifmap_h: int
    ifmap_w: int
    filter_h: int
    filter_w: int
    channels: int
    filters: int
    stride: int = 1

    def __post_init__(self) -> None:
        bad = [f"{name}={value}" for name, value in vars(self).items()
               if not isinstance(value, int) or value < 1]
        if bad:
            raise AgreementError(f"convolution: {', '.join(bad)}; every dimension and the "
                                 "stride must be a positive integer")
        if self.filter_h > self.ifmap_h or self.filter_w > self.ifmap_w:
            raise AgreementError(
                f"convolution: filter {self.filter_h}x{self.filter_w} is larger than the "
                f"ifmap {self.ifmap_h}x{self.ifmap_w}; give the ifmap with its padding "
                "included (SCALE-Sim pads nothing)")

    @property
    def ofmap_h(self) -> int:
        return -(-(self.ifmap_h - self.filter_h + self.stride) // self.stride)

    @property
    def ofmap_w(self) -> int:
        return -(-(self.ifmap_w - self.filter_w + self.stride) // self.stride)

    def gemm(self) -> tuple[int, int, int]:
        """``(M, K, N)`` of the im2col GEMM: ofmap pixels, window size, filters."""
        return (self.ofmap_h * self.ofmap_w,
                self.filter_h * self.filter_w * self.channels, self.filters)


@dataclass(frozen=True)
class Agreement:
    """archsim's cycles for one GEMM on one array, with what SCALE-Sim would report."""

    m: int
    k: int
    n: int
    rows: int
    cols: int
    dataflow: str
    folds: int
    cycles: int
    """Cycles the array is busy, from the simulator's trace."""

    @property
    def scalesim_total_cycles(self) -> int:
        """The same figure in SCALE-Sim's convention (index of the last busy cycle)."""
        return self.cycles - 1

    @property
    def macs(self) -> int:
        return self.m * self.k * self.n

    @property
    def utilization(self) -> float:
        """Fraction of the array's MAC slots used over the layer."""
        return self.macs / (self.rows * self.cols * self.cycles)


def gemm_agreement(m: int, k: int, n: int, *, rows: int, cols: int,
                   dataflow: str) -> Agreement:
    """archsim's cycles for ``a[m, k] @ b[k, n]`` on one ``rows x cols`` array."""
    bad = [f"{name}={value}" for name, value in (("m", m), ("k", k), ("n", n))
           if not isinstance(value, int) or value < 1]
    if bad:
        raise AgreementError(f"GEMM: {', '.join(bad)}; m, k and n must be positive integers")
    config = array_config(rows, cols, dataflow)
    sizes = (m * k, k * n, m * n)
    offsets = (0, sizes[0] * _DTYPE.itemsize, (sizes[0] + sizes[1]) * _DTYPE.itemsize)
    a, b, out = (SramRef("sram0", offset, shape, _DTYPE)
                 for offset, shape in zip(offsets, ((m, k), (k, n), (m, n))))
    builder = ProgramBuilder(f"gemm_{m}x{k}x{n}")
    builder.add(_ENGINE, MatMul(a, b, out))
    result = Simulator(config).run(builder.build())
    return Agreement(m, k, n, rows, cols, dataflow, fold_count(m, k, n, config.core.matrix),
                     result.total_cycles)


def conv_agreement(layer: ConvLayer, *, rows: int, cols: int, dataflow: str) -> Agreement:
    """archsim's cycles for a convolution, lowered by im2col as SCALE-Sim lowers it."""
    m, k, n = layer.gemm()
    return gemm_agreement(m, k, n, rows=rows, cols=cols, dataflow=dataflow)


def array_config(rows: int, cols: int, dataflow: str, *,
                 scratchpad_bytes: int = 1 << 40) -> NpuConfig:
    """One core with one ``rows x cols`` array of the dataflow, one weight buffer,
    f32 native (one pass), and a scratchpad that holds any layer."""
    if dataflow not in DATAFLOWS:
        raise AgreementError(f"dataflow {dataflow!r}: use one of {', '.join(DATAFLOWS)}")
    bad = [f"{name}={value}" for name, value in (("rows", rows), ("cols", cols))
           if not isinstance(value, int) or value < 1]
    if bad:
        raise AgreementError(f"array: {', '.join(bad)}; rows and cols must be positive "
                             "integers")
    return load_config("tiny").with_overrides({
        "cores": 1,
        "core.scratchpad.size_bytes": scratchpad_bytes,
        "core.matrix.arrays": 1,
        "core.matrix.rows": rows,
        "core.matrix.cols": cols,
        "core.matrix.dataflow": dataflow,
        "core.matrix.input_dtype": "f32",
        "core.matrix.weight_buffers": 1,
    })
