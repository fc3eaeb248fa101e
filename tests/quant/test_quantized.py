"""Quantized matmuls (issue 30): the arrays' narrow-input rates, int8 x int8 -> int32
(``torch._int_mm``) and weight-only int8 (``torch._weight_int8pack_mm``) on the npu,
bit-exact against torch on CPU, timed at the rate and bytes the preset says."""

from __future__ import annotations

import pytest
import torch

import torch_bridge
from archsim.app.pipeline import run
from archsim.app.workload import Workload
from archsim.config import load_config
from archsim.errors import ArchsimError, ConfigError
from archsim.matrix import matmul_cycles
from compiler.ir.dtypes import DType

TINY = load_config("tiny")  # 4x4 ws f32 array, one weight buffer; rates i8 2, i4 4, fp8 2


def test_int8_packs_twice_the_k_into_each_pe_on_tiny() -> None:
    # ws: Sr = k, Sc = n, T = m; one weight buffer: each fold 2R + C + T - 2 = 8 + 4 + 8 - 2
    matrix = TINY.core.matrix
    assert matmul_cycles(8, 8, 4, matrix, DType.f32) == 2 * 18  # k = 8: two row folds
    assert matmul_cycles(8, 8, 4, matrix, DType.i8) == 18  # rate 2: k = 4, one fold
    assert matmul_cycles(8, 9, 4, matrix, DType.i8) == 2 * 18  # ceil(9 / 2) = 5 > 4 rows


def test_an_array_without_an_int8_mode_runs_int8_at_the_native_rate() -> None:
    v3 = load_config("tpu-v3").core.matrix
    assert v3.rates.i8 == 0
    assert matmul_cycles(128, 512, 128, v3, DType.i8) == \
        matmul_cycles(128, 512, 128, v3, DType.bf16)


def test_peaks_per_dtype_are_the_public_ratios() -> None:
    atom, v4 = load_config("atom"), load_config("tpu-v4")
    assert atom.peak_ops("i8") == 4 * atom.peak_flops  # 128 TOPS int8 vs 32 TFLOPS fp16
    assert v4.peak_ops("i8") == v4.peak_flops  # 275 TOPS int8 = 275 TFLOPS bf16
    assert load_config("ascend-910b4").peak_ops("i8") == \
        2 * load_config("ascend-910b4").peak_flops


def test_rates_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"core\.matrix\.rates\.i8: must be >= 0, got -1"):
        TINY.with_overrides({"core.matrix.rates.i8": -1})


@pytest.mark.parametrize("m,k,n", [(64, 64, 64), (100, 200, 72), (17, 33, 9)])
def test_int_mm_on_npu_is_bit_exact_and_on_the_device(m: int, k: int, n: int) -> None:
    torch.manual_seed(m)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8)
    b = torch.randint(-128, 128, (k, n), dtype=torch.int8)
    with torch_bridge.profile() as prof:
        out = torch._int_mm(a.to("npu"), b.to("npu"))
    assert out.dtype == torch.int32
    assert torch.equal(out.cpu(), torch._int_mm(a, b))
    assert prof.result.cycles("host") == 0 and prof.result.matmul_flops == 2 * m * k * n


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m,k,n", [(4, 64, 32), (1, 256, 64), (32, 128, 96)])
def test_weight_only_int8_matches_torch_and_reads_one_byte_a_weight(dtype, m, k, n) -> None:
    torch.manual_seed(k)
    x = torch.randn(m, k, dtype=dtype)
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8)
    s = torch.rand(n, dtype=dtype)
    with torch_bridge.profile() as prof:
        out = torch._weight_int8pack_mm(x.to("npu"), w.to("npu"), s.to("npu"))
    expected = torch._weight_int8pack_mm(x, w, s)
    if dtype == torch.bfloat16:  # f32 sums rounded once to bf16: the same bits
        assert torch.equal(out.cpu(), expected)
    else:  # f32: the sums' order differs from torch's kernel
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-3)
    (result,) = prof.result.runs
    item = x.element_size()
    # the weights at one byte each, read once; x and the scales in their dtype (x once
    # per core that computes output columns); the output written once. The scales
    # widened to f32 when they are not f32 (the epilogue multiplies in f32) go through
    # atom's shared SRAM, not DRAM (compiler.residency)
    widened = 0
    x_reads, rest = divmod(result.dram_bytes_read - (n * k + n * item + widened),
                           m * k * item)
    assert rest == 0 and 1 <= x_reads <= 8  # atom's 8 cores
    assert result.dram_bytes_written == m * n * item + widened
    assert prof.result.cycles("host") == 0


def test_archsim_run_gemm_int8_is_timed_against_the_int8_peak() -> None:
    result = run(Workload.parse("gemm", seq=256, dtype="i8"), "atom", mode="performance")
    assert result.matrix_peak_flops == load_config("atom").peak_ops("i8")
    f16 = run(Workload.parse("gemm", seq=256, dtype="f16"), "atom", mode="performance")
    assert f16.matrix_peak_flops == load_config("atom").peak_flops
    assert result.total_cycles < f16.total_cycles


def test_the_cli_takes_int8_spelled_out(capsys) -> None:
    # issue 30's own command: `archsim run gemm --seq 4096 --dtype int8 --config atom`
    from archsim.cli.main import build_parser

    args = build_parser().parse_args(["run", "gemm", "--dtype", "int8", "--config", "atom"])
    assert args.dtype == "i8"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "gemm", "--dtype", "int4"])
    assert "invalid choice: 'int4' (choose from 'f32', 'f16', 'bf16', 'i8')" in \
        capsys.readouterr().err


def test_int8_is_refused_where_no_integer_workload_exists(tmp_path) -> None:
    with pytest.raises(ArchsimError, match=r"--dtype i8 runs integer matmuls: built-in gemm "
                                           r"only, not 'gpt2'"):
        Workload.parse("gpt2", dtype="i8")
    # a model file said "unknown dtype 'i8': expected one of f32, f16, bf16", though
    # --help lists i8
    model = tmp_path / "mlp.py"
    model.write_text("import torch\nmodel = torch.nn.Linear(4, 4)\n"
                     "example_inputs = (torch.ones(2, 4),)\n")
    with pytest.raises(ArchsimError, match=r"^--dtype i8 runs integer matmuls: built-in "
                                           r"gemm only, not a model file \(a model's dtype "
                                           r"is one of f32, f16, bf16\)$"):
        Workload.parse(str(model), dtype="i8")
    with pytest.raises(ArchsimError, match=r"not a transformers config \("):
        Workload.parse("llama-2-7b", dtype="i8")


def test_an_int8_run_reads_in_int8_tops_and_survives_json(tmp_path) -> None:
    from reports.json_report import from_json, to_json
    from reports.summary import summary

    result = run(Workload.parse("gemm", seq=256, dtype="i8"), "atom", mode="performance")
    ops = 2 * 256 ** 3
    achieved = ops / result.seconds / 1e12
    line = next(x for x in summary(result).splitlines() if x.lstrip().startswith("matrix"))
    assert line == (f"  matrix ops/s    {achieved:.{2 if achieved < 10 else 1}f} TOPS of 131 TOPS "
                    f"int8 peak ({achieved / 131.072:.1%}); 33.6 M int8 ops")
    assert from_json(to_json(result)).integer_matmuls
    f16 = run(Workload.parse("gemm", seq=256, dtype="f16"), "atom", mode="performance")
    assert "matrix FLOP/s" in summary(f16) and not from_json(to_json(f16)).integer_matmuls
