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
    check_op(op, (torch.tensor(2.5), None if dim is None else 0, keepdim), "tiny")


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


SPECIALS = torch.tensor([[0.0, -1.5, float("nan"), float("inf")], [-float("inf"), 2.5, -0.0, 3.0]])


@pytest.mark.parametrize("op", [aten.isnan.default, aten.isinf.default, aten.isfinite.default],
                         ids=str)
def test_float_classes(op) -> None:
    check_op(op, (SPECIALS,), "tiny")


def test_elu_lerp_xlogy() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(6, 9), torch.randn(6, 9)
    check_op(aten.elu.default, (x, 0.7, 1.2, 0.5), "tiny")
    check_op(aten.lerp.Scalar, (x, y, 0.3), "tiny")
    check_op(aten.lerp.Tensor, (x, y, torch.rand(9)), "tiny")
    with_nan = {"rtol": 1e-4, "atol": 1e-4, "equal_nan": True}
    check_op(aten.xlogy.Tensor, (SPECIALS, SPECIALS.abs() + 0.5), "tiny", tol=with_nan)
    check_op(aten.xlogy.Tensor, (torch.tensor([0.0, 0.0, 2.0]),
                                 torch.tensor([float("nan"), 3.0, 4.0])), "tiny", tol=with_nan)


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_division_rounding_modes(mode) -> None:
    torch.manual_seed(0)
    check_op(aten.div.Tensor_mode, (5 * torch.randn(4, 7), torch.randn(7)), "tiny",
             {"rounding_mode": mode})
    ints = (torch.tensor([-7, 7, 9, -9]), torch.tensor([2, -2, 4, 4]))
    if mode is not None:
        check_op(aten.div.Tensor_mode, ints, "tiny", {"rounding_mode": mode})


def test_round_to_decimals_std_mean_nansum() -> None:
    torch.manual_seed(0)
    check_op(aten.round.decimals, (10 * torch.randn(5, 6),), "tiny", {"decimals": 2})
    check_op(aten.std_mean.correction, (torch.randn(6, 33), [1]), "tiny", {"keepdim": True})
    finite_or_nan = SPECIALS.nan_to_num(nan=0.0, posinf=1.0, neginf=-1.0).masked_fill(
        SPECIALS.isnan(), float("nan"))
    check_op(aten.nansum.default, (finite_or_nan, [1]), "tiny")


def test_in_place_variants_run_on_the_eager_device() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    n = x.to("npu")
    with torch_bridge.profile() as prof:
        n.clamp_min_(-0.5).masked_fill_(n > 1.0, 1.0).atan2_(n + 2)
    x.clamp_min_(-0.5).masked_fill_(x > 1.0, 1.0).atan2_(x + 2)
    torch.testing.assert_close(n.cpu(), x)
    assert prof.result.host_work == ()


COMPOSITE = {
    "addcmul": (aten.addcmul.default, lambda x, y: (x, y, y + 1), {"value": 0.5}),
    "addcdiv": (aten.addcdiv.default, lambda x, y: (x, y, y.abs() + 1), {"value": 2.0}),
    "fmax": (aten.fmax.default, lambda x, y: (SPECIALS, SPECIALS.flip(1)), {}),
    "fmin": (aten.fmin.default, lambda x, y: (SPECIALS, SPECIALS.flip(0)), {}),
    "logical_xor": (aten.logical_xor.default, lambda x, y: (x > 0, y > 0), {}),
    "heaviside": (aten.heaviside.default, lambda x, y: (x.round(), y), {}),
    "signbit": (aten.signbit.default, lambda x, y: (SPECIALS,), {}),
    "logit": (aten.logit.default, lambda x, y: (torch.sigmoid(x), 1e-3), {}),
    "sinc": (aten.sinc.default, lambda x, y: (x.masked_fill(x.abs() < 0.2, 0.0),), {}),
    "hardshrink": (aten.hardshrink.default, lambda x, y: (x, 0.4), {}),
    "softshrink": (aten.softshrink.default, lambda x, y: (x, 0.4), {}),
    "threshold": (aten.threshold.default, lambda x, y: (x, 0.1, -2.0), {}),
    "nan_to_num": (aten.nan_to_num.default, lambda x, y: (SPECIALS, 0.5, None, -7.0), {}),
    "isposinf": (aten.isposinf.default, lambda x, y: (SPECIALS,), {}),
    "erfc": (aten.erfc.default, lambda x, y: (x,), {}),
    "floor_divide": (aten.floor_divide.default, lambda x, y: (5 * x, y), {}),
    "mse_loss": (aten.mse_loss.default, lambda x, y: (x, y, 1), {}),
}


@pytest.mark.parametrize("name", COMPOSITE)
def test_composite_pointwise(name: str) -> None:
    torch.manual_seed(0)
    op, make, kwargs = COMPOSITE[name]
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    check_op(op, make(x, y), "tiny", kwargs, {"rtol": 1e-4, "atol": 1e-5, "equal_nan": True})


@pytest.mark.parametrize("repeats", [[1, 1, 1], [2, 3], [2, 1, 3]], ids=str)
def test_repeat(repeats) -> None:
    torch.manual_seed(0)
    check_op(aten.repeat.default, (torch.randn(4, 5), repeats), "tiny")


def test_padding_that_leaves_the_leading_dims_alone() -> None:
    torch.manual_seed(0)
    check_op(aten.constant_pad_nd.default, (torch.randn(1, 15, 32), [0, 0, 0, 1, 0, 0]), "tiny")
    check_op(aten.constant_pad_nd.default, (torch.randn(2, 3, 5), [1, 0, 2, 0, 0, 0]), "tiny")
