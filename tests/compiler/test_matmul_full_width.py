"""A one-row matmul no wider than an array is split by K over every array of the core
(:func:`compiler.kernels.matmul_split.full_width`), not spread over them in narrow
columns: at one row a weight-stationary fold takes its ``rows`` cycles to shift the
weights in however few columns it holds, so Llama-2-70B's K and V projections on 8
tpu-v4 chips (8,192 x 128 a chip), spread 32 columns an array, took 10,321 cycles in
bf16 and 10,372 in int4."""

from __future__ import annotations

import pytest
import torch

import compiler
from archsim.config import load_config
from compiler.compile import clear_cache
from compiler.cost import Cost, MatmulTiling
from compiler.ir.ops import Binary, MatMul
from compiler.kernels.matmul_split import full_width
from serving.quant import Int4WeightOnlyLinear

TPU_V4 = load_config("tpu-v4")


def _gemv(fmt: str, k: int, n: int) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    linear = torch.nn.Linear(k, n, bias=False)
    module = Int4WeightOnlyLinear.of(linear, torch.bfloat16, 128) if fmt == "int4" \
        else linear.to(torch.bfloat16)
    return module.eval(), torch.randn(1, k, dtype=torch.bfloat16)


@pytest.mark.parametrize("fmt, k_step, steps", [("bf16", 1024, 2), ("int4", 2048, 1)])
def test_a_gemv_one_array_wide_is_split_by_k_over_the_cores_arrays(
        fmt: str, k_step: int, steps: int) -> None:
    module, x = _gemv(fmt, 8192, 128)
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(module, (x,)), TPU_V4)
    (out,), result = compiled.run(x)
    # one bf16 unit apart at most where the partial sums are added in another order
    torch.testing.assert_close(out, module(x), rtol=1.6e-2, atol=8e-3)
    matmuls = [c for c in compiled.program.commands if isinstance(c.op, MatMul)]
    # each of core 0's 4 arrays takes all 128 columns over its quarter of K (2,048 rows,
    # in k steps as long as its B buffer holds), 16 folds of 128 rows each
    assert sorted({c.engine for c in matmuls}) == [f"core0.mxu{a}" for a in range(4)]
    assert {c.op.columns for c in matmuls} == {128}
    assert {c.op.a.shape[-1] for c in matmuls} == {k_step}
    assert len(matmuls) == 4 * steps
    # and the vector unit adds the three other arrays' partial sums into the first's
    assert sum(isinstance(c.op, Binary) for c in compiled.program.commands) == 3
    # 16 folds an array shift 2,048 x 128 weights in at least 2,048 cycles, against 64
    # folds of 32 columns spread (8,192 cycles an array)
    assert 2048 <= max(result.engine_busy_cycles[f"core0.mxu{a}"] for a in range(4)) < 3000


def test_only_a_tiling_narrower_than_an_array_for_at_most_its_width_is_widened() -> None:
    spread = MatmulTiling(mt=1, kt=1024, nt=32, arrays=4, acc_sets=1, cost=Cost())
    wide = full_width(TPU_V4, spread, 128, 4)
    assert (wide.nt, wide.arrays, wide.kt) == (128, 4, 1024)
    assert full_width(TPU_V4, spread, 129, 4) is None  # wider than one array
    assert full_width(TPU_V4, spread, 128, 1) is None  # nothing to split K over
    # a tiling whose arrays hold the columns keeps its width, on every array
    held = MatmulTiling(mt=1, kt=1024, nt=64, arrays=2, acc_sets=1, cost=Cost())
    assert full_width(TPU_V4, held, 64, 2) is None
    assert (full_width(TPU_V4, held, 64, 4).nt, full_width(TPU_V4, held, 64, 4).arrays) == \
        (64, 4)


def test_a_tiling_that_holds_the_columns_is_not_widened_on_tpu_v3() -> None:
    # tpu-v3 (one core, two arrays), int4 with the vector share: the arrays keep 64 of
    # the 128 columns in a tile 64 wide on both arrays, already split by K; widening it
    # to 128 only lengthened the split's k step (6,106 -> 6,441 cycles)
    module, x = _gemv("int4", 8192, 128)
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(module, (x,)), load_config("tpu-v3"))
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, module(x), rtol=1.6e-2, atol=8e-3)
    matmuls = [c for c in compiled.program.commands if isinstance(c.op, MatMul)]
    assert {c.op.columns for c in matmuls} == {64}
