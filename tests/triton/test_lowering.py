"""What the lowering emits, derived by hand: DMA boxes and bytes, matrix-engine cycles,
masked edges, transposed loads, and shape-only traces."""

import math

import pytest
import torch
import triton
import triton.language as tl

import flash_attention
import matmul
import vector_add
from archsim.config import load_config
from archsim.errors import TritonError
from compiler.ir.operands import Scalar
from compiler.ir.ops import Binary, Load, MatMul, Store
from compiler.triton import compile_launch
from triton_helpers import simulate


def _dma_bytes(program, kind):
    return sum(math.prod(c.op.dst.shape if kind is Load else c.op.src.shape) *
               (c.op.dst.dtype if kind is Load else c.op.src.dtype).itemsize
               for c in program.program.commands if isinstance(c.op, kind))


def test_vector_add_boxes_and_the_clipped_edge():
    n = 1000
    _, result, program = simulate(vector_add.add_kernel,
                                  (torch.randn(n), torch.randn(n), torch.empty(n), n),
                                  {"BLOCK": 256}, (4,))
    loads = [c.op for c in program.program.commands if isinstance(c.op, Load)]
    assert [(l.src.tensor, l.src.slices[0].start, l.src.slices[0].stop) for l in loads] == [
        ("x_ptr", 0, 256), ("y_ptr", 0, 256), ("x_ptr", 256, 512), ("y_ptr", 256, 512),
        ("x_ptr", 512, 768), ("y_ptr", 512, 768), ("x_ptr", 768, 1000), ("y_ptr", 768, 1000)]
    # the clipped block's other 24 lanes are filled (with 0: no `other` given) first
    fills = [c for c in program.program.commands if isinstance(c.op, Binary) and
             c.op.a == Scalar(0.0) and c.op.b == Scalar(0.0)]
    assert len(fills) == 2 and all(c.engine == "core3.vpu" for c in fills)
    # each program on its own core (4 programs, 8 cores)
    assert {c.engine.split(".")[0] for c in program.program.commands} == {
        "core0", "core1", "core2", "core3"}
    assert (result.dram_bytes_read, result.dram_bytes_written) == (2 * n * 4, n * 4)


def test_matmul_moves_exactly_the_blocks_its_masks_keep():
    m, k, n = 100, 70, 50
    a, b = torch.randn(m, k), torch.randn(k, n)
    _, _, program = simulate(matmul.matmul_kernel, (a, b, torch.empty(m, n), m, n, k),
                             {"BM": 64, "BN": 32, "BK": 32}, (2, 2))
    # A is read once per column block (2), B once per row block (2), C written once
    assert _dma_bytes(program, Load) == (m * k * 2 + k * n * 2) * 4
    assert _dma_bytes(program, Store) == m * n * 4


def test_matmul_matrix_cycles_are_the_systolic_closed_form():
    # atom: one 64 x 32 weight-stationary array per core, f16 in, f32 accumulate.
    # One 64x64 @ 64x64 dot: Sr = k = 64 rows, Sc = n = 64 -> 2 column folds, T = m = 64;
    # per fold 2R + C + T - 2 = 128 + 32 + 64 - 2 = 222 cycles -> 444 per dot.
    # 128^3 with 64^3 blocks: 4 programs (one per core) x 2 k-steps.
    a, b = (torch.randn(128, 128, dtype=torch.float16) for _ in range(2))
    args = (a, b, torch.empty(128, 128, dtype=torch.float16), 128, 128, 128)
    _, result, program = simulate(matmul.matmul_kernel, args, {"BM": 64, "BN": 64, "BK": 64},
                                  (2, 2))
    busy = {e: c for e, c in result.engine_busy_cycles.items() if ".mxu" in e}
    assert busy == {f"core{i}.mxu0": 2 * 444 for i in range(4)}
    # the second k-step accumulates on the array, no vector add
    matmuls = [c.op for c in program.program.commands if isinstance(c.op, MatMul)]
    assert [mm.accumulate for mm in matmuls] == [False, True] * 4


def test_shape_only_trace_of_meta_tensors_times_like_the_run_with_data():
    args = (torch.randn(128, 128, dtype=torch.float16),
            torch.randn(128, 128, dtype=torch.float16),
            torch.empty(128, 128, dtype=torch.float16), 128, 128, 128)
    _, with_data, _ = simulate(matmul.matmul_kernel, args, {"BM": 64, "BN": 64, "BK": 64},
                               (2, 2))
    meta = tuple(torch.empty(128, 128, dtype=torch.float16, device="meta") for _ in range(3))
    shape_only = compile_launch(matmul.matmul_kernel, (*meta, 128, 128, 128),
                                {"BM": 64, "BN": 64, "BK": 64}, (2, 2), load_config("atom"))
    assert shape_only.simulate().total_cycles == with_data.total_cycles


def test_keys_used_transposed_are_loaded_transposed_by_the_dma():
    q, k, v = (torch.randn(1, 1, 64, 64) for _ in range(3))
    _, _, program = simulate(flash_attention.flash_attention_naive_prefill_kernel,
                             (q, k, v, torch.empty_like(q), 0.125, 64),
                             {"BM": 64, "BN": 64, "D": 64}, (1, 1))
    k_loads = [c.op for c in program.program.commands
               if isinstance(c.op, Load) and c.op.src.tensor == "k_ptr"]
    assert len(k_loads) == 1 and k_loads[0].dst.strides == (0, 0, 1, 64)
    assert not any(c.op.__class__.__name__ == "Transpose" for c in program.program.commands)


def test_causal_mask_is_only_applied_on_the_diagonal_block():
    q, k, v = (torch.randn(1, 1, 128, 64) for _ in range(3))
    _, _, program = simulate(flash_attention.flash_attention_naive_prefill_kernel,
                             (q, k, v, torch.empty_like(q), 0.125, 128),
                             {"BM": 64, "BN": 64, "D": 64}, (2, 1))
    # the mask's selects are tl.where(mask, qk, -inf); the others keep tl.max and
    # tl.maximum from NaN (they choose between tiles)
    selects = [c for c in program.program.commands if c.op.__class__.__name__ == "Select"
               and isinstance(c.op.b, Scalar)]
    # query block 0 sees key block 0 (diagonal); block 1 sees 0 (all kept) and 1 (diagonal)
    assert len(selects) == 2
    assert len(program.constants) == 1  # one 64 x 64 lower-triangular mask, shared


@triton.jit
def int8_matmul_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr,
                       K: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, BK)
    acc = tl.zeros((M, N), dtype=tl.int32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def f16_dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    b = tl.load(b_ptr + r[:, None] * N + r[None, :])
    tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b, out_dtype=tl.float16))


def test_int8_dot_accumulates_in_i32_bit_exact():
    """Triton types int8 x int8 as i32 (extremes included: -128 * -128 * 64 overflows
    no i32): the arrays multiply them and accumulate across the K loop."""
    torch.manual_seed(8)
    a = torch.randint(-128, 128, (32, 64), dtype=torch.int8)
    b = torch.randint(-128, 128, (64, 16), dtype=torch.int8)
    a[0, :] = -128
    b[:, 0] = -128
    sim, _, program = simulate(int8_matmul_kernel,
                               (a, b, torch.empty(32, 16, dtype=torch.int32)),
                               {"M": 32, "N": 16, "K": 64, "BK": 32}, (1,))
    assert torch.equal(sim["c_ptr"], torch._int_mm(a, b))
    matmuls = [c.op for c in program.program.commands if isinstance(c.op, MatMul)]
    assert len(matmuls) == 2
    assert {(m.a.dtype.value, m.out.dtype.value) for m in matmuls} == {("i8", "i32")}


def test_a_float_dot_into_f16_is_refused_with_what_works():
    args = (torch.randn(16, 16, dtype=torch.float16),
            torch.randn(16, 16, dtype=torch.float16),
            torch.empty(16, 16, dtype=torch.float16))
    with pytest.raises(TritonError, match=r"f16_dot_kernel .*:\d+\): tl.dot of f16 into f16 "
                       r"\(the matrix arrays accumulate floats in f32; use "
                       r"out_dtype=tl.float32\) cannot be lowered to the NPU"):
        compile_launch(f16_dot_kernel, args, {"N": 16}, (1,), load_config("atom"))
