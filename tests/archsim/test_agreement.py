"""SCALE-Sim agreement mode: exact cycles from SCALE-Sim 3.0.0's closed forms.

SCALE-Sim's compute model (``scalesim/compute/systolic_compute_{ws,os,is}.py``) builds
per fold a demand matrix whose row count is the fold's cycles:

- ws, is: the stationary tile is shifted in (R rows), T operand rows stream, C - 1
  rows of drain, and the skew across the R array rows adds R - 1: ``2R + C + T - 2``;
- os: T rows stream with C - 1 rows of drain and R - 1 of skew: ``R + C + T - 2``.

Folds are ``ceil(Sr / R) * ceil(Sc / C)`` with (Sr, Sc, T) = (K, N, M) for ws, (M, N, K)
for os, (K, M, N) for is. Its "Total Cycles" is the index of the last demand row, one
less than the count. Every expected value below is that formula worked by hand; each
also matches a run of the real SCALE-Sim 3.0.0 (4x4 array, CALC bandwidth, 0 stalls).
"""

from __future__ import annotations

import pytest

from archsim.agreement import ConvLayer, conv_agreement, gemm_agreement
from archsim.errors import AgreementError, ArchsimError


@pytest.mark.parametrize(("dataflow", "mkn", "folds", "cycles"), [
    # m=6, k=5, n=7 on 4x4
    ("ws", (6, 5, 7), 2 * 2, 4 * (8 + 4 + 6 - 2)),   # Sr=k=5, Sc=n=7, T=m=6: 64
    ("os", (6, 5, 7), 2 * 2, 4 * (4 + 4 + 5 - 2)),   # Sr=m=6, Sc=n=7, T=k=5: 44
    ("is", (6, 5, 7), 2 * 2, 4 * (8 + 4 + 7 - 2)),   # Sr=k=5, Sc=m=6, T=n=7: 68
    # m=9, k=3, n=2: skinny, the folds follow the dataflow's spatial dims
    ("ws", (9, 3, 2), 1, 8 + 4 + 9 - 2),              # Sr=3, Sc=2, T=9: 19
    ("os", (9, 3, 2), 3 * 1, 3 * (4 + 4 + 3 - 2)),   # Sr=9, Sc=2, T=3: 27
    ("is", (9, 3, 2), 1 * 3, 3 * (8 + 4 + 2 - 2)),   # Sr=3, Sc=9, T=2: 36
    ("os", (1, 1, 1), 1, 4 + 4 + 1 - 2),              # one MAC still crosses the array
])
def test_gemm_matches_scalesim_closed_form(dataflow: str, mkn: tuple[int, int, int],
                                            folds: int, cycles: int) -> None:
    result = gemm_agreement(*mkn, rows=4, cols=4, dataflow=dataflow)
    assert (result.folds, result.cycles) == (folds, cycles)
    assert result.scalesim_total_cycles == cycles - 1  # SCALE-Sim: 63, 43, 67, 18, 26, 35, 6


def test_rectangular_array_folds_rows_and_cols_separately() -> None:
    # 8x2 array, m=5, k=10, n=3, ws: Sr=10 -> 2 row folds, Sc=3 -> 2 col folds, T=5
    result = gemm_agreement(5, 10, 3, rows=8, cols=2, dataflow="ws")
    assert (result.folds, result.cycles) == (4, 4 * (16 + 2 + 5 - 2))
    # os: Sr=m=5 -> 1, Sc=n=3 -> 2, T=k=10
    result = gemm_agreement(5, 10, 3, rows=8, cols=2, dataflow="os")
    assert (result.folds, result.cycles) == (2, 2 * (8 + 2 + 10 - 2))


@pytest.mark.parametrize(("dataflow", "layer", "cycles"), [
    # 5x5 ifmap, 3x3 filter, 2 channels, 3 filters, stride 1: ofmap 3x3, M=9 K=18 N=3
    ("ws", (5, 5, 3, 3, 2, 3, 1), 5 * 1 * (8 + 4 + 9 - 2)),    # Sr=18, Sc=3, T=9: 95
    ("os", (5, 5, 3, 3, 2, 3, 1), 3 * 1 * (4 + 4 + 18 - 2)),   # Sr=9, Sc=3, T=18: 72
    ("is", (5, 5, 3, 3, 2, 3, 1), 5 * 3 * (8 + 4 + 3 - 2)),    # Sr=18, Sc=9, T=3: 195
    # 7x7 ifmap, 3x3, 2 channels, 5 filters, stride 2: ofmap ceil(6/2)=3 -> M=9 K=18 N=5
    ("ws", (7, 7, 3, 3, 2, 5, 2), 5 * 2 * (8 + 4 + 9 - 2)),    # 190
    ("os", (7, 7, 3, 3, 2, 5, 2), 3 * 2 * (4 + 4 + 18 - 2)),   # 144
    ("is", (7, 7, 3, 3, 2, 5, 2), 5 * 3 * (8 + 4 + 5 - 2)),    # 225
])
def test_conv_maps_by_im2col_like_scalesim(dataflow: str, layer: tuple[int, ...],
                                           cycles: int) -> None:
    result = conv_agreement(ConvLayer(*layer), rows=4, cols=4, dataflow=dataflow)
    assert (result.m, result.k, result.n) == (9, 18, layer[5])
    assert result.cycles == cycles  # SCALE-Sim: 94, 71, 194, 189, 143, 224


def test_conv_ofmap_rounds_up_a_partial_stride() -> None:
    # SCALE-Sim: ofmap = ceil((H - R + s) / s); 8x6 ifmap, 3x2 filter, stride 2:
    # ceil(7 / 2) = 4 rows (the last window hangs over), ceil(6 / 2) = 3 columns
    layer = ConvLayer(8, 6, 3, 2, 4, 16, 2)
    assert (layer.ofmap_h, layer.ofmap_w, layer.gemm()) == (4, 3, (12, 24, 16))


def test_utilization_of_a_full_fold() -> None:
    # os, one 4x4 fold with T=4: 16 MACs per cycle at best, 4*4*4 MACs over 10 cycles
    result = gemm_agreement(4, 4, 4, rows=4, cols=4, dataflow="os")
    assert result.cycles == 10
    assert result.utilization == pytest.approx(64 / (16 * 10))


@pytest.mark.parametrize(("call", "message"), [
    (lambda: gemm_agreement(0, 4, 4, rows=4, cols=4, dataflow="ws"),
     "GEMM: m=0; m, k and n must be positive integers"),
    (lambda: gemm_agreement(4, 4, 4, rows=4, cols=4, dataflow="rs"),
     "dataflow 'rs': use one of ws, os, is"),
    (lambda: gemm_agreement(4, 4, 4, rows=0, cols=4, dataflow="os"),
     "array: rows=0; rows and cols must be positive integers"),
    (lambda: ConvLayer(3, 3, 5, 5, 1, 1),
     "convolution: filter 5x5 is larger than the ifmap 3x3; give the ifmap with its "
     "padding included (SCALE-Sim pads nothing)"),
    (lambda: ConvLayer(8, 8, 3, 3, 4, 8, 0),
     "convolution: stride=0; every dimension and the stride must be a positive integer"),
])
def test_bad_input_is_named(call, message: str) -> None:
    with pytest.raises(AgreementError) as caught:
        call()
    assert str(caught.value) == message
    assert isinstance(caught.value, ArchsimError)
