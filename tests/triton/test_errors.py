"""What cannot be lowered is refused with the kernel, the line and the construct; bf16
is computed correctly (Triton's interpreter adds raw bits)."""

import inspect

import pytest
import torch
import triton
import triton.language as tl

from archsim.config import load_config
from archsim.errors import TritonError
from compiler.triton import compile_launch
from triton_helpers import interpret, simulate


@triton.jit
def gather_kernel(idx_ptr, src_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    idx = tl.load(idx_ptr + offs)
    tl.store(out_ptr + offs, tl.load(src_ptr + idx))


@triton.jit
def branch_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    if tl.sum(x, axis=0) > 0:
        x = x * 2
    tl.store(out_ptr + offs, x)


@triton.jit
def atomic_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr + offs, tl.load(x_ptr + offs))


@triton.jit
def strided_mask_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    keep = offs % 2 == 0
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=keep, other=0.0), mask=keep)


@triton.jit
def bf16_add_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))



@triton.jit
def square_offsets_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * offs))


@triton.jit
def shifted_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs + 1))

def _line(kernel, text):
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _compile(kernel, args, grid=(1,)):
    return compile_launch(kernel, args, {"BLOCK": 16}, grid, load_config("atom"))


def test_an_address_computed_from_loaded_data_is_refused():
    args = (torch.zeros(16, dtype=torch.int32), torch.randn(16), torch.empty(16))
    with pytest.raises(TritonError) as error:
        _compile(gather_kernel, args)
    line = _line(gather_kernel, "src_ptr + idx")
    assert str(error.value) == (
        f"kernel gather_kernel ({__file__}:{line}): an address computed from loaded data "
        f"(a gather) cannot be lowered to the NPU")


def test_a_branch_on_data_is_refused():
    with pytest.raises(TritonError, match=r"branch_kernel .*:\d+\): a branch on data"):
        _compile(branch_kernel, (torch.randn(16), torch.empty(16)))


def test_atomics_are_refused():
    with pytest.raises(TritonError, match=r"atomic_kernel .*an atomic operation cannot be"):
        _compile(atomic_kernel, (torch.randn(16), torch.zeros(16)))


def test_a_mask_that_is_not_a_box_is_refused():
    with pytest.raises(TritonError, match="the mask does not keep a rectangular part"):
        _compile(strided_mask_kernel, (torch.randn(16), torch.empty(16)))


def test_non_contiguous_arguments_are_refused_with_the_fix():
    x = torch.randn(16, 2).t()
    with pytest.raises(TritonError, match=r"argument x_ptr: a \[2, 16\] tensor with strides "
                                          r"\[1, 2\] is not contiguous; pass "
                                          r"x_ptr.contiguous\(\)"):
        _compile(bf16_add_kernel, (x, x, torch.empty(2, 16)))


def test_bf16_arithmetic_is_computed_correctly_where_the_interpreter_is_not():
    torch.manual_seed(5)
    x, y = (torch.randn(16).to(torch.bfloat16) for _ in range(2))
    args = (x, y, torch.empty(16, dtype=torch.bfloat16))
    sim, _, _ = simulate(bf16_add_kernel, args, {"BLOCK": 16}, (1,))
    torch.testing.assert_close(sim["out_ptr"], x + y, rtol=0, atol=0)
    wrong = interpret(bf16_add_kernel, args, {"BLOCK": 16}, (1,))["out_ptr"]
    assert not torch.equal(wrong, x + y)  # Triton 3.8's interpreter adds the raw bits


def test_addresses_not_affine_in_the_block_are_refused():
    """x_ptr + offs * offs reads elements 0, 1, 4, 9, ...: all inside x (256 of them)
    and computed from no loaded data, but no stride makes them a box."""
    args = (torch.randn(256), torch.empty(16))
    with pytest.raises(TritonError) as error:
        _compile(square_offsets_kernel, args)
    line = _line(square_offsets_kernel, "x_ptr + offs * offs")
    assert str(error.value) == (
        f"kernel square_offsets_kernel ({__file__}:{line}): a load or store whose block is "
        f"not a box: the block's addresses are not affine in its indices (a gather or "
        f"scatter) cannot be lowered to the NPU")


def test_a_load_one_element_past_the_tensor_is_refused():
    """x_ptr + offs + 1 over 16 elements reads x[1..16]: x[16] is one past the end."""
    args = (torch.randn(16), torch.empty(16))
    with pytest.raises(TritonError) as error:
        _compile(shifted_kernel, args)
    line = _line(shifted_kernel, "x_ptr + offs + 1")
    assert str(error.value) == (
        f"kernel shifted_kernel ({__file__}:{line}): a load or store whose block is not a "
        f"box: the block reaches outside x_ptr (16 elements) cannot be lowered to the NPU")
