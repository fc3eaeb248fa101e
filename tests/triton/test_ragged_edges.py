"""Ragged edges as Triton's tutorial 03 and vLLM write them: ``offs % M`` wraps the last
tile's rows back to the top (re-read, never stored) and ``tl.where(offs < N, offs, 0)``
clamps them to row 0; only the K loop is masked. Both are boxes with padding (a wrapped
tile is two runs), and the result matches torch on shapes that are not block multiples."""

import pytest
import torch
import triton
import triton.language as tl

import torch_bridge  # noqa: F401  (the npu device)


@triton.jit
def grouped_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                          stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, CLAMP: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_n
    first_m = (pid // in_group) * GROUP_M
    group_size = min(num_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % in_group) % group_size)
    pid_n = (pid % in_group) // group_size
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if CLAMP:
        offs_am = tl.where(rows < M, rows, 0)
        offs_bn = tl.where(cols < N, cols, 0)
    else:
        offs_am = rows % M
        offs_bn = cols % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + stride_cm * rows[:, None] + stride_cn * cols[None, :]
    tl.store(c_ptrs, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


def grouped_matmul(a: torch.Tensor, b: torch.Tensor, clamp: bool = False, block: int = 64
                   ) -> torch.Tensor:
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), dtype=torch.float32, device=a.device)
    grid = (triton.cdiv(M, block) * triton.cdiv(N, block),)
    grouped_matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                b.stride(1), c.stride(0), c.stride(1), BLOCK_M=block,
                                BLOCK_N=block, BLOCK_K=32, GROUP_M=4, CLAMP=clamp)
    return c


@pytest.mark.parametrize("clamp", [False, True], ids=["wrap", "clamp"])
def test_tutorial_matmul_on_a_ragged_shape_matches_torch(clamp):
    torch.manual_seed(3)
    a, b = torch.randn(500, 300), torch.randn(300, 512)
    out = grouped_matmul(a.to("npu"), b.to("npu"), clamp)
    torch.testing.assert_close(out.cpu(), a @ b, rtol=1e-4, atol=1e-3)


def test_a_wrapped_tile_is_two_runs_and_a_clamped_one_reads_row_zero_per_row():
    """500x300 @ 300x512 in 64x64 tiles, K in 10 steps of 32: 8 x 8 programs each load
    one A and one B box per step, except the last row of tiles (rows 448..511): wrapped,
    its A tile is rows 448..499 then 0..11 (2 runs); clamped, rows 448..499 then row 0
    twelve times (1 + 12 reads, a repeated row is not a box)."""
    from archsim.config import load_config
    from compiler.triton import compile_launch

    a, b, c = torch.randn(500, 300), torch.randn(300, 512), torch.empty(500, 512)
    counts = []
    for clamp in (False, True):
        program = compile_launch(grouped_matmul_kernel,
                                 (a, b, c, 500, 512, 300, 300, 1, 512, 1, 512, 1),
                                 {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 4,
                                  "CLAMP": clamp}, (64,), load_config("atom"))
        counts.append(sum(type(cmd.op).__name__ == "Load" for cmd in program.program.commands))
    assert counts == [64 * 10 * 2 + 8 * 10 * 1, 64 * 10 * 2 + 8 * 10 * 12]


@triton.jit
def packed_keys_kernel(k_cache, table, out, n, heads: tl.constexpr, PAGE: tl.constexpr,
                       X: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr):
    """K^T of n tokens (a [D, BLOCK_N] tile) from a cache packed as [blocks, heads,
    D // X, PAGE, X] (prefix_prefill's layout), pages from a block table."""
    head = tl.program_id(0)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    block = tl.load(table + offs_n // PAGE, mask=offs_n < n, other=0)
    off = (block[None, :] * (heads * D * PAGE) + head * (D * PAGE)
           + (offs_d[:, None] // X) * (PAGE * X) + (offs_n[None, :] % PAGE) * X
           + offs_d[:, None] % X)
    k = tl.load(k_cache + off, mask=offs_n[None, :] < n, other=0.0)
    tl.store(out + (head * D + offs_d[:, None]) * BLOCK_N + offs_n[None, :], k)


def test_an_x_packed_key_cache_is_gathered_row_by_row_of_pages():
    """No slice of the tile is a box along either axis (a column walks D // X groups
    of X, a row walks pages): each of the D rows is cut into its pages. 50 tokens on 4
    pages: per head 4 block-table reads and 32 x 4 K runs."""
    from triton_helpers import simulate

    heads, page, x, dim = 2, 16, 8, 32
    torch.manual_seed(5)
    cache = torch.randn(6, heads, dim // x, page, x)
    table = torch.tensor([4, 1, 5, 0], dtype=torch.int32)
    sim, _, program = simulate(packed_keys_kernel, (cache, table, torch.empty(heads, dim, 64),
                                                    50),
                               {"heads": heads, "PAGE": page, "X": x, "D": dim,
                                "BLOCK_N": 64}, (heads,))
    tokens = torch.arange(50)
    expected = torch.zeros(heads, dim, 64)
    for h in range(heads):
        keys = cache[table[tokens // page].long(), h, :, tokens % page, :].reshape(50, dim)
        expected[h, :, :50] = keys.T
    torch.testing.assert_close(sim["out"], expected, rtol=0, atol=0)
    loads = sum(type(c.op).__name__ == "Load" for c in program.program.commands)
    assert loads == heads * (4 + dim * 4)
