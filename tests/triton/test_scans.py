"""tl.cumsum and tl.cumprod (forward and reversed, along either axis) computed as the
reference computes them, on eager npu launches and inside torch.compile; other scans of
loaded values are refused with the kernel's line (the interpreter computes scans outside
the builder: unhooked, they were kept as constants of the stand-in data)."""

import inspect

import pytest
import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

import torch_bridge  # noqa: F401  (the npu device)
from archsim.errors import TritonError
from triton_helpers import interpret, simulate


@triton.jit
def cumsum_1d_kernel(x_ptr, out_ptr, BN: tl.constexpr):
    rn = tl.arange(0, BN)
    tl.store(out_ptr + rn, tl.cumsum(tl.load(x_ptr + rn), axis=0))


@triton.jit
def scan_2d_kernel(x_ptr, out_ptr, BM: tl.constexpr, BN: tl.constexpr, AXIS: tl.constexpr,
                   REVERSE: tl.constexpr, PROD: tl.constexpr):
    rm = tl.arange(0, BM)[:, None]
    rn = tl.arange(0, BN)[None, :]
    x = tl.load(x_ptr + rm * BN + rn)
    if PROD:
        y = tl.cumprod(x, axis=AXIS, reverse=REVERSE)
    else:
        y = tl.cumsum(x, axis=AXIS, reverse=REVERSE)
    tl.store(out_ptr + rm * BN + rn, y)


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def running_max_kernel(x_ptr, out_ptr, BN: tl.constexpr):
    rn = tl.arange(0, BN)
    x = tl.load(x_ptr + rn)
    tl.store(out_ptr + rn, tl.associative_scan(x, 0, _max_combine))


def _reference(x, axis, reverse, prod):
    scan = torch.cumprod if prod else torch.cumsum
    return scan(x.flip(axis), axis).flip(axis) if reverse else scan(x, axis)


def test_eager_cumsum_matches_the_interpreter():
    x = torch.arange(8.0)
    out = torch.full((8,), -5.0, device="npu")
    cumsum_1d_kernel[(1,)](x.to("npu"), out, BN=8)
    expected = interpret(cumsum_1d_kernel, (x, torch.empty(8)), {"BN": 8}, (1,))["out_ptr"]
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
    assert out.cpu().tolist() == [0.0, 1.0, 3.0, 6.0, 10.0, 15.0, 21.0, 28.0]


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("prod", [False, True])
def test_eager_scans_match_torch(axis, reverse, prod):
    torch.manual_seed(3)
    x = torch.rand(4, 8) + 0.5
    out = torch.full((4, 8), -5.0, device="npu")
    scan_2d_kernel[(1,)](x.to("npu"), out, BM=4, BN=8, AXIS=axis, REVERSE=reverse,
                         PROD=prod)
    torch.testing.assert_close(out.cpu(), _reference(x, axis, reverse, prod),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [0, 1])
def test_an_integer_cumsum_is_exact(axis):
    """2 x 16: one step along axis 0, four (an even count of ping-pongs) along axis 1."""
    x = torch.randint(-50, 50, (2, 16), dtype=torch.int32)
    sim, _, _ = simulate(scan_2d_kernel, (x, torch.empty(2, 16, dtype=torch.int32)),
                         {"BM": 2, "BN": 16, "AXIS": axis, "REVERSE": False, "PROD": False},
                         (1,))
    assert torch.equal(sim["out_ptr"], torch.cumsum(x, axis).to(torch.int32))


@triton_op("archsim_test::reverse_cumsum", mutates_args=())
def reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    wrap_triton(scan_2d_kernel)[(1,)](x, out, BM=x.shape[0], BN=x.shape[1], AXIS=1,
                                      REVERSE=True, PROD=False)
    return out


def test_torch_compile_lowers_a_reversed_cumsum():
    torch.manual_seed(4)
    x = torch.randn(4, 16)
    compiled = torch.compile(lambda t: reverse_cumsum(t) * 2.0, backend="archsim")
    with torch.no_grad():
        out = compiled(x.to("npu"))
    torch.testing.assert_close(out.cpu(), _reference(x, 1, True, False) * 2.0,
                               rtol=1e-5, atol=1e-5)


def test_a_scan_with_another_combine_function_is_refused_at_its_line():
    x = torch.randn(8)
    out = torch.full((8,), -5.0, device="npu")
    lines, first = inspect.getsourcelines(running_max_kernel.fn)
    line = first + next(i for i, text in enumerate(lines) if "associative_scan" in text)
    with pytest.raises(TritonError) as error:
        running_max_kernel[(1,)](x.to("npu"), out, BN=8)
    assert str(error.value) == (
        f"kernel running_max_kernel ({__file__}:{line}): tl.associative_scan with combine "
        f"function '_max_combine' (tl.cumsum and tl.cumprod are supported) cannot be "
        f"lowered to the NPU")


def test_an_unsigned_load_is_refused_at_its_line():
    # a review's finding: a uint8 load crashed ('NoneType' object has no attribute
    # 'itemsize'); the IR has no unsigned types
    x = torch.full((8,), 200, dtype=torch.uint8)
    out = torch.zeros(8, dtype=torch.int32, device="npu")
    lines, first = inspect.getsourcelines(cumsum_1d_kernel.fn)
    line = first + next(i for i, text in enumerate(lines) if "tl.load" in text)
    with pytest.raises(TritonError) as error:
        cumsum_1d_kernel[(1,)](x.to("npu"), out, BN=8)
    assert str(error.value) == (f"kernel cumsum_1d_kernel ({__file__}:{line}): a value of "
                                f"type uint8 cannot be lowered to the NPU")
