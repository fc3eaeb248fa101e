"""More ops on the eager npu device through the compiler (reductions, norms, cumulative
ops, movement, pointwise specials, losses): values as on CPU, and no host work."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

import torch_bridge
from device_check import assert_on_device_like_cpu

Fn = Callable[..., Any]
pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom")


def _x() -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5)
    x[0, 1, 2] = x[0, 1, 3]  # a tie: the first index wins
    return x


REDUCTIONS: dict[str, Fn] = {
    "max": lambda x: x.max(),
    "min": lambda x: x.min(),
    "max_dim": lambda x: x.max(1),
    "min_dim_keepdim": lambda x: torch.min(x, -1, keepdim=True),
    "aminmax": lambda x: torch.aminmax(x),
    "aminmax_dim": lambda x: torch.aminmax(x, dim=2, keepdim=True),
    "prod": lambda x: x.prod(),
    "prod_dim": lambda x: x.prod(1),
    "prod_dim_keepdim_int": lambda x: (x * 2).round().int().prod(0, keepdim=True),
    "count_nonzero": lambda x: torch.count_nonzero(x.round(), dim=(0, 2)),
    "logsumexp": lambda x: torch.logsumexp(x, (0, 2)),
    "logsumexp_keepdim": lambda x: torch.logsumexp(x * 30, 1, keepdim=True),
    "trace": lambda x: torch.trace(x[0]),
    "trace_tall": lambda x: torch.trace(x.reshape(12, 5)),
    "var_unbiased": lambda x: torch.var(x, 1, unbiased=False),
    "std_mean_empty": lambda x: torch.std_mean(x[:, :0].reshape(-1), 0, correction=0),
}


def _check(fn: Fn, *inputs: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    assert_on_device_like_cpu(fn, *inputs, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions(name: str) -> None:
    _check(REDUCTIONS[name], _x())


def test_max_with_nan_and_out_tensors() -> None:
    x = _x()
    x[1, 2, 0] = float("nan")
    _check(lambda t: t.max(2), x)
    _check(lambda t: (torch.max(t, 0, out=(torch.empty(0, device=t.device),
                                           torch.empty(0, dtype=torch.long,
                                                       device=t.device)))), x)


def test_equal() -> None:
    x = _x().to("npu")
    with torch_bridge.profile() as prof:
        assert torch.equal(x, x.clone()) and not torch.equal(x, x + 1)
        assert not torch.equal(x, x[0]) and not torch.equal(x / 0 * 0, x / 0 * 0)  # NaNs
    # reading the answer back (a Python bool) is the only host step
    assert [r.name for r in prof.result.host_work] == ["aten._local_scalar_dense"]


CUMULATIVE: dict[str, Fn] = {
    "cumsum_dim0": lambda x: x.cumsum(0),
    "cumsum_dim1_int": lambda x: (x > 0).cumsum(1),
    "cumprod": lambda x: x.cumprod(1),
    "cumprod_last_int": lambda x: (x * 2).round().long().cumprod(-1),
    "logcumsumexp": lambda x: torch.logcumsumexp(x * 10, 2),
    "cummax": lambda x: torch.cummax(x.round(), 1),
    "cummin": lambda x: torch.cummin(x.round(), 2),
    "cummax_0d": lambda x: torch.cummax(x[0, 0, 0], 0),
}


@pytest.mark.parametrize("name", CUMULATIVE)
def test_cumulative(name: str) -> None:
    _check(CUMULATIVE[name], _x(), rtol=1e-5, atol=1e-4)


def test_cummax_with_nans() -> None:
    x = _x()
    x[0, 2, 1] = x[2, 1, 4] = x[2, 3, 4] = float("nan")
    _check(lambda t: torch.cummax(t, 1), x)
    _check(lambda t: torch.cummin(t, 2), x)


def _index() -> torch.Tensor:
    return torch.tensor([3, 0, -1, 3])


MOVEMENT: dict[str, Fn] = {
    "flip": lambda x: x.flip(0, 2),
    "fliplr": lambda x: torch.fliplr(x),
    "rot90": lambda x: torch.rot90(x, 1, (1, 2)),
    "roll": lambda x: x.roll((2, -1), (1, 2)),
    "roll_flat": lambda x: x.roll(7),
    "index_select_dim1": lambda x: x.index_select(1, _index().to(x.device).abs()),
    "index_select_dim2": lambda x: x.index_select(2, _index().to(x.device).abs()),
    "take": lambda x: x.take(_index().to(x.device).reshape(2, 2) * 7),
    "index_fill": lambda x: x.index_fill(2, _index().to(x.device).abs(), -2.5),
    "index_copy": lambda x: x.index_copy(1, torch.tensor([2, 0], device=x.device),
                                         x[:, :2] * 10),
    "index_add": lambda x: x.index_add(2, _index().to(x.device).abs(), x[..., :4], alpha=2),
    "index_add_int": lambda x: (x * 4).int().index_add(0, torch.tensor([1, 1], device=x.device),
                                                       (x[:2] * 4).int()),
}


@pytest.mark.parametrize("name", MOVEMENT)
def test_movement_and_indexing(name: str) -> None:
    _check(MOVEMENT[name], _x())


NORMS: dict[str, Fn] = {
    "vector_norm_2": lambda x: torch.linalg.vector_norm(x),
    "vector_norm_1_dims": lambda x: torch.linalg.vector_norm(x, 1, (0, 2), keepdim=True),
    "vector_norm_inf": lambda x: torch.linalg.vector_norm(x, float("inf"), 1),
    "vector_norm_-inf": lambda x: torch.linalg.vector_norm(x, -float("inf"), -1),
    "vector_norm_0": lambda x: torch.linalg.vector_norm(x.round(), 0, 2),
    "vector_norm_3.5": lambda x: torch.linalg.vector_norm(x, 3.5, 1),
    "norm_p_dim": lambda x: torch.norm(x, 0.5, 2),
    "norm_fro": lambda x: torch.norm(x),
    "normalize": lambda x: torch.nn.functional.normalize(x, dim=1),
    "dist": lambda x: torch.dist(x, x[0] * 2, 3),
    "renorm": lambda x: torch.renorm(x, 2, 1, 1.5),
}


@pytest.mark.parametrize("name", NORMS)
def test_norms(name: str) -> None:
    _check(NORMS[name], _x(), rtol=1e-5, atol=1e-5)


def _nll_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    scores = torch.randn(2, 4, 3, 5).log_softmax(1)
    return scores, torch.randint(0, 4, (2, 3, 5)), torch.rand(4)


LOSSES: dict[str, Fn] = {
    "nll_loss2d": lambda s, t, w: torch.nn.functional.nll_loss(s, t),
    "nll_loss2d_weight_none": lambda s, t, w: torch.nn.functional.nll_loss(
        s, t, w, reduction="none"),
    "nll_loss2d_ignore_sum": lambda s, t, w: torch.nn.functional.nll_loss(
        s, t, w, ignore_index=2, reduction="sum"),
    "cross_entropy_2d": lambda s, t, w: torch.nn.functional.cross_entropy(s, t),
    "huber": lambda s, t, w: torch.nn.functional.huber_loss(s, s.flip(0), delta=0.5),
    "smooth_l1": lambda s, t, w: torch.nn.functional.smooth_l1_loss(s, s * 0.5,
                                                                   reduction="sum"),
    "bce": lambda s, t, w: torch.nn.functional.binary_cross_entropy(s.exp(), s.exp() * 0.5),
    "bce_with_logits": lambda s, t, w: torch.nn.functional.binary_cross_entropy_with_logits(
        s, s.exp()),
    "logsigmoid": lambda s, t, w: torch.nn.functional.logsigmoid(s * 10),
}


@pytest.mark.parametrize("name", LOSSES)
def test_losses(name: str) -> None:
    _check(LOSSES[name], *_nll_inputs())


def _points() -> torch.Tensor:
    """Both signs, near and far from the poles and roots, and the special values."""
    return torch.cat([torch.linspace(-8.65, 8.65, 59), torch.tensor(
        [0.0, -1.0, -3.0, 1.0, 2.0, 1e-3, 1.4616321, -4.5, 30.0, float("inf"), float("nan")])])


SPECIALS: dict[str, Fn] = {
    "lgamma": torch.lgamma,
    "digamma": torch.digamma,
    **{f"polygamma_{n}": (lambda n: lambda x: torch.polygamma(n, x))(n) for n in range(2, 5)},
    # torch's float32 trigamma is inexact next to its poles: away from them
    "polygamma_1": lambda x: torch.polygamma(1, x + 0.25),
    "mvlgamma": lambda x: torch.mvlgamma(x.abs() + 1.5, 3),
    "erfinv": lambda x: torch.erfinv(x / 8.71),
    "i0": lambda x: torch.i0(x * 3),
    "ldexp": lambda x: torch.ldexp(x, torch.arange(70, device=x.device) % 9 - 4.0),
    "frexp": lambda x: torch.frexp(x * 1e3),
}


@pytest.mark.parametrize("name", SPECIALS)
def test_specials(name: str) -> None:
    _check(SPECIALS[name], _points(), rtol=1e-4, atol=1e-5)


def test_nextafter_is_bit_exact() -> None:
    big = torch.finfo(torch.float32).max
    x = torch.cat([_points() * 13, torch.tensor([0.0, -1.0, 0.5, big, 1e-45, 3e-39, -math.inf])])
    for y in (x.flip(0), torch.zeros_like(x), torch.full_like(x, math.inf), x):
        with torch_bridge.profile() as prof:
            got = torch.nextafter(x.to("npu"), y.to("npu")).cpu()
        torch.testing.assert_close(got, torch.nextafter(x, y), rtol=0, atol=0, equal_nan=True)
        assert prof.result.host_work == ()


@pytest.mark.parametrize("reduce", ["amax", "amin", "prod", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(reduce: str, include_self: bool) -> None:
    index = torch.tensor([2, 0, 2, 3, 0, 2])  # repeats; position 1 receives nothing
    _check(lambda x, s: x.index_reduce(1, index.to(x.device), s, reduce,
                                       include_self=include_self),
           _x(), torch.randn(3, 6, 5))


def test_put() -> None:
    index = torch.tensor([[7, -1], [0, 7]])
    source = torch.tensor([[1.5, -2.0], [3.0, 4.0]])
    _check(lambda x, s: x.put(index.to(x.device), s, accumulate=True), _x(), source)
    _check(lambda x, s: x.put(index.to(x.device)[:, :1], s[:, :1]), _x(), source)


BESSEL: dict[str, Fn] = {
    "i0e": torch.special.i0e,
    "i1": torch.special.i1,
    "i1e": torch.special.i1e,
    "modified_bessel_i1": torch.special.modified_bessel_i1,
    "spherical_bessel_j0": torch.special.spherical_bessel_j0,
    "ndtri": lambda x: torch.special.ndtri(torch.sigmoid(x)),
    "erfcx": torch.special.erfcx,
    "log_ndtr": lambda x: torch.special.log_ndtr(x * 2),
}


@pytest.mark.parametrize("name", BESSEL)
def test_bessel_and_normal_quantile(name: str) -> None:
    _check(BESSEL[name], _points() * 2, rtol=1e-4, atol=1e-5)


def test_hurwitz_zeta() -> None:
    torch.manual_seed(2)
    s = torch.cat([(torch.rand(40) * 10 - 1).round(), torch.rand(40) * 10 - 1])
    q = torch.cat([torch.rand(40) * 14 - 6, torch.rand(40) * 8 + 0.01])
    s[:4], q[:4] = torch.tensor([1.0, 2.0, 3.0, 0.5]), torch.tensor([2.0, -2.0, -1.5, 1.0])
    _check(torch.special.zeta, s, q, rtol=1e-4, atol=1e-5)


def test_flip_of_a_long_dim() -> None:
    _check(lambda x: x.flip(1, 2), torch.randn(3, 100, 7))
