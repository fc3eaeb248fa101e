"""The eager op list is derived from the compiler's lowering table: every lowered op runs
eagerly through the compiler or has a stated reason not to, and the exceptions are not
stale."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from compiler.lowerings import LOWERINGS
from torch_bridge import eager, eager_ops, kernels

aten = torch.ops.aten
LOWERED_OPS = sorted((op for op in LOWERINGS if isinstance(op, torch._ops.OpOverload)), key=str)


@pytest.mark.parametrize("op", LOWERED_OPS, ids=str)
def test_every_lowered_op_runs_eagerly_or_says_why_not(op: torch._ops.OpOverload) -> None:
    reason = eager_ops.exclusion(op)
    installed = kernels.registered_kernels().get(op)
    if reason is None:
        assert installed is eager._installed_kernel(op), f"{op} has a lowering but no eager kernel"
    else:
        assert reason.strip() and op not in eager_ops.COMPILED_OPS


def test_exclusions_name_lowered_ops() -> None:
    assert not [op for op in eager_ops.EXCLUDED if op not in LOWERINGS]


def test_decomposed_ops_have_no_lowering_but_a_decomposition() -> None:
    from torch._decomp import core_aten_decompositions

    decompositions = core_aten_decompositions()
    assert not [op for op in eager_ops.DECOMPOSED if op in LOWERINGS]
    assert not [op for op in eager_ops.DECOMPOSED if op not in decompositions]


def test_in_place_and_out_variants_follow_from_the_schemas() -> None:
    assert eager_ops.IN_PLACE[aten.add_.Tensor] is aten.add.Tensor
    assert eager_ops.IN_PLACE[aten.masked_fill_.Scalar] is aten.masked_fill.Scalar
    assert eager_ops.OUT_OF_PLACE[aten.exp.out] is aten.exp.default
    assert eager_ops.OUT_OF_PLACE[aten.max.dim_max] is aten.max.dim


def test_a_decomposed_composite_keeps_its_gradient_on_the_device() -> None:
    """softmax.int is CompositeImplicitAutograd: a device kernel of its own would stand
    in for autograd and backward would get no gradient."""
    x = torch.randn(3, 5)
    weights = torch.arange(5.0)
    on_npu = x.to("npu").requires_grad_()
    (torch.softmax(on_npu, -1) * weights.to("npu")).sum().backward()
    on_cpu = x.clone().requires_grad_()
    (torch.softmax(on_cpu, -1) * weights).sum().backward()
    assert on_npu.grad is not None
    assert_close(on_npu.grad.cpu(), on_cpu.grad)
