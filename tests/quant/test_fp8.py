"""fp8 (issue 30): the IR's e4m3 and e5m2 dtypes encode and decode exactly as torch's
float8_e4m3fn and float8_e5m2, float8 tensors live on the npu, and ``torch._scaled_mm``
runs on the arrays at their fp8 rate with the scales in the epilogue."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torch_bridge
from archsim.config import load_config
from archsim.functional import to_stored, to_values
from archsim.matrix import matmul_cycles
from compiler.ir import fp8
from compiler.ir.dtypes import DType

FORMATS = [(DType.e4m3, fp8.E4M3, torch.float8_e4m3fn),
           (DType.e5m2, fp8.E5M2, torch.float8_e5m2)]


@pytest.mark.parametrize("dtype,fmt,torch_dtype", FORMATS)
def test_every_code_decodes_as_torch_does(dtype, fmt, torch_dtype) -> None:
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    expected = codes.view(torch_dtype).float().numpy()
    np.testing.assert_array_equal(fp8.to_f32(codes.numpy(), fmt), expected)  # NaNs too
    np.testing.assert_array_equal(to_values(codes.numpy(), dtype), expected)


@pytest.mark.parametrize("dtype,fmt,torch_dtype", FORMATS)
def test_encoding_rounds_and_overflows_as_torch_does(dtype, fmt, torch_dtype) -> None:
    torch.manual_seed(0)
    grid = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch_dtype).float()
    finite = grid[grid.isfinite()].unique().double()
    midpoints = ((finite[1:] + finite[:-1]) / 2).float()  # ties: to the even code
    x = torch.cat([
        *(torch.randn(20000) * s for s in (1e-4, 1e-2, 1.0, 100.0, 1e4, 1e5)),
        midpoints, torch.nextafter(midpoints, torch.tensor(1e30)),
        torch.nextafter(midpoints, torch.tensor(-1e30)), -midpoints,
        torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 448, 464, 465,
                      480, 1e9, 57344, 61440, 61441, 65536, 2 ** -10, 2 ** -17, -2 ** -18]),
    ])
    expected = x.to(torch_dtype).view(torch.uint8).numpy()
    np.testing.assert_array_equal(fp8.from_f32(x.numpy(), fmt), expected)
    np.testing.assert_array_equal(to_stored(x.numpy(), dtype), expected)


def test_e4m3_saturates_and_e5m2_overflows_to_infinity() -> None:
    big = np.array([500.0, -1e9, np.inf], dtype=np.float32)
    assert fp8.to_f32(fp8.from_f32(big, fp8.E4M3), fp8.E4M3).tolist() == [448, -448, 448]
    assert fp8.to_f32(fp8.from_f32(big, fp8.E5M2), fp8.E5M2).tolist() == \
        [512, -np.inf, np.inf]


def test_fp8_dtypes_are_one_byte_at_the_arrays_fp8_rate() -> None:
    tiny = load_config("tiny").core.matrix  # 4x4 ws, one weight buffer; fp8 rate 2
    assert DType.e4m3.itemsize == DType.e5m2.itemsize == 1
    assert DType.e4m3.rate_name == DType.e5m2.rate_name == "fp8"
    # ws: one fold of k = 8 / 2 = 4 rows: 2R + C + T - 2 = 8 + 4 + 8 - 2 (as for i8)
    assert matmul_cycles(8, 8, 4, tiny, DType.e4m3) == 18
    assert matmul_cycles(8, 8, 4, tiny, DType.bf16) == 2 * 18


def test_float8_tensors_cast_on_the_npu_as_on_cpu() -> None:
    torch.manual_seed(1)
    x = torch.randn(1000) * 300
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        with torch_bridge.profile() as prof:
            y = x.to("npu").to(dtype)
            back = y.to(torch.bfloat16)
        assert torch.equal(y.cpu().view(torch.uint8), x.to(dtype).view(torch.uint8))
        assert torch.equal(back.cpu(), x.to(dtype).to(torch.bfloat16))
        assert prof.result.host_cycles == 0


@pytest.mark.parametrize("rowwise", [False, True])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_scaled_mm_on_npu_matches_cpu(rowwise: bool, out_dtype: torch.dtype) -> None:
    torch.manual_seed(2)
    m, k, n = 64, 128, 96
    a = (torch.randn(m, k) * 3).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k) * 3).to(torch.float8_e4m3fn)
    scales = (torch.rand(m, 1), torch.rand(1, n)) if rowwise else \
        (torch.tensor(0.5), torch.tensor(2.0))
    bias = torch.randn(n).to(out_dtype) if not rowwise else None
    expected = torch._scaled_mm(a, w.t(), *scales, bias=bias, out_dtype=out_dtype)
    npu = [t.to("npu") if t is not None else None for t in (a, w, *scales, bias)]
    with torch_bridge.profile() as prof:
        out = torch._scaled_mm(npu[0], npu[1].t(), npu[2], npu[3], bias=npu[4],
                               out_dtype=out_dtype)
    if out_dtype == torch.bfloat16:  # f32 sums rounded once: the same bits
        assert torch.equal(out.cpu(), expected)
    else:  # f32: the sums' order differs from torch's kernel
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-4)
    assert prof.result.host_cycles == 0
    assert prof.result.matmul_flops == 2 * m * k * n


def test_compiled_scaled_mm_matches_cpu_with_no_host_work() -> None:
    torch.manual_seed(3)
    a = (torch.randn(64, 128) * 3).to(torch.float8_e4m3fn)
    w = (torch.randn(96, 128) * 3).to(torch.float8_e4m3fn)
    scales = (torch.rand(64, 1), torch.rand(1, 96))

    def linear(a, w, scale_a, scale_b):
        return torch._scaled_mm(a, w.t(), scale_a, scale_b, out_dtype=torch.bfloat16)

    expected = linear(a, w, *scales)
    torch._dynamo.reset()
    compiled = torch.compile(linear, backend="archsim")
    with torch_bridge.profile() as prof:
        out = compiled(*(t.to("npu") for t in (a, w, *scales)))
    assert torch.equal(out.cpu(), expected)
    assert prof.result.host_cycles == 0 and prof.result.matmul_flops == 2 * 64 * 128 * 96
