"""Quantized models through the export door (``archsim run FILE``, issue 30): the aten
patterns torchao's layers export to on CPU reach the arrays as quantized matmuls.

- Weight-only int8 exports as ``mm(x, w_int8.to(bf16)) * scale``: the compiler reads the
  int8 weights at one byte each and widens them on the way in, instead of a vector cast
  pass that writes and reads the weights back in bf16.
- Dynamic int8 activations export, on CPU, as torchao's x86 path: activations shifted
  by 128 to uint8 and ``_int_mm(u8, i8) - 128 * sum(w)``. The IR has u8, and the arrays'
  int8 mode multiplies u8 x i8 as stored (exact, i32 sums).
"""

from __future__ import annotations

import warnings

import pytest
import torch

from archsim.app.pipeline import run
from archsim.app.workload import Workload
from archsim.cli.main import main
from compiler.ir.dtypes import DType

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torchao warns about its CUDA-only extensions
    quantization = pytest.importorskip(
        "torchao.quantization", reason="torchao is not installed (pip install archsim[quant])")

M, K, H, N = 8, 256, 512, 128


def _model(config: type) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(K, H), torch.nn.ReLU(),
                                torch.nn.Linear(H, N)).to(torch.bfloat16)
    quantization.quantize_(model, config())
    return model


def _run(model: torch.nn.Module):
    x = torch.randn(M, K, dtype=torch.bfloat16)
    return run(Workload.of_module(model, (x,)), "atom", mode="functional")


def test_weight_only_int8_reads_each_weight_once_at_one_byte() -> None:
    result = _run(_model(quantization.Int8WeightOnlyConfig))  # numbers checked: exact
    assert result.host_cycles == 0
    # both products on the arrays, bf16 activations against the int8 weights widened
    assert dict(result.matmul_flops_by_dtypes) == {
        (DType.bf16, DType.i8): 2 * M * (K * H + H * N)}
    # DRAM reads: the weights at one byte each, plus what is not a weight: x, the
    # hidden activations, biases and per-channel f32 scales. Bound them by hand: no
    # weight is read widened (that alone would add K*H + H*N bytes)
    weights = K * H + H * N
    others = 8 * (M * K * 2) + 8 * (M * H * 2) + 2 * (H + N) + 4 * (H + N) * 2
    assert weights <= result.dram_bytes_read <= weights + others
    assert result.dram_bytes_read < 2 * weights


def test_dynamic_int8_runs_u8_by_i8_in_the_int8_mode() -> None:
    result = _run(_model(quantization.Int8DynamicActivationInt8WeightConfig))
    assert result.host_cycles == 0
    flops = dict(result.matmul_flops_by_dtypes)
    assert flops == {(DType.u8, DType.i8): 2 * M * (K * H + H * N)}
    atom = result.config
    assert result.matrix_peak_flops == atom.peak_ops("i8") == 4 * atom.peak_flops


def test_archsim_run_file_names_the_int8_weights_and_how_they_ran(tmp_path, capsys) -> None:
    path = tmp_path / "quantized.py"
    path.write_text(
        "import torch\n"
        "from torchao.quantization import quantize_, Int8DynamicActivationInt8WeightConfig\n"
        "model = torch.nn.Linear(64, 32).to(torch.bfloat16)\n"
        "quantize_(model, Int8DynamicActivationInt8WeightConfig())\n"
        "example_inputs = (torch.randn(4, 64, dtype=torch.bfloat16),)\n")
    assert main(["run", str(path)]) == 0
    out, progress = capsys.readouterr()
    assert "numerics: max |npu - torch cpu| = 0 over 1 output(s)" in progress
    assert "quantized (bf16/i8 weights) on atom" in out
    assert ("precision       f16 arrays; f32 matmuls at 'high' precision (3 f16 passes); "
            "u8 matmuls in the arrays' int8 mode (4x)\n") in out


class _U8Mm(torch.nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch._int_mm(x, w)


def test_u8_by_i8_int_mm_is_exact_and_takes_the_int8_rate() -> None:
    torch.manual_seed(1)
    x = torch.randint(0, 256, (32, 64), dtype=torch.uint8)  # beyond int8's range
    w = torch.randint(-128, 128, (64, 24), dtype=torch.int8)
    # a functional run compares integer outputs with torch's exactly (NumericsError)
    result = run(Workload.of_module(_U8Mm(), (x, w)), "tiny", mode="functional")
    assert result.host_cycles == 0
    assert dict(result.matmul_flops_by_dtypes) == {(DType.u8, DType.i8): 2 * 32 * 64 * 24}


def test_u8_and_i8_promote_to_a_type_holding_both() -> None:
    from compiler.graph import Value
    from compiler.graph_builder import promote

    u8, i8 = Value((2,), DType.u8, "x"), Value((2,), DType.i8, "w")
    assert promote((u8, i8)) is DType.i32  # torch: int16, which the IR has not
    assert promote((u8, 3)) is DType.u8  # a python int keeps the tensor's type


def test_float8_weight_only_reads_each_weight_at_one_byte_scaled_on_the_way_in() -> None:
    # torchao exports (w_e4m3.t().to(f32) * scale.t()).to(bf16) before the matmul: the
    # arrays widen each e4m3 weight, scale it per column in f32 and round it to bf16 on
    # the way in, as torch does (a functional run checks the numbers against CPU)
    result = _run(_model(quantization.Float8WeightOnlyConfig))
    assert result.host_cycles == 0
    assert dict(result.matmul_flops_by_dtypes) == {
        (DType.bf16, DType.e4m3): 2 * M * (K * H + H * N)}
    weights = K * H + H * N  # one byte each, read once; no dequantized copy written
    others = 8 * (M * K * 2) + 8 * (M * H * 2) + 2 * (H + N) + 4 * (H + N) * 2
    assert weights <= result.dram_bytes_read <= weights + others
    assert result.dram_bytes_written <= 8 * (M * H * 2 + M * N * 2)


class _RowScaled(torch.nn.Module):
    """e4m3 weights [K, N] times a scale per k row ([K, 1], K == N): not a column scale."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(4)
        self.register_buffer("w", torch.randn(64, 64).to(torch.float8_e4m3fn))
        self.register_buffer("s", torch.rand(64, 1) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ (self.w.to(torch.float32) * self.s).to(torch.bfloat16)


def test_a_scale_per_k_row_is_not_taken_for_one_per_column() -> None:
    from compiler.ir.ops import MatMul

    x = torch.randn(8, 64, dtype=torch.bfloat16)
    result = run(Workload.of_module(_RowScaled(), (x,)), "tiny", mode="functional")
    # numbers checked against torch; the weights were scaled on the vector unit first
    assert not [c for c in result.program.commands
                if isinstance(c.op, MatMul) and c.op.dequant is not None]
