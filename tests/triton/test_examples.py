"""Each example kernel: the numbers archsim's schedule computes against torch on CPU and
against Triton's own interpreter."""

import torch

import flash_attention
import matmul
import rmsnorm
import softmax
import vector_add
from triton_helpers import interpret, simulate


def _both(kernel, args, kwargs, grid):
    sim, result, _ = simulate(kernel, args, kwargs, grid)
    ref = interpret(kernel, args, kwargs, grid)
    return sim, ref, result


def test_vector_add_with_a_masked_edge():
    torch.manual_seed(0)
    n = 1000  # 3 full blocks of 256 and a clipped one of 232
    x, y = torch.randn(n), torch.randn(n)
    sim, ref, result = _both(vector_add.add_kernel, (x, y, torch.empty(n), n), {"BLOCK": 256},
                             (4,))
    torch.testing.assert_close(sim["out_ptr"], x + y, rtol=0, atol=0)
    torch.testing.assert_close(sim["out_ptr"], ref["out_ptr"], rtol=0, atol=0)
    # atom, one program per core: load the x and y blocks on one DMA engine (64 setup +
    # 300 DRAM latency, then 2 x 1 KiB at 64 B/cycle, in order), add (pipeline 8 at the
    # least), store 1 KiB (64 + 300 + 16); the four programs run side by side
    floor = (64 + 300 + 2 * 1024 // 64) + 8 + (64 + 300 + 1024 // 64)
    assert floor <= result.total_cycles < 2 * floor


def test_fused_softmax_rows_wider_than_the_data():
    torch.manual_seed(1)
    x = torch.randn(37, 100)
    args = (torch.empty_like(x), x, 100, 100, 100)
    sim, ref, _ = _both(softmax.softmax_kernel, args, {"BLOCK": 128}, (37,))
    torch.testing.assert_close(sim["out_ptr"], torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sim["out_ptr"], ref["out_ptr"], rtol=1e-5, atol=1e-6)


def test_rmsnorm_with_residual_writes_both_outputs():
    torch.manual_seed(2)
    x, res, w = torch.randn(8, 96), torch.randn(8, 96), torch.randn(96)
    args = (x, res.clone(), w, torch.empty_like(x), 96, 1e-6)
    sim, ref, _ = _both(rmsnorm.rmsnorm_residual_kernel, args, {"BLOCK": 128, "ROWS": 2}, (4,))
    h = x + res
    expected = h * torch.rsqrt((h * h).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(sim["res_ptr"], h, rtol=0, atol=0)
    torch.testing.assert_close(sim["out_ptr"], expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sim["out_ptr"], ref["out_ptr"], rtol=1e-5, atol=1e-5)


def test_tiled_matmul_with_ragged_edges():
    torch.manual_seed(3)
    a, b = torch.randn(200, 150), torch.randn(150, 130)
    args = (a, b, torch.empty(200, 130), 200, 130, 150)
    sim, ref, _ = _both(matmul.matmul_kernel, args, {"BM": 64, "BN": 64, "BK": 64}, (4, 3))
    torch.testing.assert_close(sim["c_ptr"], a @ b, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(sim["c_ptr"], ref["c_ptr"], rtol=1e-4, atol=1e-4)


def test_causal_flash_attention_matches_sdpa():
    torch.manual_seed(4)
    b, h, s, d = 1, 2, 128, 64
    q, k, v = (torch.randn(b, h, s, d) for _ in range(3))
    args = (q, k, v, torch.empty_like(q), d ** -0.5, s)
    kernel = flash_attention.flash_attention_naive_prefill_kernel
    sim, ref, _ = _both(kernel, args, {"BM": 64, "BN": 64, "D": d}, (s // 64, b * h))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(sim["o_ptr"], expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sim["o_ptr"], ref["o_ptr"], rtol=1e-5, atol=1e-5)


def test_attention_comparison_names_the_faster_and_both_latencies():
    import compare_attention

    text = compare_attention.main(["--seq", "128", "--heads", "2"])
    lines = text.splitlines()
    assert lines[1].startswith("Triton kernel (hand)") and " cycles " in lines[1]
    assert lines[2].startswith("compiler SDPA lowering") and " cycles " in lines[2]
    assert lines[3].endswith("x faster") and lines[3].split()[0] in ("triton", "compiler")


def test_paged_attention_example_matches_torch_and_prints_times():
    """The example's decode (pages shuffled, a 37-token sequence ending mid-page) on npu
    tensors against torch."""
    import warnings

    import paged_attention
    import torch_bridge  # noqa: F401  (the npu device)

    torch.manual_seed(4)
    q = torch.randn(2, 4, 16)
    k, v = torch.randn(8, 16, 2, 16), torch.randn(8, 16, 2, 16)
    table = torch.tensor([[5, 1, 7, 0], [2, 6, 3, 4]], dtype=torch.int32)
    lens = torch.tensor([37, 64], dtype=torch.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = paged_attention.decode(*(t.to("npu") for t in (q, k, v, table, lens)),
                                     block_n=32)
    expected = paged_attention.paged_decode_reference(q, k, v, table, lens, 0.25)
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-4)
