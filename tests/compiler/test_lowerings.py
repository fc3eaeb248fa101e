"""Every lowering: functional simulation of the compiled program equals torch on CPU,
over shapes that do not divide the tiles, on ``tiny`` and a big multi-core preset."""

from __future__ import annotations

import math

import pytest
import torch
from compiler_helpers import check_op

import compiler
from archsim.config import load_config
from archsim.errors import LoweringError
from compiler.ir.ops import MatMul

aten = torch.ops.aten
PRESETS = ["tiny", "atom"]


def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


MATMUL_CASES = {
    "mm_odd": (aten.mm.default, lambda: (randn(37, 29), randn(29, 41))),
    "mm_square": (aten.mm.default, lambda: (randn(64, 64), randn(64, 64))),
    "mm_tall": (aten.mm.default, lambda: (randn(130, 9), randn(9, 5))),
    "addmm": (aten.addmm.default, lambda: (randn(23), randn(17, 33), randn(33, 23))),
    "addmm_scaled": (aten.addmm.default, lambda: (randn(17, 23), randn(17, 33), randn(33, 23))),
    "bmm": (aten.bmm.default, lambda: (randn(3, 19, 21), randn(3, 21, 13))),
    "baddbmm": (aten.baddbmm.default, lambda: (randn(3, 19, 13), randn(3, 19, 21),
                                               randn(3, 21, 13))),
    "linear": (aten.linear.default, lambda: (randn(2, 11, 30), randn(17, 30), randn(17))),
    "matmul_broadcast": (aten.matmul.default, lambda: (randn(2, 3, 9, 14), randn(14, 6))),
    "matmul_batched": (aten.matmul.default, lambda: (randn(2, 3, 9, 14), randn(3, 14, 6))),
    "matmul_vec": (aten.matmul.default, lambda: (randn(9, 14), randn(14))),
}


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("case", sorted(MATMUL_CASES))
def test_matmul_family(case: str, preset: str) -> None:
    torch.manual_seed(0)
    op, make = MATMUL_CASES[case]
    kwargs = {"beta": 0.5, "alpha": 2.0} if case == "addmm_scaled" else {}
    check_op(op, make(), preset, kwargs, {"rtol": 1e-4, "atol": 2e-4})


def test_matmul_bf16_on_bf16_array() -> None:
    torch.manual_seed(0)
    a, b = randn(70, 50, dtype=torch.bfloat16), randn(50, 90, dtype=torch.bfloat16)
    check_op(aten.mm.default, (a, b), "tpu-v3")


UNARY = [aten.neg.default, aten.exp.default, aten.tanh.default, aten.sigmoid.default,
         aten.relu.default, aten.silu.default, aten.sin.default, aten.cos.default,
         aten.abs.default, aten.erf.default]
POSITIVE = [aten.log.default, aten.sqrt.default, aten.rsqrt.default, aten.reciprocal.default]
SHAPES = [(7,), (5, 13), (3, 4, 33)]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("op", UNARY + POSITIVE, ids=str)
def test_unary(op, preset: str) -> None:
    torch.manual_seed(0)
    for shape in SHAPES:
        x = torch.randn(shape)
        if op in POSITIVE:
            x = x.abs() + 0.5
        check_op(op, (x,), preset)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate: str) -> None:
    check_op(aten.gelu.default, (torch.randn(9, 31),), "tiny", {"approximate": approximate})


BINARY = [aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor,
          aten.maximum.default, aten.minimum.default]
BROADCASTS = [((5, 13), (5, 13)), ((5, 13), (13,)), ((3, 1, 7), (4, 1)), ((2, 3, 5), ())]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("op", BINARY, ids=str)
def test_binary_broadcasting(op, preset: str) -> None:
    torch.manual_seed(0)
    for sa, sb in BROADCASTS:
        check_op(op, (torch.randn(sa), torch.randn(sb) + 3.0), preset)


@pytest.mark.parametrize("op,scalar", [(aten.add.Tensor, 2.5), (aten.mul.Tensor, -1.5),
                                       (aten.sub.Tensor, 0.25), (aten.div.Tensor, 4.0),
                                       (aten.pow.Tensor_Scalar, 2), (aten.pow.Tensor_Scalar, 3),
                                       (aten.pow.Tensor_Scalar, 0.5)], ids=str)
def test_binary_scalar(op, scalar) -> None:
    x = torch.rand(6, 17) + 0.1
    check_op(op, (x, scalar), "tiny")


def test_type_promotion_mixed_dtypes() -> None:
    a = torch.randn(4, 9)
    b = torch.randn(4, 9).to(torch.bfloat16)
    check_op(aten.add.Tensor, (a, b), "tiny")
    check_op(aten.mul.Tensor, (torch.arange(12).reshape(3, 4), 0.5), "tiny")
    check_op(aten.add.Tensor, (torch.arange(12).reshape(3, 4), torch.ones(4, dtype=torch.int32)),
             "tiny")


def test_comparisons_where_clamp() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(6, 11), torch.randn(6, 11)
    check_op(aten.gt.Tensor, (x, y), "tiny")
    check_op(aten.le.Scalar, (x, 0.1), "tiny")
    check_op(aten.where.self, (x > 0, x, y), "tiny")
    check_op(aten.clamp.default, (x, -0.5, 0.7), "tiny")
    check_op(aten.clamp_min.default, (x, 0.0), "atom")
    check_op(aten.logical_not.default, (x > 0,), "tiny")


@pytest.mark.parametrize("preset", PRESETS)
def test_masked_fill_runs_on_the_device(preset: str) -> None:
    torch.manual_seed(0)
    scores = torch.randn(2, 7, 7)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    compiled, result = check_op(aten.masked_fill.Scalar, (scores, ~causal, float("-inf")),
                                preset)
    assert compiled.fallbacks == ()
    assert result.engine_busy_cycles.get("host", 0) == 0
    check_op(aten.masked_fill.Tensor, (scores, scores > 0, torch.tensor(0.5)), preset)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int32, torch.float32])
def test_casts(dtype: torch.dtype) -> None:
    x = torch.randn(5, 19) * 10
    check_op(aten._to_copy.default, (x,), "tiny", {"dtype": dtype})


REDUCTIONS = [aten.sum.dim_IntList, aten.mean.dim, aten.amax.default, aten.amin.default]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("op", REDUCTIONS, ids=str)
def test_reductions(op, preset: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 10, 17)
    for dims in ([-1], [0], [1], [0, 2], [0, 1, 2]):
        for keepdim in (False, True):
            check_op(op, (x, dims, keepdim), preset)


def test_var_and_sum_all() -> None:
    x = torch.randn(4, 9, 5)
    check_op(aten.var.correction, (x, [1]), "tiny", {"correction": 1, "keepdim": True})
    check_op(aten.var.correction, (x, [0, 2]), "tiny", {"correction": 0})
    check_op(aten.sum.default, (x,), "tiny")


@pytest.mark.parametrize("preset", PRESETS)
def test_softmax_log_softmax(preset: str) -> None:
    torch.manual_seed(0)
    for shape, dim in [((7, 33), -1), ((3, 5, 9), 1), ((2, 3, 4, 5), 0)]:
        x = torch.randn(shape) * 3
        check_op(aten._softmax.default, (x, dim, False), preset)
        check_op(aten._log_softmax.default, (x, dim, False), preset)


def test_softmax_bf16() -> None:
    x = torch.randn(4, 50).to(torch.bfloat16)
    check_op(aten._softmax.default, (x, -1, False), "tiny")


@pytest.mark.parametrize("preset", PRESETS)
def test_layer_norm(preset: str) -> None:
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 9, 48), torch.randn(48), torch.randn(48)
    check_op(aten.native_layer_norm.default, (x, [48], w, b, 1e-5), preset)


def test_batch_norm_inference() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 6, 7)
    w, b, mean, var = torch.randn(5), torch.randn(5), torch.randn(5), torch.rand(5) + 0.5
    check_op(aten.batch_norm.default, (x, w, b, mean, var, False, 0.1, 1e-5, False), "tiny")


def test_max_pool_indices_lower_with_the_values() -> None:
    """The indices (once a host fallback: a secondary output without a lowering) are
    computed on the device next to the pooling unit's values."""
    x = torch.randn(1, 2, 6, 6)
    compiled, _ = check_op(aten.max_pool2d_with_indices.default, (x, [2, 2]), "tiny")
    assert not compiled.fallbacks


MOVEMENT = {
    "view": (aten.view.default, lambda: (randn(6, 10), [3, 20])),
    "permute": (aten.permute.default, lambda: (randn(3, 5, 7), [2, 0, 1])),
    "transpose": (aten.transpose.int, lambda: (randn(4, 6, 9), 0, 2)),
    "t": (aten.t.default, lambda: (randn(13, 7),)),
    "expand": (aten.expand.default, lambda: (randn(1, 7), [5, 7])),
    "slice": (aten.slice.Tensor, lambda: (randn(9, 12), 1, 2, 11)),
    "slice_step": (aten.slice.Tensor, lambda: (randn(9, 12), 0, 1, 9, 3)),
    "select": (aten.select.int, lambda: (randn(4, 5, 6), 1, 3)),
    "cat": (aten.cat.default, lambda: ([randn(3, 4), randn(3, 5), randn(3, 1)], 1)),
    "cat0": (aten.cat.default, lambda: ([randn(2, 7), randn(5, 7)],)),
    "clone": (aten.clone.default, lambda: (randn(5, 5),)),
    "unsqueeze": (aten.unsqueeze.default, lambda: (randn(5, 6), 1)),
    "pad": (aten.constant_pad_nd.default, lambda: (randn(2, 3, 5, 6), [1, 2, 2, 0], 0.5)),
}


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("case", sorted(MOVEMENT))
def test_data_movement(case: str, preset: str) -> None:
    torch.manual_seed(0)
    op, make = MOVEMENT[case]
    check_op(op, make(), preset)


def test_view_is_free() -> None:
    compiled, result = check_op(aten.view.default, (randn(6, 10), [3, 20]), "tiny")
    assert result.dram_bytes == 0
    assert len(compiled.program.commands) == 0


def test_split_with_sizes() -> None:
    check_op(aten.split_with_sizes.default, (randn(4, 10), [3, 7], 1), "tiny")


CONVS = [
    # (x shape, w shape, stride, padding, dilation, groups)
    ((1, 3, 9, 9), (4, 3, 3, 3), 1, 1, 1, 1),
    ((2, 4, 11, 10), (6, 4, 3, 3), 2, 1, 1, 1),
    ((1, 4, 10, 10), (4, 2, 3, 3), 1, 0, 2, 2),
    ((1, 6, 8, 8), (6, 1, 3, 3), 1, 1, 1, 6),
    ((2, 5, 7, 7), (3, 5, 1, 1), 1, 0, 1, 1),
    # batches whose whole images stack into one matmul's rows
    ((8, 16, 6, 6), (16, 16, 3, 3), 1, 1, 1, 1),
    ((3, 8, 7, 7), (8, 4, 3, 3), 1, 1, 1, 2),
    ((8, 16, 5, 5), (8, 16, 1, 1), 1, 0, 1, 1),
    ((4, 8, 8, 8), (8, 8, 3, 3), 1, 2, 2, 1),
]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("case", range(len(CONVS)))
def test_convolution(case: int, preset: str) -> None:
    torch.manual_seed(0)
    xs, ws, stride, padding, dilation, groups = CONVS[case]
    args = (torch.randn(xs), torch.randn(ws), torch.randn(ws[0]), [stride] * 2, [padding] * 2,
            [dilation] * 2, False, [0, 0], groups)
    check_op(aten.convolution.default, args, preset)


@pytest.mark.parametrize("case", range(5, len(CONVS)))
def test_convolution_stacking_images(case: int) -> None:
    """tpu-v3's 16 MiB scratchpad stacks these batches into one matmul per tap."""
    torch.manual_seed(0)
    xs, ws, stride, padding, dilation, groups = CONVS[case]
    args = (torch.randn(xs), torch.randn(ws), torch.randn(ws[0]), [stride] * 2, [padding] * 2,
            [dilation] * 2, False, [0, 0], groups)
    compiled, _ = check_op(aten.convolution.default, args, "tpu-v3")
    out_pixels = ((xs[2] + 2 * padding - dilation * (ws[2] - 1) - 1) // stride + 1) * \
        ((xs[3] + 2 * padding - dilation * (ws[3] - 1) - 1) // stride + 1)
    assert max(math.prod(c.op.a.shape[:-1]) for c in compiled.program.commands
               if isinstance(c.op, MatMul)) > out_pixels


@pytest.mark.parametrize("preset", PRESETS)
def test_pooling(preset: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 11)
    check_op(aten.max_pool2d.default, (x, [3, 3], [2, 2], [1, 1]), preset)
    check_op(aten.avg_pool2d.default, (x, [2, 2], [2, 2]), preset)
    check_op(aten._adaptive_avg_pool2d.default, (x, [1, 1]), preset)
    check_op(aten._adaptive_avg_pool2d.default, (torch.randn(1, 2, 8, 6), [4, 3]), preset)


def test_avg_pool_excluding_padding_without_ceil_mode_matches_torch() -> None:
    """count_include_pad=False with padding divides a border window by the inputs it
    covers (a 3x3 corner window at padding 1 covers 4: divide by 4, not 9); torch on
    CPU is the reference, and ceil_mode stays off so the plain pooling path is the one
    that must honour it."""
    torch.manual_seed(0)
    x = torch.randn(1, 2, 7, 9)
    compiled, _ = check_op(aten.avg_pool2d.default, (x, [3, 3], [2, 2], [1, 1], False, False),
                           "tiny")
    assert not compiled.fallbacks


def test_cumsum_along_the_last_dim_runs_on_the_device() -> None:
    """RoBERTa's position ids: a running sum of the padding mask (ints sum as i64)."""
    x = torch.randn(5, 8)
    mask = (torch.arange(12).reshape(2, 6) % 4 != 1).int()
    for args in ((x, 1), (x, -1), (mask, 1), (x, 0)):  # other dims: a log-step scan
        compiled, _ = check_op(aten.cumsum.default, args, "tiny")
        assert not compiled.fallbacks


def test_missing_lowering_runs_on_host_visibly() -> None:
    x = torch.randn(5, 8)
    compiled, result = check_op(aten.linalg_qr.default, (x,), "tiny")  # no lowering
    assert compiled.fallbacks and "linalg_qr" in compiled.fallbacks[0]
    engines = {c.engine for c in compiled.program.commands}
    assert {"host", "hdma"} <= engines
    # the host fallback's cost is 2 FLOPs per element in and out (frontend._host): 5x8 in,
    # Q 5x5 and R 5x8 out, 105 elements; tiny's host does 1e9 FLOP/s at 1 GHz
    assert result.host_cycles == 2 * (40 + 25 + 40)
    assert result.host_link_bytes >= 2 * x.numel() * 4


def test_embedding_and_gather() -> None:
    weight = torch.randn(11, 6)
    ids = torch.tensor([[1, 3, 10], [0, 0, 7]])
    check_op(aten.embedding.default, (weight, ids), "tiny")
    check_op(aten.index_select.default, (weight, 0, torch.tensor([4, 2])), "tiny")
    check_op(aten.gather.default, (weight, 1, torch.tensor([[0, 5]] * 11)), "tiny")


def _ops(compiled) -> dict[str, int]:
    counts: dict[str, int] = {}
    for c in compiled.program.commands:
        counts[c.op.mnemonic] = counts.get(c.op.mnemonic, 0) + 1
    return counts


@pytest.mark.parametrize(("rows", "cols", "ids_shape"), [
    (11, 6, (2, 3)),       # one tile per core
    (13, 500, (5, 20)),    # 100 indices of 2000 B rows: several index tiles per core
    (7, 9000, (3,)),       # a 36000 B row exceeds a buffer set: column tiles
    (50, 3, ()),           # a single index (0-d)
])
def test_embedding_is_an_indexed_dma(rows: int, cols: int, ids_shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    weight = torch.randn(rows, cols)
    ids = torch.randint(0, rows, ids_shape)
    compiled, result = check_op(aten.embedding.default, (weight, ids), "tiny")
    ops = _ops(compiled)
    assert not compiled.fallbacks and "host_op" not in ops
    assert ops["gather"] >= 1 and result.host_link_bytes == 0
    assert result.dram_bytes_read < weight.numel() * 4 or ids.numel() >= rows


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32])
def test_index_select_rows_of_any_dtype(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = (torch.randn(17, 9) * 10).to(dtype)
    index = torch.tensor([16, 0, 3, 3, 8], dtype=torch.int32)
    compiled, _ = check_op(aten.index_select.default, (x, 0, index), "tpu-v3")
    assert not compiled.fallbacks and _ops(compiled)["gather"] >= 1


@pytest.mark.parametrize(("rows", "cols", "index_shape"), [(11, 6, (4, 5)), (9, 3, (40, 3))])
def test_gather_dim0_is_an_indexed_dma(rows: int, cols: int,
                                       index_shape: tuple[int, int]) -> None:
    torch.manual_seed(0)
    x = torch.randn(rows, cols)
    index = torch.randint(0, rows, index_shape)
    compiled, result = check_op(aten.gather.default, (x, 0, index), "tiny")
    assert not compiled.fallbacks and result.host_link_bytes == 0
    assert _ops(compiled)["gather"] >= index_shape[1]


def test_index_select_beyond_dim0_of_2d_is_a_masked_sum() -> None:
    x = torch.randn(5, 7)
    compiled, _ = check_op(aten.index_select.default, (x, 1, torch.tensor([6, 0])), "tiny")
    assert not compiled.fallbacks and "gather" not in _ops(compiled)


@pytest.mark.parametrize("preset", ["tiny", "atom", "tpu-v3"])
def test_flash_attention(preset: str) -> None:
    torch.manual_seed(0)
    sdpa = aten.scaled_dot_product_attention.default
    q, k, v = torch.randn(2, 3, 37, 16), torch.randn(2, 3, 45, 16), torch.randn(2, 3, 45, 8)
    check_op(sdpa, (q, k, v), preset)
    q, k = torch.randn(1, 4, 50, 16), torch.randn(1, 2, 50, 16)
    check_op(sdpa, (q, k, k), preset, {"is_causal": True, "enable_gqa": True})
    check_op(sdpa, (q, q, q, torch.randn(50, 50)), preset)
    keep = torch.rand(1, 1, 50, 50) > 0.3
    keep[..., 0] = True
    check_op(sdpa, (q, q, q, keep), preset, {"scale": 0.3})
    qb = q.to(torch.bfloat16)
    check_op(sdpa, (qb, qb, qb), preset, {"is_causal": True})


def test_flash_attention_never_holds_the_score_matrix() -> None:
    from archsim.simulator import Simulator
    from compiler import compile_op
    from compiler_helpers import config

    cfg = config("tiny")
    q = torch.empty(1, 2, 512, 32, device="meta")
    compiled = compile_op(aten.scaled_dot_product_attention.default, (q, q, q),
                          {"is_causal": True}, cfg)
    result = Simulator(cfg).run(compiled.program)
    scores = 512 * 512 * 4
    assert max(result.sram_peak_bytes.values()) <= cfg.core.scratchpad.size_bytes < scores
    assert not [t for t in compiled.program.tensors if t.role == "temp"]


@pytest.mark.parametrize("dims", [(1, -1), (0, 1), (2, 3), (-2, -1)])
def test_flatten_is_a_view(dims: tuple[int, int]) -> None:
    # archsim run exports without decompositions, so torch.flatten arrives whole (it
    # ran on the host in ResNet before it had a lowering)
    x = torch.randn(2, 3, 4, 5)
    compiled, _ = check_op(aten.flatten.using_ints, (x, *dims), "tiny")
    assert not compiled.fallbacks


@pytest.mark.parametrize("dim", [1, -1, None])
def test_repeat_interleave_of_kv_heads(dim: int | None) -> None:
    # grouped-query attention repeats each K/V head for its query heads (llama-small
    # ran it as host work)
    x = torch.randn(1, 2, 5, 4)
    compiled, _ = check_op(aten.repeat_interleave.self_int, (x, 3, dim), "tiny")
    assert not compiled.fallbacks


def test_padded_single_channel_conv_on_many_cores() -> None:
    # the pad kernel cuts its border strips along the leading dims to spread them over
    # cores; with one image of one channel there is a single leading element, which
    # must still be a tile (this raised CapacityError on atom's 8 cores)
    torch.manual_seed(0)
    x, w = torch.randn(1, 1, 28, 28), torch.randn(8, 1, 3, 3)
    compiled, _ = check_op(aten.convolution.default,
                           (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), "atom")
    assert not compiled.fallbacks


@pytest.mark.parametrize("preset", PRESETS)
def test_conv1d_runs_as_a_conv2d_of_height_one(preset: str) -> None:
    """Whisper's audio stem: kernel 3, stride 1 then 2, padding 1."""
    torch.manual_seed(0)
    x, w, bias = torch.randn(2, 4, 17), torch.randn(6, 4, 3), torch.randn(6)
    for stride in (1, 2):
        compiled, _ = check_op(aten.convolution.default,
                               (x, w, bias, [stride], [1], [1], False, [0], 1), preset)
        assert not compiled.fallbacks
        assert "convolution" in " ".join(compiled.kernels)


def test_host_ops_with_several_results_give_the_one_read() -> None:
    """svd(...)[1] and qr(...)[1] run on the host (timed) and each returns what torch
    returns, whichever result is used; topk(...).values, sort(...)[1] and median(dim)[1]
    next to them are lowered (sorting by rank)."""

    class Pick(torch.nn.Module):
        def forward(self, x):
            return (torch.topk(x, 3).values + 1, torch.sort(x)[1], torch.linalg.svd(x)[1],
                    torch.linalg.qr(x.T)[1], x.median(dim=0)[1])

    torch.manual_seed(0)
    x = torch.randn(4, 8)
    compiled = compiler.compile_graph(compiler.export_model(Pick(), (x,)), load_config("tiny"))
    outputs, result = compiled.run(x)
    # the host (1 FLOP/cycle on tiny) runs both fallbacks, at 2 FLOPs per element in and
    # out: svd of 4x8 (U 4x4, S 4, Vh 8x8) and qr of 8x4 (Q 8x4, R 4x4)
    assert len(compiled.fallbacks) == 2
    assert result.host_cycles == 2 * (32 + 16 + 4 + 64) + 2 * (32 + 32 + 16)
    for got, want in zip(outputs, Pick()(x)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_a_data_dependent_output_shape_is_a_lowering_error() -> None:
    class Unique(torch.nn.Module):
        def forward(self, x):
            return torch.unique(x)

    exported = compiler.export_model(Unique(), (torch.tensor([1.0, 2.0, 2.0]),))
    with pytest.raises(LoweringError, match=r"dynamic shape \[u\d+\] is not supported \(a size "
                                            r"that depends on the data, as torch.unique's"):
        compiler.compile_graph(exported, load_config("tiny"))
