"""The ops whose eager calls on npu go through the compiler, by family.

:mod:`torch_bridge.eager` installs a compiled-op kernel for each of
:data:`COMPILED_OPS`; everything else runs on the host (timed and listed).
"""

from __future__ import annotations

import torch

aten = torch.ops.aten
OpOverload = torch._ops.OpOverload

MATMUL: tuple[OpOverload, ...] = (
    aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
)
"""Matrix products (``nn.Linear`` arrives as ``t`` + ``addmm`` / ``mm``)."""

UNARY: tuple[OpOverload, ...] = (
    aten.neg.default, aten.abs.default, aten.relu.default, aten.exp.default,
    aten.log.default, aten.sqrt.default, aten.rsqrt.default, aten.reciprocal.default,
    aten.tanh.default, aten.sigmoid.default, aten.silu.default, aten.sin.default,
    aten.cos.default, aten.erf.default, aten.gelu.default, aten.hardtanh.default,
    aten.leaky_relu.default, aten.hardswish.default, aten.logical_not.default,
    aten.pow.Tensor_Scalar, aten.clamp.default, aten.clamp_min.default,
    aten.clamp_max.default, aten.tan.default, aten.acos.default, aten.asin.default,
    aten.atan.default, aten.sinh.default, aten.cosh.default, aten.asinh.default,
    aten.acosh.default, aten.atanh.default, aten.expm1.default, aten.log1p.default,
    aten.log2.default, aten.log10.default, aten.exp2.default, aten.sign.default,
    aten.sgn.default, aten.trunc.default, aten.floor.default, aten.ceil.default,
    aten.round.default, aten.frac.default,
)
"""Elementwise ops of one tensor (scalar arguments are compiled into the program)."""

BINARY: tuple[OpOverload, ...] = (
    aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor,
    aten.maximum.default, aten.minimum.default, aten.pow.Tensor_Tensor,
    aten.where.self, aten.eq.Tensor, aten.ne.Tensor, aten.lt.Tensor, aten.le.Tensor,
    aten.gt.Tensor, aten.ge.Tensor, aten.eq.Scalar, aten.ne.Scalar, aten.lt.Scalar,
    aten.le.Scalar, aten.gt.Scalar, aten.ge.Scalar, aten.logical_and.default,
    aten.logical_or.default, aten.add.Scalar, aten.sub.Scalar, aten.mul.Scalar,
    aten.div.Scalar, aten.rsub.Scalar, aten.rsub.Tensor, aten.clamp.Tensor,
    aten.clamp_min.Tensor, aten.clamp_max.Tensor, aten.masked_fill.Tensor, aten.atan2.default,
    aten.copysign.Tensor, aten.remainder.Tensor, aten.remainder.Scalar, aten.fmod.Tensor,
    aten.fmod.Scalar, aten.hypot.default, aten.logaddexp.default, aten.bitwise_and.Tensor,
    aten.bitwise_or.Tensor,
)
"""Elementwise ops of several tensors, with broadcasting and type promotion."""

SOFTMAX: tuple[OpOverload, ...] = (aten._softmax.default, aten._log_softmax.default)
NORM: tuple[OpOverload, ...] = (aten.native_layer_norm.default,)
REDUCTION: tuple[OpOverload, ...] = (
    aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.amax.default,
    aten.amin.default,
)

BACKWARD: tuple[OpOverload, ...] = (
    aten.threshold_backward.default, aten.gelu_backward.default,
    aten.sigmoid_backward.default, aten.tanh_backward.default, aten.silu_backward.default,
    aten._softmax_backward_data.default, aten._log_softmax_backward_data.default,
)
"""Autograd's backward ops: compiled through torch's core-ATen decompositions (the
compiler has no lowering of its own for them), as in compiled training graphs."""

LOSS: tuple[OpOverload, ...] = (aten.nll_loss_forward.default, aten.nll_loss_backward.default)
"""``cross_entropy`` is ``log_softmax`` + ``nll_loss``; nll_loss also goes through the
decompositions (each row's target is picked by a select against the column numbers)."""

IN_PLACE: dict[OpOverload, OpOverload] = {
    aten.add_.Tensor: aten.add.Tensor, aten.sub_.Tensor: aten.sub.Tensor,
    aten.mul_.Tensor: aten.mul.Tensor, aten.div_.Tensor: aten.div.Tensor,
}
"""In-place ops run as their functional op with the result stored into ``self`` (the
schedule stores its output where ``self`` lives; no extra copy is timed)."""

COMPILE_AS: dict[OpOverload, OpOverload] = {
    aten.convolution_overrideable.default: aten.convolution.default,
}
"""Ops that reach the device under another name than the one the compiler lowers."""

MODEL_OPS: tuple[OpOverload, ...] = (
    aten.cat.default, aten.stack.default, aten.embedding.default,
    aten.index_select.default, aten.gather.default, aten.cumsum.default,
    aten.tril.default, aten.triu.default, aten.where.ScalarSelf, aten.where.ScalarOther,
    aten.where.Scalar, aten.masked_fill.Scalar, aten.isneginf.default, aten.all.default,
    aten.all.dim, aten.any.default, aten.any.dim, aten.mean.default, aten.var.correction,
    aten.std.correction, aten.minimum.default, aten.hardsigmoid.default,
    aten.softplus.default, aten.mish.default, aten.glu.default,
    aten.max_pool2d_with_indices.default, aten.max_pool2d.default, aten.avg_pool2d.default,
    aten._adaptive_avg_pool2d.default, aten.constant_pad_nd.default,
    aten.upsample_nearest2d.default, aten.upsample_nearest2d.vec, aten.var_mean.correction,
    aten.argmax.default, aten.argmin.default, aten.mv.default, aten.addmv.default,
    aten.dot.default, aten.vdot.default, aten.any.dims, aten.var.dim, aten.softmax.int,
    aten.fix.default, aten.isnan.default, aten.isinf.default, aten.isfinite.default,
    aten.elu.default, aten.lerp.Scalar, aten.lerp.Tensor, aten.xlogy.Tensor,
    aten.div.Tensor_mode, aten.div.Scalar_mode, aten.round.decimals,
    aten.std_mean.correction, aten.nansum.default, aten.addcmul.default,
    aten.addcdiv.default, aten.fmax.default, aten.fmin.default, aten.logical_xor.default,
    aten.heaviside.default, aten.signbit.default, aten.logit.default, aten.sinc.default,
    aten.hardshrink.default, aten.softshrink.default, aten.threshold.default,
    aten.nan_to_num.default, aten.isposinf.default, aten.erfc.default,
    aten.floor_divide.default, aten.floor_divide.Scalar, aten.mse_loss.default,
    aten.index.Tensor,
)
"""What the model families' forward passes call besides the above (token and position
lookups, masks, concatenation for rotary embeddings, pooling and eval batch norm)."""

MORE_REDUCTIONS: tuple[OpOverload, ...] = (
    aten.max.default, aten.min.default, aten.max.dim, aten.min.dim, aten.aminmax.default,
    aten.prod.default, aten.prod.dim_int, aten.count_nonzero.dim_IntList,
    aten.count_nonzero.default, aten.logsumexp.default, aten.trace.default,
)
"""Reductions beyond sum/mean/amax (OpInfo's max/min with and without a dim, prod...)."""

CUMULATIVE: tuple[OpOverload, ...] = (
    aten.cumprod.default, aten.logcumsumexp.default, aten._logcumsumexp.default,
    aten.cummax.default, aten.cummin.default,
)
"""Running results along a dim (cumsum is with the model ops)."""

INDEXING: tuple[OpOverload, ...] = (
    aten.flip.default, aten.roll.default, aten.take.default, aten.index_fill.int_Scalar,
    aten.index_fill.int_Tensor, aten.index_copy.default, aten.index_add.default,
    aten.index_reduce.default, aten.put.default,
)
"""Reordering and run-time indexing along a dim (index_select is with the model ops)."""

NORMS: tuple[OpOverload, ...] = (
    aten.linalg_vector_norm.default, aten.norm.Scalar, aten.norm.ScalarOpt_dim,
    aten.norm.ScalarOpt_dim_dtype, aten.norm.ScalarOpt_dtype, aten.dist.default,
    aten.renorm.default,
)
"""Vector norms and what is built on them (torch.norm, normalize, cdist-free distances)."""

DECOMPOSED: tuple[OpOverload, ...] = (
    aten.huber_loss.default, aten.smooth_l1_loss.default, aten.binary_cross_entropy.default,
    aten.log_sigmoid_forward.default, aten.nll_loss2d_forward.default,
    aten.logaddexp2.default, aten.special_xlog1py.default, aten.special_entr.default,
)
"""Losses and pointwise specials compiled through torch's core-ATen decompositions into
ops that have lowerings."""

SPECIAL: tuple[OpOverload, ...] = (
    aten.lgamma.default, aten.digamma.default, aten.polygamma.default, aten.mvlgamma.default,
    aten.erfinv.default, aten.i0.default, aten.pow.Scalar, aten.frexp.Tensor,
    aten.nextafter.default, aten.special_i0e.default, aten.special_i1.default,
    aten.special_i1e.default, aten.special_modified_bessel_i0.default, aten.special_ndtri.default,
    aten.special_erfcx.default, aten.special_log_ndtr.default, aten.special_zeta.default,
    aten.special_modified_bessel_i1.default, aten.special_spherical_bessel_j0.default,
)
"""Special functions composed of vector primitives (series with recurrence shifts)."""

POOLING: tuple[OpOverload, ...] = (
    aten.max_pool3d_with_indices.default, aten.avg_pool3d.default,
    aten._adaptive_avg_pool3d.default, aten.adaptive_max_pool2d.default,
    aten.adaptive_max_pool3d.default, aten.max_unpool2d.default, aten.max_unpool3d.default,
    aten.max_pool2d_with_indices_backward.default,
)
"""Pooling beyond the plain 2-D windows above: 3-D and adaptive windows, max indices,
unpooling and the max-pool backward (separable vector work over the windows' taps)."""

UPSAMPLE: tuple[OpOverload, ...] = tuple(
    getattr(getattr(aten, name), overload)
    for name in ("upsample_nearest1d", "upsample_nearest3d", "_upsample_nearest_exact1d",
                 "_upsample_nearest_exact2d", "_upsample_nearest_exact3d", "upsample_linear1d",
                 "upsample_bilinear2d", "upsample_trilinear3d", "upsample_bicubic2d",
                 "_upsample_bilinear2d_aa")
    for overload in ("default", "vec")
)
"""``interpolate``'s resampling: per axis, weighted sums of picked input positions."""

SAMPLING: tuple[OpOverload, ...] = (aten.grid_sampler_2d.default, aten.grid_sampler_3d.default)
"""``grid_sample``: positions computed at run time, corners fetched by indexed gathers."""

PADDING: tuple[OpOverload, ...] = (
    aten.reflection_pad1d.default, aten.reflection_pad2d.default,
    aten.reflection_pad3d.default, aten.replication_pad1d.default,
    aten.replication_pad2d.default, aten.replication_pad3d.default,
    aten.channel_shuffle.default, aten.native_channel_shuffle.default, aten.im2col.default,
)
"""Padding by re-reading edge positions, channel shuffle and im2col (copies)."""

SORTING: tuple[OpOverload, ...] = (
    aten.sort.default, aten.sort.stable, aten.topk.default, aten.kthvalue.default,
    aten.median.default, aten.median.dim, aten.nanmedian.default, aten.nanmedian.dim,
)
"""Sorts (by rank for short rows, a bitonic network for longer ones), medians by rank."""

SEARCH: tuple[OpOverload, ...] = (
    aten.searchsorted.Tensor, aten.bucketize.Tensor, aten.isin.Tensor_Tensor,
    aten.mode.default,
)
"""Searches by counting comparisons (values x boundaries)."""

SCATTER: tuple[OpOverload, ...] = (
    aten.scatter.src, aten.scatter_add.default, aten.scatter.reduce, aten.scatter_reduce.two,
    aten.scatter.value, aten.scatter.value_reduce, aten.segment_reduce.default,
)
"""Scatters along any dim and segment reductions, as masked reductions (positions x
indices per row)."""

EXTRAS: tuple[OpOverload, ...] = (
    aten._prelu_kernel.default, aten.angle.default, aten.linalg_cross.default,
    aten.addbmm.default, aten.histc.default, aten.native_dropout_backward.default,
)
"""Small composites: PReLU, the angle of real numbers, the cross product, addbmm, histc,
dropout's backward (a number raised to a tensor, logaddexp2 and frexp are with the
special functions)."""

FUNCTIONAL: tuple[OpOverload, ...] = (
    *MATMUL, *UNARY, *BINARY, *SOFTMAX, *NORM, *REDUCTION, *BACKWARD, *LOSS, *MODEL_OPS,
    *MORE_REDUCTIONS, *CUMULATIVE, *INDEXING, *NORMS, *DECOMPOSED, *SPECIAL,
    *POOLING, *UPSAMPLE, *SAMPLING, *PADDING, *SORTING, *SEARCH, *SCATTER, *EXTRAS,
)


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


IN_PLACE.update({k: v for k, v in in_place_variants(FUNCTIONAL).items() if k not in IN_PLACE})

OUT_OF_PLACE: dict[OpOverload, OpOverload] = out_variants(FUNCTIONAL)
"""``out=`` variants that run as their functional op with the result stored into
``out`` (SDPA's math path calls ``where(..., out=)`` for its safe softmax)."""

COMPILED_OPS: tuple[OpOverload, ...] = (
    *FUNCTIONAL, *IN_PLACE, *COMPILE_AS, *OUT_OF_PLACE,
)
"""Every op whose eager calls on npu go through the compiler and the simulator."""
