"""Where a weight-only matmul's dequantization happens (issue 30): ``core.matrix.dequant``
``input_path`` (the arrays widen and scale the weights as they read them: no vector
work) or ``vector`` (the vector unit unpacks and scales each k step's tile into the
activations' dtype in the scratchpad, and a plain multiply reads it). Weights are read from DRAM at their
packed size either way, and the numbers are torch's either way.

Vector cycles are hand-derived on ``tiny`` (4 lanes, 2 cycles of pipeline latency, one
cycle per element per lane for elementwise ops, casts and copies, two for remainder):
a command takes ``2 + elements / 4 * cost``.
"""

from __future__ import annotations

import pytest
import torch

from archsim.config import load_config
from archsim.errors import ConfigError
from compiler import CompileOptions
from compiler import compile as compile_module
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.ir.ops import Cast, Dequantize, Load, MatMul, Store

aten = torch.ops.aten
TINY = load_config("tiny")
LANES, LATENCY = TINY.core.vector.lanes, TINY.core.vector.pipeline_latency_cycles
N, K, GROUP, M = 64, 128, 32, 2


def _tiny(placement: str):
    return TINY.with_overrides({"core.matrix.dequant": placement})


class _Int4Mm(torch.nn.Module):
    def forward(self, x, w, s):
        return aten._weight_int4pack_mm_for_cpu(x, w, GROUP, s)


class _Int8Mm(torch.nn.Module):
    def forward(self, x, w, s):
        return aten._weight_int8pack_mm(x, w, s)


def _int4_inputs(dtype: torch.dtype = torch.float32):
    torch.manual_seed(0)
    codes = torch.randint(0, 16, (N, K), dtype=torch.int32)
    packed = aten._convert_weight_to_int4pack_for_cpu(codes, 1)  # uint8 [N, K/2]
    return torch.randn(M, K, dtype=dtype), packed, torch.randn(K // GROUP, N, 2, dtype=dtype)


def _int8_inputs(dtype: torch.dtype = torch.float32):
    torch.manual_seed(1)
    return (torch.randn(M, K, dtype=dtype), torch.randint(-128, 128, (N, K), dtype=torch.int8),
            torch.rand(N, dtype=dtype) + 0.5)


def _compiled(module: torch.nn.Module, inputs: tuple, placement: str):
    """Compiled on tiny with ``placement``, every column on the arrays (the vector
    units' share of a GEMV is tested in ``test_vector_share``)."""
    compile_module.clear_cache()
    exported = torch.export.export(module, inputs).run_decompositions()
    return compile_module.compile_graph(exported, _tiny(placement),
                                        CompileOptions(vector_share=False))


def _vector_commands(compiled) -> list:
    return [c for c in compiled.program.commands if c.engine.endswith(".vpu")]


def _weight_bytes_loaded(compiled) -> int:
    weight = compiled.input_names[1]
    return sum(c.op.dst.nbytes for c in compiled.program.commands
               if isinstance(c.op, Load) and c.op.src.tensor == weight)


def _vector_busy(result) -> int:
    return sum(v for e, v in result.engine_busy_cycles.items() if e.endswith(".vpu"))


@pytest.mark.parametrize("placement", ["input_path", "vector"])
def test_int4_weights_are_read_at_half_a_byte_and_match_torch(placement: str) -> None:
    inputs = _int4_inputs()
    compiled = _compiled(_Int4Mm(), inputs, placement)
    assert _weight_bytes_loaded(compiled) == N * K // 2
    (out,), _ = compiled.run(*inputs)
    torch.testing.assert_close(out, aten._weight_int4pack_mm_for_cpu(
        inputs[0], inputs[1], GROUP, inputs[2]), rtol=1e-5, atol=1e-4)


def test_int4_in_the_input_path_is_no_vector_work() -> None:
    inputs = _int4_inputs()
    compiled = _compiled(_Int4Mm(), inputs, "input_path")
    matmuls = [c.op for c in compiled.program.commands if isinstance(c.op, MatMul)]
    assert matmuls and all(op.dequant is not None and op.b.dtype is DType.u8
                           for op in matmuls)
    # f32 activations on f32 arrays: nothing to round either
    assert _vector_commands(compiled) == []
    _, result = compiled.run(*inputs)
    assert _vector_busy(result) == 0


def test_int4_on_the_vector_unit_costs_five_passes_a_weight_a_tile_at_a_time() -> None:
    inputs = _int4_inputs()
    compiled = _compiled(_Int4Mm(), inputs, "vector")
    matmuls = [c.op for c in compiled.program.commands if isinstance(c.op, MatMul)]
    assert matmuls and all(op.dequant is None and op.b.dtype is DType.f32 for op in matmuls)
    # each k step's packed tile is dequantized in the scratchpad right before its
    # multiply, no copy in DRAM: the only vector commands, each weight once (M = 2 rows:
    # one row block), its bytes loaded once
    commands = _vector_commands(compiled)
    assert commands and all(isinstance(c.op, Dequantize) for c in commands)
    assert sum(c.op.dst.shape[0] * c.op.dst.shape[1] for c in commands) == N * K
    stores = [c.op for c in compiled.program.commands if isinstance(c.op, Store)]
    assert sum(op.src.shape[0] * op.src.shape[1] for op in stores) == M * N  # the result
    # per weight: the byte's two nibbles split (half an op each), widened, scaled, the
    # zero added, rounded: 5 element ops, 4 lanes
    _, result = compiled.run(*inputs)
    assert _vector_busy(result) == 5 * N * K // LANES + LATENCY * len(commands)


@pytest.mark.parametrize("placement", ["input_path", "vector"])
def test_int8_weights_are_read_at_one_byte_and_match_torch(placement: str) -> None:
    inputs = _int8_inputs()
    compiled = _compiled(_Int8Mm(), inputs, placement)
    assert _weight_bytes_loaded(compiled) == N * K
    (out,), _ = compiled.run(*inputs)
    # f32: the sums' order differs from torch's kernel
    torch.testing.assert_close(out, aten._weight_int8pack_mm(*inputs), rtol=1e-5, atol=1e-3)


def _widenings(compiled) -> list:
    """Vector casts of int8 weights."""
    return [c for c in _vector_commands(compiled)
            if isinstance(c.op, Cast) and c.op.src.dtype is DType.i8]


def test_int8_is_widened_by_the_arrays_or_by_one_vector_cast_a_weight() -> None:
    inputs = _int8_inputs()
    in_path = _compiled(_Int8Mm(), inputs, "input_path")
    matmuls = [c.op for c in in_path.program.commands if isinstance(c.op, MatMul)]
    assert matmuls and all(op.b.dtype is DType.i8 for op in matmuls)
    assert _widenings(in_path) == []
    _, in_path_result = in_path.run(*inputs)

    vector = _compiled(_Int8Mm(), inputs, "vector")
    matmuls = [c.op for c in vector.program.commands if isinstance(c.op, MatMul)]
    assert matmuls and all(op.b.dtype is DType.f32 for op in matmuls)
    casts = _widenings(vector)
    assert sum(c.op.dst.shape[0] * c.op.dst.shape[1] for c in casts) == N * K
    _, vector_result = vector.run(*inputs)
    # the rest of the vector work (scaling the [M, N] result) is the same in both
    widen = N * K // LANES + LATENCY * len(casts)
    assert _vector_busy(vector_result) - _vector_busy(in_path_result) == widen


def test_bf16_int4_gives_the_same_bits_in_both_placements() -> None:
    # both round each weight to bf16 from the same f32 value * scale + zero; torch
    # keeps it in f32, so against torch: within the weights' rounding (2**-9 relative)
    # and one bf16 ulp of the result (as tests/quant/test_int4.py bounds it)
    x, packed, sz = inputs = _int4_inputs(torch.bfloat16)
    (in_path,), _ = _compiled(_Int4Mm(), inputs, "input_path").run(*inputs)
    (vector,), _ = _compiled(_Int4Mm(), inputs, "vector").run(*inputs)
    assert torch.equal(in_path, vector)
    expected = aten._weight_int4pack_mm_for_cpu(x, packed, GROUP, sz).float()
    codes = torch.randint(0, 16, (N, K), dtype=torch.int32, generator=torch.Generator()
                          .manual_seed(0))
    scale = sz[..., 0].float().repeat_interleave(GROUP, 0).T
    zero = sz[..., 1].float().repeat_interleave(GROUP, 0).T
    weight = (codes.float() - 8) * scale + zero
    bound = 2.0 ** -9 * (x.float().abs() @ weight.abs().T) + 2.0 ** -7 * expected.abs()
    assert bool(((vector.float() - expected).abs() <= bound).all())


class _Fp8WeightOnly(torch.nn.Module):
    """torchao's float8 weight-only layer as it exports: e4m3 weights [N, K] widened,
    scaled per output column and rounded to bf16 before the matmul."""

    def forward(self, x, w, s):
        return x @ (w.t().to(torch.float32) * s.t()).to(torch.bfloat16)


@pytest.mark.parametrize("placement", ["input_path", "vector"])
def test_fp8_weight_only_is_read_at_one_byte_and_matches_torch(placement: str) -> None:
    torch.manual_seed(2)
    inputs = (torch.randn(M, K, dtype=torch.bfloat16),
              torch.randn(N, K).to(torch.float8_e4m3fn), torch.rand(N, 1) + 0.5)
    compiled = _compiled(_Fp8WeightOnly(), inputs, placement)
    assert _weight_bytes_loaded(compiled) == N * K
    matmuls = [c.op for c in compiled.program.commands if isinstance(c.op, MatMul)]
    narrow = DType.e4m3 if placement == "input_path" else DType.bf16
    assert matmuls and all(op.b.dtype is narrow for op in matmuls)
    (out,), _ = compiled.run(*inputs)
    torch.testing.assert_close(out, _Fp8WeightOnly()(*inputs))


def test_an_unknown_placement_is_named_with_the_accepted_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        TINY.with_overrides({"core.matrix.dequant": "vpu"})
    assert caught.value.problems == (
        "core.matrix.dequant: 'vpu' is not one of input_path, vector",)


def test_every_preset_says_where_it_dequantizes() -> None:
    from importlib import resources

    from archsim.config.load import preset_names

    for name in preset_names():
        text = resources.files("archsim.config.presets").joinpath(f"{name}.yaml").read_text(
            encoding="utf-8")
        line = next(ln for ln in text.splitlines() if ln.strip().startswith("dequant:"))
        assert "# public" in line or "# estimate" in line, (name, line)


@pytest.mark.parametrize("config", ["Int8WeightOnlyConfig", "Float8WeightOnlyConfig"])
def test_torchao_weight_only_layers_dequantize_on_the_vector_unit(config: str) -> None:
    # torchao's exported patterns (mm of widened int8, or of scaled e4m3 rounded to
    # bf16) take the vector placement too; a functional run checks the numbers
    import warnings

    from archsim.app.pipeline import run
    from archsim.app.workload import Workload

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchao warns about its CUDA-only extensions
        quantization = pytest.importorskip("torchao.quantization")
    torch.manual_seed(0)
    model = torch.nn.Linear(K, N, bias=False).to(torch.bfloat16)
    quantization.quantize_(model, getattr(quantization, config)())
    x = torch.randn(M, K, dtype=torch.bfloat16)
    result = run(Workload.of_module(model, (x,)), _tiny("vector"), mode="functional")
    assert result.host_cycles == 0
    matmuls = [c.op for c in result.program.commands if isinstance(c.op, MatMul)]
    assert matmuls and all(op.b.dtype is DType.bf16 and op.dequant is None for op in matmuls)
    # the one-byte weights are read once by the vector unit, which writes them in bf16
    # (int8 widened, fp8 scaled as well)
    widened = [c.op for c in result.program.commands if c.engine.endswith(".vpu")
               and isinstance(c.op, (Cast, Dequantize)) and c.op.src.dtype.itemsize == 1]
    assert sum(op.src.shape[0] * op.src.shape[1] for op in widened) == N * K


class _IntMm(torch.nn.Module):
    def forward(self, x, w):
        return torch._int_mm(x, w)


def test_the_vector_placement_widens_weight_only_matmuls_only() -> None:
    # int8 x int8 (W8A8's torch._int_mm) runs in the arrays' int8 mode: nothing to widen
    torch.manual_seed(3)
    inputs = (torch.randint(-128, 128, (32, K), dtype=torch.int8),
              torch.randint(-128, 128, (K, N), dtype=torch.int8))
    compiled = _compiled(_IntMm(), inputs, "vector")
    matmuls = [c.op for c in compiled.program.commands if isinstance(c.op, MatMul)]
    assert matmuls and all(op.a.dtype is DType.i8 and op.b.dtype is DType.i8
                           for op in matmuls)
    assert not any(isinstance(c.op, (Cast, Dequantize)) for c in _vector_commands(compiled))
    (out,), _ = compiled.run(*inputs)
    assert torch.equal(out, torch._int_mm(*inputs))


def test_a_widened_tile_is_the_matmuls_own_work() -> None:
    # the vector unit's casts are charged to the matmul that needs them
    compiled = _compiled(_Int8Mm(), _int8_inputs(), "vector")
    casts = _widenings(compiled)
    sources = {c.source for c in compiled.program.commands if isinstance(c.op, MatMul)}
    assert casts and len(sources) == 1 and {c.source for c in casts} == sources


class _ScaledMm(torch.nn.Module):
    def forward(self, x, w, sx, sw):
        return torch._scaled_mm(x, w, sx, sw, out_dtype=torch.bfloat16)


def test_fp8_by_fp8_is_not_a_weight_only_matmul() -> None:
    # both operands one byte: the arrays take them as they are (in their fp8 mode, or
    # widened on the way in at the native rate); the vector unit reads no one-byte tile
    torch.manual_seed(4)
    x = torch.randn(16, K).to(torch.float8_e4m3fn)
    w = torch.randn(N, K).to(torch.float8_e4m3fn).t()
    inputs = (x, w, torch.tensor(0.5), torch.tensor(2.0))
    compiled = _compiled(_ScaledMm(), inputs, "vector")
    assert not [c for c in _vector_commands(compiled)
                if isinstance(getattr(c.op, "src", None), SramRef)
                and c.op.src.dtype.itemsize == 1]
    (out,), _ = compiled.run(*inputs)
    torch.testing.assert_close(out, _ScaledMm()(*inputs), rtol=2e-2, atol=2e-2)
