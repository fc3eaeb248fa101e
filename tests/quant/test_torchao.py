"""torchao-quantized models (issue 30) on the npu device: ``Int8WeightOnlyConfig`` and
``Int8DynamicActivationInt8WeightConfig`` run eagerly and under ``torch.compile`` with no
host work, the int8 matmuls on the arrays, and the numbers of the same model on CPU."""

from __future__ import annotations

import warnings

import pytest
import torch

import torch_bridge
from archsim.errors import LoweringError
from compiler.ir.dtypes import DType

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torchao warns about its CUDA-only extensions
    quantization = pytest.importorskip(
        "torchao.quantization", reason="torchao is not installed (pip install archsim[quant])")

CONFIGS = {"weight-only": quantization.Int8WeightOnlyConfig,
           "dynamic": quantization.Int8DynamicActivationInt8WeightConfig}
M, K, H, N = 4, 64, 32, 16


def _model(config: str, dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(K, H), torch.nn.ReLU(),
                                torch.nn.Linear(H, N)).to(dtype)
    quantization.quantize_(model, CONFIGS[config]())
    return model


def _check(out: torch.Tensor, expected: torch.Tensor, config: str,
           dtype: torch.dtype) -> None:
    if config == "weight-only" and dtype == torch.float32:
        # torchao widens the weights and calls mm: f32 sums in another order than CPU's
        torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)
    else:  # int8 x int8 -> int32 exact; bf16 results rounded once from the same f32
        assert torch.equal(out, expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_eager_npu_matches_cpu_with_no_host_work(config: str, dtype: torch.dtype) -> None:
    model = _model(config, dtype)
    x = torch.randn(M, K, dtype=dtype)
    expected = model(x)
    model.to("npu")
    with torch_bridge.profile() as prof:
        out = model(x.to("npu"))
    _check(out.cpu(), expected, config, dtype)
    assert prof.result.host_cycles == 0
    # both layers' products on the arrays (dynamic: int8 x int8 -> int32, _int_mm)
    assert prof.result.matmul_flops == 2 * M * (K * H + H * N)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_compiled_npu_matches_cpu_with_no_host_work(config: str) -> None:
    model = _model(config, torch.bfloat16)
    x = torch.randn(M, K, dtype=torch.bfloat16)
    expected = model(x)
    torch._dynamo.reset()
    compiled = torch.compile(model.to("npu"), backend="archsim")
    with torch_bridge.profile() as prof:
        out = compiled(x.to("npu"))
    assert torch.equal(out.cpu(), expected)
    assert prof.result.host_cycles == 0
    assert prof.result.matmul_flops == 2 * M * (K * H + H * N)


def test_printing_an_npu_tensor_is_one_copy_not_a_read_per_element() -> None:
    # torchao formats its int8 activations on every call ("FakeTensor" in repr(x))
    x = torch.arange(-8, 8, dtype=torch.int8).reshape(4, 4).to("npu")
    with torch_bridge.profile() as prof:
        text = repr(x)
    assert text == repr(x.cpu()).replace("dtype=", "device='npu:0', dtype=")
    assert prof.result.host_cycles == 0
    assert prof.result.host_link_bytes == 16  # the 16 int8 elements, once


def test_out_dtype_other_than_int8_mm_is_refused_by_the_lowering() -> None:
    from compiler.lowerings.matmul import lower_out_dtype

    with pytest.raises(LoweringError, match=r"only mm of i8 x i8 -> torch\.int32"):
        lower_out_dtype(None, torch.ops.aten.mm.default, torch.float32,  # type: ignore[arg-type]
                        _FakeValue(), _FakeValue())


class _FakeValue:
    """A stand-in graph value: only its dtype is read before the refusal."""

    dtype = DType.bf16


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_estimate_of_an_npu_resident_model_runs_the_int8_matmuls_on_the_arrays(
        config: str) -> None:
    import archsim

    model = _model(config, torch.bfloat16).to("npu")
    result = archsim.estimate(model, torch.randn(M, K, dtype=torch.bfloat16).to("npu"))
    assert result.host_cycles == 0
    assert result.matmul_flops == 2 * M * (K * H + H * N)
