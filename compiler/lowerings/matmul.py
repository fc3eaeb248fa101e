"""mm, addmm, bmm, baddbmm, linear, matmul: all become one batched MatMul primitive
(plus elementwise epilogues the fusion pass folds into the matmul tiles)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from archsim.errors import LoweringError
from compiler import graph as g
from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import WIDENED_WEIGHTS, BinaryKind
from compiler.lowerings.registry import lowering
from compiler.torch_types import ir_dtype

aten = torch.ops.aten


def _transposed_source(b: Value) -> Value | None:
    """If ``b`` is a 2-D permute [1, 0] of a weight, the weight (load it transposed)."""
    node = b.producer
    if node is not None and isinstance(node.spec, g.Permute) and len(b.shape) == 2:
        return node.inputs[0]
    return None


def _oriented(w: Value) -> tuple[Value, bool]:
    """``w`` as the matmul reads it: the weight a 2-D permute came from, loaded
    transposed (``trans_b``), else ``w`` itself."""
    source = _transposed_source(w)
    return (source, True) if source is not None else (w, False)


def widened_weights(x: Value, w: Value) -> Value | None:
    """If ``w`` is int8 weights cast to ``x``'s float dtype (torchao's weight-only
    layers exported: ``mm(x, w_int8.to(bf16))``, the scale applied after), the int8
    weights: the arrays widen them on the way in (exact), so they are read at one byte
    each, as ``torch._weight_int8pack_mm`` reads them."""
    node = w.producer
    if (node is not None and isinstance(node.spec, g.Cast) and x.dtype.is_float
            and w.dtype is x.dtype and node.inputs[0].dtype is DType.i8):
        return node.inputs[0]
    return None


def _scaled_weights(x: Value, w: Value) -> tuple[Value, Value] | None:
    """If ``w`` is one-byte weights widened to f32, times a scale per output column (or
    one for all), rounded to ``x``'s float dtype (torchao's float8 weight-only layers
    exported: ``(w_e4m3.t().to(f32) * scale.t()).to(bf16)``), the stored weights and
    the scale: the arrays do the same on the way in (:meth:`GraphBuilder.matmul_dequant`),
    reading the weights at one byte each."""
    cast = w.producer
    if (cast is None or not isinstance(cast.spec, g.Cast) or not x.dtype.is_float
            or w.dtype is not x.dtype or len(w.shape) != 2):
        return None
    mul = cast.inputs[0].producer
    if mul is None or not isinstance(mul.spec, g.Binary) or mul.spec.kind is not BinaryKind.mul:
        return None
    n = w.shape[1]
    for widened, scale in (mul.inputs, mul.inputs[::-1]):
        widen = widened.producer if isinstance(widened, Value) else None
        if (widen is not None and isinstance(widen.spec, g.Cast) and widened.dtype.is_float
                and widen.inputs[0].dtype in WIDENED_WEIGHTS and isinstance(scale, Value)
                and scale.dtype.is_float
                and (scale.shape in ((n,), (1, n)) or math.prod(scale.shape) == 1)):
            return widen.inputs[0], scale  # one scale a column ([N, 1] would scale rows)
    return None


def _dequantizing(b: GraphBuilder, x: Value, values: Value, scale: Value) -> Value:
    """``x @ (values * scale)`` with the scale applied per column in the arrays' input
    path, rounded to ``x``'s dtype as torch rounds the dequantized weight."""
    k, n = values.shape
    scales = b.view(scale, (1, n, 1)) if math.prod(scale.shape) == n else \
        b.binary(BinaryKind.mul, b.splat(1.0, (1, n, 1), scale.dtype), b.view(scale, (1, 1, 1)))
    stored, trans_b = _oriented(values)
    out = b.matmul_dequant(x, stored, scales, g.Dequantization(k), trans_b=trans_b)
    return b.cast(out, x.dtype)


def _mm(b: GraphBuilder, x: Value, w: Value, out_dtype: DType | None = None) -> Value:
    scaled = _scaled_weights(x, w) if out_dtype is None and len(x.shape) == 2 else None
    if scaled is not None:
        return _dequantizing(b, x, *scaled)
    narrow = widened_weights(x, w) if out_dtype is None else None
    if narrow is not None:
        stored, trans_b = _oriented(narrow)
        return b.matmul(x, stored, trans_b=trans_b, weight_only=True)
    stored, trans_b = _oriented(w)
    return b.matmul(x, stored, trans_b=trans_b, out_dtype=out_dtype)


def _scaled(b: GraphBuilder, x: Value, alpha: float) -> Value:
    return x if alpha == 1 else b.binary(BinaryKind.mul, x, alpha)


@lowering(aten.mm.default, aten.bmm.default)
def lower_mm(b: GraphBuilder, x: Value, w: Value) -> Value:
    return _mm(b, x, w)


def _plus_product(product: Callable[[GraphBuilder, Value, Value], Value]):
    """``beta * bias + alpha * product(x, w)`` (addmm, baddbmm, addmv)."""
    def lower(b: GraphBuilder, bias: Value, x: Value, w: Value, *, beta: float = 1,
              alpha: float = 1) -> Value:
        scaled = _scaled(b, product(b, x, w), alpha)
        if beta == 0:
            return scaled
        return b.binary(BinaryKind.add, scaled, _scaled(b, bias, beta))
    return lower


lower_addmm = lowering(aten.addmm.default, aten.baddbmm.default)(_plus_product(_mm))


@lowering(aten.linear.default)
def lower_linear(b: GraphBuilder, x: Value, w: Value, bias: Value | None = None) -> Value:
    lead = x.shape[:-1]
    flat = b.view(x, (-1, x.shape[-1]))
    out = b.matmul(flat, w, trans_b=True)
    if bias is not None:
        out = b.binary(BinaryKind.add, out, bias)
    return b.view(out, (*lead, w.shape[0]))


@lowering(aten.matmul.default)
def lower_matmul(b: GraphBuilder, x: Value, w: Value) -> Value:
    if len(x.shape) == 1 and len(w.shape) == 1:
        return b.view(b.matmul(b.view(x, (1, -1)), b.view(w, (-1, 1))), ())
    if len(w.shape) == 1:
        out = b.matmul(x, b.view(w, (-1, 1)))
        return b.view(out, out.shape[:-1])
    if len(x.shape) == 1:
        out = b.matmul(b.view(x, (1, -1)), w)
        return b.view(out, (*out.shape[:-2], out.shape[-1]))
    if len(w.shape) == 2 and len(x.shape) > 2:
        lead = x.shape[:-1]
        out = b.matmul(b.view(x, (-1, x.shape[-1])), w)
        return b.view(out, (*lead, w.shape[-1]))
    return b.matmul(x, w)


@lowering(aten._int_mm.default)
def lower_int_mm(b: GraphBuilder, x: Value, w: Value) -> Value:
    """int8 x int8 -> int32 (``torch._int_mm``): the arrays' int8 mode where the preset
    has one (``core.matrix.rates.i8``), exact either way. ``x`` may be uint8: torchao's
    dynamically quantized layers, exported on CPU, shift activations by 128 to u8 and
    subtract ``128 * sum(w)`` after (x86 VNNI multiplies u8 x i8)."""
    return _mm(b, x, w, DType.i32)  # torch checks the operands are int8


@lowering(aten._weight_int8pack_mm.default)
def lower_weight_int8pack_mm(b: GraphBuilder, x: Value, w: Value, scales: Value) -> Value:
    """Weight-only int8 (``torch._weight_int8pack_mm``): ``x [M, K] @ w [N, K].T`` with
    the int8 weights read at one byte each and widened in the arrays' input path, then
    scaled per output channel (``scales [N]``) in f32 and rounded once, as torch does
    (a fused epilogue)."""
    wide = b.cast(scales, DType.f32)  # first: the matmul's epilogue then takes the rest
    out = b.matmul(x, w, trans_b=True, out_dtype=DType.f32, weight_only=True)
    return b.cast(b.binary(BinaryKind.mul, out, wide), x.dtype)


@lowering(aten.mv.default, aten.dot.default, aten.vdot.default)
def lower_mv(b: GraphBuilder, x: Value, v: Value) -> Value:
    """Matrix-vector and vector-vector products as matmuls with a one-column operand
    (real dtypes: ``vdot`` conjugates nothing)."""
    return lower_matmul(b, x, v)


lower_addmv = lowering(aten.addmv.default)(_plus_product(lower_matmul))


@lowering(torch.ops.higher_order.out_dtype)
def lower_out_dtype(b: GraphBuilder, op: object, output_dtype: object, x: Value,
                    w: Value) -> Value:
    """``out_dtype(aten.mm, torch.int32, int8, int8)``, the higher-order op torchao's
    dynamically quantized linear layers trace to under ``torch.compile``: ``_int_mm``.
    Other ``out_dtype`` uses have no lowering (they run on the host)."""
    if (op is not aten.mm.default or output_dtype != torch.int32
            or x.dtype is not DType.i8 or w.dtype is not DType.i8):
        raise LoweringError(f"out_dtype({op}, {output_dtype}) on {x.dtype} x {w.dtype}: "
                            f"only mm of i8 x i8 -> torch.int32 (torch._int_mm) lowers")
    return _mm(b, x, w, DType.i32)


@lowering(aten._scaled_mm.default)
def lower_scaled_mm(b: GraphBuilder, x: Value, w: Value, scale_a: Value, scale_b: Value,
                    bias: Value | None = None, scale_result: Value | None = None,
                    out_dtype: torch.dtype | None = None, use_fast_accum: bool = False
                    ) -> Value:
    """fp8 x fp8 (``torch._scaled_mm``): the arrays' fp8 mode where the preset has one
    (``core.matrix.rates.fp8``), f32 sums, then in the epilogue (f32) times ``scale_a``
    (a scalar or one per row) and ``scale_b`` (a scalar or one per column), plus the
    bias, rounded once to ``out_dtype`` (default: the inputs' dtype), as torch does on
    CPU."""
    if scale_result is not None:
        raise LoweringError(f"{b.source}: _scaled_mm with scale_result (fp8 outputs "
                            f"scaled on the way out) is not lowered")
    out = _mm(b, x, w, DType.f32)
    for scale in (scale_a, scale_b):
        out = b.binary(BinaryKind.mul, out, b.cast(scale, DType.f32))
    if bias is not None:
        out = b.binary(BinaryKind.add, out, b.cast(bias, DType.f32))
    return b.cast(out, x.dtype if out_dtype is None else ir_dtype(out_dtype, b.source))
