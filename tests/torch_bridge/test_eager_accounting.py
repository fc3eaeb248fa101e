"""What the eager device charges: the op cache keyed by dtype, an on-device copy's bytes,
a host fallback's FLOPs. On `tiny`: DRAM 16 B/cycle; host 1 FLOP/cycle (1e9 FLOP/s at
1 GHz); host link 4 B/cycle after 100 cycles of latency."""

from __future__ import annotations

import warnings

import pytest
import torch

import torch_bridge
from archsim.config import load_config
from compiler import compile_op

aten = torch.ops.aten


def _events(prof: torch_bridge.profile, op: str) -> list:
    return [e.event for e in prof.result.events if e.event.op == op]


def test_a_bf16_matmul_after_an_f32_one_of_the_same_shape_is_compiled_as_bf16() -> None:
    """The op cache is keyed by shapes *and* dtypes: the bf16 call must neither reuse the
    f32 program (result f32) nor its timing. The reference cycles are a fresh compile
    of the bf16 call, outside the eager cache."""
    torch.manual_seed(0)
    x = torch.randn(16, 32)
    w = torch.randn(32, 16)
    xh, wh = x.bfloat16(), w.bfloat16()
    tiny = load_config("tiny")
    f32_cycles = compile_op(aten.mm.default, (x, w), {}, tiny).simulate().total_cycles
    bf16_cycles = compile_op(aten.mm.default, (xh, wh), {}, tiny).simulate().total_cycles
    assert bf16_cycles != f32_cycles  # half the bytes to load and store
    with torch_bridge.profile(config="tiny") as prof:
        xn, wn = x.npu(), w.npu()
        xhn, whn = xh.npu(), wh.npu()
        single = xn @ wn
        half = xhn @ whn
    assert (single.dtype, half.dtype) == (torch.float32, torch.bfloat16)
    assert [e.cycles for e in _events(prof, "aten.mm")] == [f32_cycles, bf16_cycles]
    torch.testing.assert_close(half.cpu(), xh @ wh)


def test_an_npu_to_npu_copy_reads_the_source_bytes_and_writes_the_destination() -> None:
    """Copying 4x8 bf16 (64 B read) into 4x8 f32 (128 B written) on the device moves
    192 B at 16 B/cycle: 12 cycles (16 if the read were counted at the destination's
    size)."""
    src = torch.randn(4, 8).bfloat16().npu()
    dst = torch.empty(4, 8, device="npu")
    with torch_bridge.profile(config="tiny") as prof:
        dst.copy_(src)
    (event,) = _events(prof, "aten.copy_")
    assert (event.kind, event.bytes, event.cycles) == ("device", 192, 12)


def test_a_host_fallback_addmm_is_charged_2_m_n_k_flops() -> None:
    """float64 addmm runs on the host: bias 3x5, mat1 3x4, mat2 4x5 -> 2 * 3 * 5 * 4 =
    120 FLOPs (K = 4, mat1's columns). Cycles: 120 compute + up the link (15 + 12 + 20
    elements * 8 B = 376 B: 100 + 94) + down (120 B: 100 + 30) = 444."""
    bias, mat1, mat2 = (torch.randn(*s, dtype=torch.float64) for s in ((3, 5), (3, 4), (4, 5)))
    args = [t.npu() for t in (bias, mat1, mat2)]
    with torch_bridge.profile(config="tiny") as prof, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.addmm(*args)
    (event,) = _events(prof, "aten.addmm")
    assert (event.kind, event.flops, event.cycles) == ("host", 120, 444)
    torch.testing.assert_close(got.cpu(), torch.addmm(bias, mat1, mat2))


def test_utilization_is_the_busy_fraction_per_engine_kind() -> None:
    """Two 8x8 @ 8x8 f32 matmuls on tiny, each the schedule pinned in
    tests/compiler/test_matmul_tiling.py: 259 cycles; core0.dma0 busy 4 * 43 = 172,
    core0.dma1 51 (the store), core0.mxu0 2 * 36 = 72. Per kind, busy over (engines of
    the kind x run cycles): dma (172 + 51) / (4 * 259) = 21.5%, mxu 72 / (2 * 259) =
    13.9%, the others idle -- whatever the number of runs (both numerator and
    denominator double)."""
    a, b = torch.randn(8, 8).npu(), torch.randn(8, 8).npu()
    with torch_bridge.profile(config="tiny") as prof:
        a @ b
        b @ a
    assert [r.total_cycles for r in prof.results] == [259, 259]
    assert dict(prof.result.utilization) == pytest.approx({
        "dma": 223 / 1036, "mxu": 72 / 518, "vpu": 0.0, "tdma": 0.0, "hdma": 0.0,
        "host": 0.0})
