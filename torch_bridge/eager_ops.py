"""The ops whose eager calls on npu go through the compiler, derived from its lowering table.

Every op of :data:`compiler.lowerings.LOWERINGS` runs eagerly unless a rule
(:data:`RULES`) or :data:`EXCLUDED` says why not: adding a lowering makes the op
available on the device without a second edit. Ops with no lowering of their own that
compile through torch's core-ATen decompositions are listed in :data:`DECOMPOSED`. Each
op's in-place and ``out=`` overloads follow from the schemas. :mod:`torch_bridge.eager`
installs a compiled-op kernel for each of :data:`COMPILED_OPS`; everything else runs on
the host (timed, listed and warned).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from compiler.lowerings import LOWERINGS
from torch_bridge.eager_adapted import ADAPTED

aten = torch.ops.aten
OpOverload = torch._ops.OpOverload


def _is_view(op: OpOverload) -> bool:
    return any(r.alias_info is not None for r in op._schema.returns)


def _is_composite_implicit(op: OpOverload) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(),
                                                          "CompositeImplicitAutograd")


RULES: tuple[tuple[Callable[[OpOverload], bool], str], ...] = (
    (_is_view, ("a view: its result shares the input's storage (the builtin view kernels "
                "make it, metadata only)")),
    (_is_composite_implicit, ("torch decomposes it before the device "
                              "(CompositeImplicitAutograd): a device kernel would take "
                              "autograd's place, and backward through it would get no "
                              "gradient")),
    (ADAPTED.__contains__, "eager_adapted's kernel adapts its arguments to a compiled op"),
)
"""Kinds of lowered ops that do not run eagerly as themselves, and why."""

_COPY = ("a copy: the builtin copy_ times it as a DRAM copy (and as a host-link transfer "
         "across devices)")
_FACTORY = "a factory: made by the builtin empty and timed fill_ kernels"

EXCLUDED: dict[OpOverload, str] = {
    aten._to_copy.default: _COPY,
    aten.clone.default: _COPY,
    aten.copy.default: _COPY,
    aten.lift_fresh_copy.default: _COPY,
    aten._unsafe_view.default: "a view in all but autograd's eyes (matmul reshapes its "
                               "result with it): torch's kernel calls view",
    aten.empty.memory_format: _FACTORY,
    aten.empty_like.default: _FACTORY,
    aten.empty_permuted.default: _FACTORY,
    aten.full.default: _FACTORY,
    aten.full_like.default: _FACTORY,
    aten.ones_like.default: _FACTORY,
    aten.zeros_like.default: _FACTORY,
    aten.scalar_tensor.default: _FACTORY,
    aten.convolution.default: "torch hands a device's convolution over as "
                              "convolution_overrideable, which COMPILE_AS lowers as this op",
}
"""Lowered ops that do not run eagerly as themselves, one by one, and why."""


def exclusion(op: OpOverload) -> str | None:
    """Why the lowered ``op`` does not run eagerly as itself (``None``: it does)."""
    if op in EXCLUDED:
        return EXCLUDED[op]
    return next((reason for applies, reason in RULES if applies(op)), None)


LOWERED: tuple[OpOverload, ...] = tuple(
    op for op in LOWERINGS if isinstance(op, OpOverload) and exclusion(op) is None)
"""Ops with a lowering of their own that run eagerly."""

BACKWARD: tuple[OpOverload, ...] = (
    aten.threshold_backward.default, aten.gelu_backward.default,
    aten.sigmoid_backward.default, aten.tanh_backward.default, aten.silu_backward.default,
    aten._softmax_backward_data.default, aten._log_softmax_backward_data.default,
)
"""Autograd's backward ops, compiled through the decompositions as in compiled training
graphs."""

LOSS: tuple[OpOverload, ...] = (aten.nll_loss_forward.default, aten.nll_loss_backward.default)
"""``cross_entropy`` is ``log_softmax`` + ``nll_loss``; each row's target is picked by a
select against the column numbers."""

DECOMPOSED: tuple[OpOverload, ...] = (
    *BACKWARD, *LOSS,
    aten.huber_loss.default, aten.smooth_l1_loss.default, aten.binary_cross_entropy.default,
    aten.log_sigmoid_forward.default, aten.special_xlog1py.default,
    aten.special_entr.default, aten.mvlgamma.default, aten.softplus.default,
    aten.mish.default, aten.glu.default, aten.hardsigmoid.default, aten.isneginf.default,
    aten.all.default, aten.all.dim, aten.std.correction, aten.stack.default,
    aten.tril.default, aten.triu.default,
)
"""Ops with no lowering of their own, compiled through torch's core-ATen decompositions
(``compiler.compile_op``) into ops that have one: they cannot be derived from the
lowering table, so they are listed."""

COMPILE_AS: dict[OpOverload, OpOverload] = {
    aten.convolution_overrideable.default: aten.convolution.default,
}
"""Ops that reach the device under another name than the one the compiler lowers."""

FUNCTIONAL: tuple[OpOverload, ...] = (*LOWERED, *DECOMPOSED)


def out_variants(ops: tuple[OpOverload, ...]) -> dict[OpOverload, OpOverload]:
    """Each op's ``out=`` overload (``exp.out``, ``sum.IntList_out``, ``max.dim_max``)
    with the same inputs and one out tensor per result, mapped to the op: torch's
    composite ops and users call these, and they run as the op with its results stored
    into the out tensors."""
    found: dict[OpOverload, OpOverload] = {}
    for op in ops:
        name = op._overloadname
        preferred = ("out" if name == "default" else f"{name}_out", "out")
        names = [*(n for n in preferred if n in op.overloadpacket.overloads()),
                 *sorted(set(op.overloadpacket.overloads()) - set(preferred))]
        for candidate in names:
            out = getattr(op.overloadpacket, candidate)
            if out is not op and out not in found and _same_inputs(op, out):
                found[out] = op
                break
    return found


def out_names(out: OpOverload) -> tuple[str, ...]:
    """The keyword names of an ``out=`` overload's out tensors, in result order."""
    return tuple(a.name for a in out._schema.arguments if a.is_out)


def _same_inputs(op: OpOverload, out: OpOverload) -> bool:
    outs = out_names(out)
    inputs = [(a.name, str(a.type)) for a in out._schema.arguments if not a.is_out]
    return (len(outs) == len(op._schema.returns) and bool(outs)
            and (len(outs) > 1 or outs[0] == "out")
            and inputs == [(a.name, str(a.type)) for a in op._schema.arguments])


def in_place_variants(ops: tuple[OpOverload, ...]) -> dict[OpOverload, OpOverload]:
    """Each op's in-place overload (``masked_fill_.Scalar``, ``clamp_min_.Tensor``) with
    the same inputs, mapped to the op."""
    found: dict[OpOverload, OpOverload] = {}
    for op in ops:
        packet = getattr(aten, op.overloadpacket.__name__ + "_", None)
        if packet is None or op._overloadname not in packet.overloads():
            continue
        variant = getattr(packet, op._overloadname)
        if [(a.name, str(a.type)) for a in variant._schema.arguments] == \
                [(a.name, str(a.type)) for a in op._schema.arguments]:
            found[variant] = op
    return found


IN_PLACE: dict[OpOverload, OpOverload] = in_place_variants(FUNCTIONAL)
"""In-place ops run as their functional op with the result stored into ``self`` (the
schedule stores its output where ``self`` lives; no extra copy is timed)."""

OUT_OF_PLACE: dict[OpOverload, OpOverload] = out_variants(FUNCTIONAL)
"""``out=`` variants that run as their functional op with the result stored into
``out`` (SDPA's math path calls ``where(..., out=)`` for its safe softmax)."""

COMPILED_OPS: tuple[OpOverload, ...] = (
    *FUNCTIONAL, *IN_PLACE, *COMPILE_AS, *OUT_OF_PLACE,
)
"""Every op whose eager calls on npu go through the compiler and the simulator."""
