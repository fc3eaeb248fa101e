"""Other ways kernels address memory: block pointers (RBLN's style; Triton 3.8 still has
them), tensor descriptors, 3-D dots and static loops."""

import torch
import triton
import triton.language as tl

from triton_helpers import simulate


@triton.jit
def block_ptr_scale_kernel(x_ptr, out_ptr, rows, cols, BR: tl.constexpr, BC: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_block_ptr(x_ptr, shape=(rows, cols), strides=(cols, 1),
                            offsets=(pid * BR, 0), block_shape=(BR, BC), order=(1, 0))
    dst = tl.make_block_ptr(out_ptr, shape=(rows, cols), strides=(cols, 1),
                            offsets=(pid * BR, 0), block_shape=(BR, BC), order=(1, 0))
    for _ in tl.static_range(2):
        tile = tl.load(src, boundary_check=(0, 1), padding_option="zero")
        tl.store(dst, tile * 3.0, boundary_check=(0, 1))
        src = tl.advance(src, (0, BC))
        dst = tl.advance(dst, (0, BC))


@triton.jit
def descriptor_copy_kernel(x_ptr, out_ptr, rows, cols, BR: tl.constexpr, BC: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_tensor_descriptor(x_ptr, shape=[rows, cols], strides=[cols, 1],
                                    block_shape=[BR, BC])
    dst = tl.make_tensor_descriptor(out_ptr, shape=[rows, cols], strides=[cols, 1],
                                    block_shape=[BR, BC])
    dst.store([pid * BR, 0], src.load([pid * BR, 0]) + 1.0)


@triton.jit
def batched_dot_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr, M: tl.constexpr,
                       K: tl.constexpr, N: tl.constexpr):
    b = tl.arange(0, B)[:, None, None]
    m = tl.arange(0, M)[None, :, None]
    k = tl.arange(0, K)
    n = tl.arange(0, N)[None, None, :]
    a = tl.load(a_ptr + b * M * K + m * K + k[None, None, :])
    w = tl.load(b_ptr + b * K * N + k[None, :, None] * N + n)
    tl.store(c_ptr + b * M * N + m * N + n, tl.dot(a, w))


def test_block_pointers_with_boundary_checks_and_advance():
    torch.manual_seed(7)
    x = torch.randn(20, 48)
    sim, _, program = simulate(block_ptr_scale_kernel, (x, torch.empty(20, 48), 20, 48),
                               {"BR": 16, "BC": 32}, (2,))
    torch.testing.assert_close(sim["out_ptr"], x * 3, rtol=0, atol=0)


def test_tensor_descriptors():
    torch.manual_seed(8)
    x = torch.randn(32, 32)
    sim, _, _ = simulate(descriptor_copy_kernel, (x, torch.empty(32, 32), 32, 32),
                         {"BR": 16, "BC": 32}, (2,))
    torch.testing.assert_close(sim["out_ptr"], x + 1, rtol=0, atol=0)


def test_batched_dot_runs_one_matmul_per_batch_entry():
    torch.manual_seed(9)
    a, b = torch.randn(2, 16, 16), torch.randn(2, 16, 16)
    sim, _, program = simulate(batched_dot_kernel, (a, b, torch.empty(2, 16, 16)),
                               {"B": 2, "M": 16, "K": 16, "N": 16}, (1,))
    torch.testing.assert_close(sim["c_ptr"], a @ b, rtol=1e-4, atol=1e-4)
    assert sum(c.op.__class__.__name__ == "MatMul" for c in program.program.commands) == 2
