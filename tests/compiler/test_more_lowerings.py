"""Lowerings models and OpInfo reach beyond the basics: inverse and hyperbolic
trigonometry, rounding, argmax/argmin (ties, NaN), var_mean, matrix-vector products,
nearest upsampling: functional simulation equal to torch on CPU, and on the eager
device with no host work."""

from __future__ import annotations

import math

import pytest
import torch
from compiler_helpers import check_op

import torch_bridge

aten = torch.ops.aten

# op -> a map of randn into its domain
UNARY = {
    aten.tan.default: lambda x: x.clamp(-1.2, 1.2), aten.acos.default: torch.tanh,
    aten.asin.default: torch.tanh, aten.atan.default: lambda x: 3 * x,
    aten.sinh.default: lambda x: x, aten.cosh.default: lambda x: x,
    aten.asinh.default: lambda x: 3 * x, aten.acosh.default: lambda x: x.abs() + 1.01,
    aten.atanh.default: lambda x: 0.9 * torch.tanh(x), aten.expm1.default: lambda x: x,
    aten.log1p.default: lambda x: x.abs(), aten.log2.default: lambda x: x.abs() + 0.1,
    aten.log10.default: lambda x: x.abs() + 0.1, aten.exp2.default: lambda x: 3 * x,
    aten.sign.default: lambda x: x.masked_fill(x.abs() < 0.3, 0.0),
    aten.trunc.default: lambda x: 4 * x, aten.floor.default: lambda x: 4 * x,
    aten.ceil.default: lambda x: 4 * x, aten.frac.default: lambda x: 4 * x,
    aten.round.default: lambda x: torch.cat([4 * x.flatten(), torch.tensor([0.5, 1.5, -2.5])]),
}


@pytest.mark.parametrize("op", UNARY, ids=str)
def test_unary(op) -> None:
    torch.manual_seed(0)
    check_op(op, (UNARY[op](torch.randn(5, 13)),), "tiny")


@pytest.mark.parametrize("op", [aten.sign.default, aten.floor.default, aten.round.default],
                         ids=str)
def test_rounding_keeps_integers(op) -> None:
    compiled, _ = check_op(op, (torch.tensor([-3, 0, 2, 7], dtype=torch.int32),), "tiny")
    assert compiled.outputs[0].dtype == "i32"


@pytest.mark.parametrize("op", [aten.argmax.default, aten.argmin.default], ids=str)
@pytest.mark.parametrize("dim, keepdim", [(1, False), (0, True), (None, False), (-1, True)])
def test_arg_extremes_pick_the_first_tie_and_nan(op, dim, keepdim) -> None:
    x = torch.tensor([[1.0, 5.0, 5.0, -2.0], [7.0, 7.0, 0.0, -2.0], [3.0, float("nan"), 9.0,
                                                                       float("nan")]])
    check_op(op, (x, dim, keepdim), "tiny")
    check_op(op, (torch.randn(6, 37), dim, keepdim), "atom")


def test_var_mean() -> None:
    torch.manual_seed(0)
    check_op(aten.var_mean.correction, (torch.randn(6, 33), [1]), "tiny",
             {"correction": 1, "keepdim": True})
    check_op(aten.var_mean.correction, (torch.randn(4, 5, 6), None), "tiny")


def test_matrix_vector_products() -> None:
    torch.manual_seed(0)
    a, v, w = torch.randn(17, 29), torch.randn(29), torch.randn(17)
    check_op(aten.mv.default, (a, v), "tiny")
    check_op(aten.dot.default, (v, v), "tiny")
    check_op(aten.addmv.default, (w, a, v), "tiny", {"beta": 0.5, "alpha": 2.0})


@pytest.mark.parametrize("args", [((8, 12), None), (None, [2.0, 3.0])], ids=["size", "scales"])
def test_nearest_upsampling_by_whole_factors(args) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 4)
    op = aten.upsample_nearest2d.default if args[0] else aten.upsample_nearest2d.vec
    check_op(op, (x, *args), "tiny")


EAGER = {
    "acos": lambda t: t.clamp(-1, 1).acos(), "log1p": lambda t: t.abs().log1p(),
    "floor": lambda t: (4 * t).floor(), "argmax": lambda t: t.argmax(-1),
    "argmin_all": lambda t: t.argmin(), "mv": lambda t: t @ torch.ones(8, device=t.device),
    "group_norm": lambda t: torch.nn.functional.group_norm(t.view(1, 4, 2, 4), 2),
    "interpolate": lambda t: torch.nn.functional.interpolate(t.view(1, 1, 4, 8),
                                                             scale_factor=2),
    "var_mean": lambda t: torch.var_mean(t, dim=1),
}


@pytest.mark.parametrize("name", EAGER)
def test_on_the_eager_device_with_no_host_work(name: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    with torch_bridge.profile() as prof:
        got = EAGER[name](x.to("npu"))
    want = EAGER[name](x)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-5)
    assert prof.result.host_work == ()
    assert math.isfinite(prof.result.seconds)


BINARY = [aten.atan2.default, aten.copysign.Tensor, aten.remainder.Tensor, aten.fmod.Tensor,
          aten.hypot.default, aten.logaddexp.default]


@pytest.mark.parametrize("op", BINARY, ids=str)
def test_binary_with_broadcasting(op) -> None:
    torch.manual_seed(0)
    check_op(op, (3 * torch.randn(5, 13), torch.randn(13) + 0.1), "tiny")


@pytest.mark.parametrize("op", [aten.remainder.Tensor, aten.fmod.Tensor], ids=str)
def test_integer_remainders_keep_integers_and_their_signs(op) -> None:
    a = torch.tensor([-7, -3, 0, 3, 7], dtype=torch.int32)
    compiled, _ = check_op(op, (a, torch.tensor([3, -2, 5, -4, 2], dtype=torch.int32)), "tiny")
    assert compiled.outputs[0].dtype == "i32"


def test_bitwise_ops_are_lowered_for_masks_only() -> None:
    masks = (torch.tensor([True, False, True]), torch.tensor([True, True, False]))
    compiled, _ = check_op(aten.bitwise_and.Tensor, masks, "tiny")
    assert compiled.fallbacks == ()
    ints = (torch.tensor([6, 5, 12]), torch.tensor([3, 4, 10]))
    compiled, _ = check_op(aten.bitwise_and.Tensor, ints, "tiny")  # 2, 4, 8: not logical
    assert compiled.fallbacks != ()
