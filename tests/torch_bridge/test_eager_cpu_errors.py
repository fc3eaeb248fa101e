"""A call torch on CPU refuses (an index out of range, an integer division by zero,
overlapping memory) raises the same exception on npu, on the first call of a signature
and on later ones, and writes nothing in place; a CPU kernel torch lacks (a Half
kernel) still leaves the program's numbers (torch_bridge.numerics.cpu_lacks_kernel)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import torch_bridge  # noqa: F401 - registers the npu device
from torch_bridge import eager, numerics


@pytest.fixture(autouse=True)
def fresh_cache():
    eager.clear_cache()
    yield
    numerics.set_mode("checked")
    eager.clear_cache()


def _cpu_exception(call: Callable[[str], object]) -> BaseException:
    with pytest.raises(Exception) as info:
        call("cpu")
    return info.value


def _gather(device: str) -> object:
    x = torch.arange(24.0, device=device).reshape(4, 6)
    return x.gather(1, torch.full((4, 1), 50, device=device))


def _cross_entropy(device: str) -> object:
    x = torch.arange(24.0, device=device).reshape(4, 6)
    return F.cross_entropy(x, torch.tensor([0, 1, 2, 9], device=device))


def _floor_divide_by_zero(device: str) -> object:
    ones = torch.ones(3, dtype=torch.long, device=device)
    return ones // torch.zeros(3, dtype=torch.long, device=device)


def _overlapping_copy(device: str) -> object:
    a = torch.arange(6.0, device=device)
    return a[1:].copy_(a[:-1])


def _scatter_in_place(device: str) -> object:
    target = torch.zeros(4, 6, device=device)
    return target.scatter_(1, torch.full((4, 1), 50, device=device), 1.0)


@pytest.mark.parametrize("call, message", [
    (_gather, "index 50 is out of bounds for dimension 1 with size 6"),
    (_cross_entropy, "Target 9 is out of bounds"),
    (_floor_divide_by_zero, "ZeroDivisionError"),
    (_overlapping_copy, "refer to a single memory location"),
    (_scatter_in_place, "index 50 is out of bounds for dimension 1 with size 6"),
], ids=["gather", "cross_entropy", "floor_divide", "copy_", "scatter_"])
def test_a_call_cpu_refuses_raises_the_same_exception_on_npu(call, message):
    expected = _cpu_exception(call)
    assert message in str(expected)  # the premise: torch on CPU raises this
    with pytest.raises(type(expected), match=message):
        call("npu")


def test_a_refused_in_place_scatter_leaves_its_target_unchanged():
    target = torch.arange(24.0).reshape(4, 6).npu()
    with pytest.raises(RuntimeError, match="index 50 is out of bounds"):
        target.scatter_(1, torch.full((4, 1), 50, device="npu"), -1.0)
    torch.testing.assert_close(target.cpu(), torch.arange(24.0).reshape(4, 6))


@pytest.mark.parametrize("mode", numerics.MODES)
def test_a_later_call_of_a_cached_signature_raises_too(mode):
    """The first call (good indices) caches the program; the second's bad indices are
    torch's error whether its numbers would come from CPU or from the program."""
    numerics.set_mode(mode)
    x = torch.randn(4, 6).npu()
    good = x.gather(1, torch.zeros(4, 1, dtype=torch.long, device="npu"))
    torch.testing.assert_close(good.cpu(), x.cpu()[:, :1])
    with pytest.raises(RuntimeError, match="index 50 is out of bounds"):
        x.gather(1, torch.full((4, 1), 50, device="npu"))


def test_an_integer_modulo_by_zero_and_a_negative_integer_power_raise():
    ones = torch.ones(3, dtype=torch.long, device="npu")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        ones % torch.zeros(3, dtype=torch.long, device="npu")
    with pytest.raises(RuntimeError, match="negative integer powers are not allowed"):
        ones ** -1


def test_a_cpu_kernel_torch_lacks_for_half_leaves_the_program_numbers():
    x = torch.linspace(0.2, 0.7, 8)
    with pytest.raises(RuntimeError, match="not implemented for 'Half'"):
        torch.special.erfcx(x.half())  # the premise: no Half kernel on CPU
    got = torch.special.erfcx(x.half().npu()).cpu()
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.float(), torch.special.erfcx(x), rtol=2e-3, atol=1e-3)


def test_cpu_lacks_kernel_tells_a_missing_kernel_from_a_refused_call():
    assert numerics.cpu_lacks_kernel(RuntimeError('"erfcx_cpu" not implemented for '
                                                  "'BFloat16'"))
    assert numerics.cpu_lacks_kernel(NotImplementedError("Could not run 'aten::x' with "
                                                         "arguments from the 'CPU' backend"))
    assert not numerics.cpu_lacks_kernel(RuntimeError('"bitwise_and_cpu" not implemented '
                                                      "for 'Float'"))
    assert not numerics.cpu_lacks_kernel(IndexError("Target 9 is out of bounds."))
