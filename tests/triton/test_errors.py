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


def test_a_gather_on_meta_tensors_names_the_index_argument():
    """Shape-only (meta) launches have no values to gather by: the error names them."""
    args = (torch.zeros(16, dtype=torch.int32, device="meta"),
            torch.empty(16, device="meta"), torch.empty(16, device="meta"))
    with pytest.raises(TritonError) as error:
        _compile(gather_kernel, args)
    line = _line(gather_kernel, "src_ptr + idx")
    assert str(error.value) == (
        f"kernel gather_kernel ({__file__}:{line}): an address (a gather or scatter "
        f"through an index tensor) depends on the values of idx_ptr, read from memory "
        f"when the kernel runs; a performance-only launch (meta tensors) has no values: "
        f"launch it on npu tensors that hold the data")


def test_a_gather_with_data_reads_the_indexed_elements():
    """With data the gather is one DMA descriptor per run of consecutive indices."""
    idx = torch.tensor([3, 4, 5, 0, 9, 9, 1, 2, 3, 4, 15, 14, 13, 7, 8, 6], dtype=torch.int32)
    src = torch.randn(16)
    sim, _, program = simulate(gather_kernel, (idx, src, torch.empty(16)), {"BLOCK": 16},
                               (1,))
    torch.testing.assert_close(sim["out_ptr"], src[idx.long()], rtol=0, atol=0)
    # runs (equal steps): [3,4,5] [0,9] [9] [1,2,3,4] [15] [14] [13] [7,8] [6]
    loads = [c for c in program.program.commands if type(c.op).__name__ == "Load"
             and c.op.src.tensor == "src_ptr"]
    assert len(loads) == 9
    assert program.resolved == {"idx_ptr": ("an address (a gather or scatter through an "
                                            "index tensor)",)}


def test_a_branch_on_data_is_taken_on_the_launch_values():
    x = torch.randn(16)
    sim, _, program = simulate(branch_kernel, (x, torch.empty(16)), {"BLOCK": 16}, (1,))
    expected = x * 2 if x.sum() > 0 else x
    torch.testing.assert_close(sim["out_ptr"], expected)
    assert "x_ptr: a branch (if/while)" in program.note


def test_a_branch_on_meta_tensors_names_the_argument():
    args = (torch.empty(16, device="meta"), torch.empty(16, device="meta"))
    with pytest.raises(TritonError, match=r"branch_kernel .*:\d+\): a branch \(if/while\) "
                                          r"depends on the values of x_ptr"):
        _compile(branch_kernel, args)


def test_atomics_are_refused():
    with pytest.raises(TritonError, match=r"atomic_kernel .*an atomic operation cannot be"):
        _compile(atomic_kernel, (torch.randn(16), torch.zeros(16)))


def test_a_mask_that_is_not_a_box_is_a_gather():
    x = torch.randn(16)
    sim, _, _ = simulate(strided_mask_kernel, (x, torch.zeros(16)), {"BLOCK": 16}, (1,))
    keep = torch.arange(16) % 2 == 0
    torch.testing.assert_close(sim["out_ptr"], torch.where(keep, x, 0.0))


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


def test_addresses_not_affine_in_the_block_are_a_gather():
    """x_ptr + offs * offs reads elements 0, 1, 4, 9, ...: a run is two elements with
    one step (0,1), (4,9) with step 5, (16,25)...: 8 descriptors."""
    x = torch.randn(256)
    sim, _, program = simulate(square_offsets_kernel, (x, torch.empty(16)), {"BLOCK": 16},
                               (1,))
    torch.testing.assert_close(sim["out_ptr"], x[torch.arange(16) ** 2], rtol=0, atol=0)
    loads = [c for c in program.program.commands if type(c.op).__name__ == "Load"]
    assert len(loads) == 8


def test_a_load_one_element_past_the_tensor_is_refused():
    """x_ptr + offs + 1 over 16 elements reads x[1..16]: x[16] is one past the end."""
    args = (torch.randn(16), torch.empty(16))
    with pytest.raises(TritonError) as error:
        _compile(shifted_kernel, args)
    line = _line(shifted_kernel, "x_ptr + offs + 1")
    assert str(error.value) == (
        f"kernel shifted_kernel ({__file__}:{line}): a load or store whose block is not a "
        f"box: the block reaches outside x_ptr (16 elements) cannot be lowered to the NPU")


@triton.jit
def _atomic_helper(ptr, value):
    tl.atomic_add(ptr, value)


@triton.jit
def helper_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    _atomic_helper(out_ptr + offs, tl.load(x_ptr + offs))


@triton.jit
def divide_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) // 3)


def test_an_error_in_a_helper_names_the_helpers_line():
    with pytest.raises(TritonError) as error:
        _compile(helper_kernel, (torch.randn(16), torch.zeros(16)))
    line = _line(_atomic_helper, "tl.atomic_add")
    assert str(error.value) == (
        f"kernel helper_kernel ({__file__}:{line}, in _atomic_helper): an atomic "
        f"operation cannot be lowered to the NPU")


def test_integer_division_of_loaded_values_is_named_in_plain_words():
    """On meta tensors there is no value to compute at launch; with data it runs."""
    args = (torch.empty(16, dtype=torch.int32, device="meta"),
            torch.empty(16, dtype=torch.int32, device="meta"))
    with pytest.raises(TritonError) as error:
        _compile(divide_kernel, args)
    line = _line(divide_kernel, "// 3")
    assert str(error.value) == (
        f"kernel divide_kernel ({__file__}:{line}): integer division (// or tl.cdiv) of "
        f"values loaded from x_ptr, feeding a stored result, is computed from the values "
        f"read when the kernel runs; a performance-only launch (meta tensors) has no "
        f"values: launch it on npu tensors that hold the data")
    x = torch.arange(-8, 8, dtype=torch.int32)
    sim, _, _ = simulate(divide_kernel, (x, torch.empty(16, dtype=torch.int32)),
                         {"BLOCK": 16}, (1,))
    assert torch.equal(sim["out_ptr"], torch.div(x, 3, rounding_mode="trunc"))


@triton.jit
def reversed_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + BLOCK - 1 - offs))


def test_a_block_that_walks_backwards_is_read_element_by_element():
    """DMA boxes walk forward: x[15], x[14], ... is 16 one-element descriptors."""
    x = torch.randn(16)
    sim, _, program = simulate(reversed_kernel, (x, torch.empty(16)), {"BLOCK": 16}, (1,))
    torch.testing.assert_close(sim["out_ptr"], x.flip(0), rtol=0, atol=0)
    assert sum(type(c.op).__name__ == "Load" for c in program.program.commands) == 16
