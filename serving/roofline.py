"""Hard lower bounds on serving time, from the model's shapes alone.

- Prefill (TTFT): the matmul FLOPs (2 per weight per token, causal attention's
  QK^T and PV over the tokens each query sees, the LM head for the last token) over
  the chips' peak, or the weights read once over HBM bandwidth, whichever is longer.
- A decode step: every weight and the batch's whole KV cache read once over HBM
  bandwidth, or the step's FLOPs over peak, whichever is longer.

The linear layers' FLOPs count at the peak of the arrays' mode for their inputs: int8
with ``--activations int8`` (W8A8), fp8 with fp8 weights (activations quantized to e4m3
per token), where the preset has that mode (``core.matrix.rates``); attention's at the
activations' dtype's.

Both also wait for every matmul weight to enter an array or a vector unit once
(:func:`weight_intake`): a weight-stationary array takes a row of its tile a cycle,
whatever the weights' dtype, so at small batch quantized weights can stream from HBM
faster than the arrays take them in, and the vector units then take a share.
Bounds for ``chips`` chips assume perfect splitting and free communication.
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.config.model import NpuConfig
from archsim.vector import matvec_ops
from compiler.ir.ops import Dequant
from serving.plan import Request
from serving.spec import ModelSpec


@dataclass(frozen=True)
class Roofline:
    prefill_flops: float
    prefill_s: float
    """TTFT lower bound."""
    decode_bytes: tuple[float, ...]
    """HBM bytes each decode step must read (weights + KV cache)."""
    decode_s: tuple[float, ...]
    """Lower bound of each decode step."""

    @property
    def tpot_s(self) -> float:
        """TPOT lower bound: the mean decode step bound."""
        return sum(self.decode_s) / len(self.decode_s) if self.decode_s else 0.0


def peak_flops(config: NpuConfig, dtype: str) -> float:
    """Matrix peak for ``dtype``: f32 on a 16-bit array takes ``f32_passes`` passes."""
    matrix = config.core.matrix
    if dtype == "f32" and matrix.input_dtype != "f32":
        return config.peak_flops / matrix.f32_passes
    return config.peak_flops


def linear_peak(config: NpuConfig, request: Request) -> float:
    """Matrix peak of the linear layers: the arrays' narrow mode when the activations
    are quantized into one, else :func:`peak_flops` of ``request.dtype``."""
    if request.weights == "fp8":
        return config.peak_ops("fp8")
    if request.weights and request.format.activations == "int8":
        return config.peak_ops("i8")
    return peak_flops(config, request.dtype)


def weight_intake(config: NpuConfig, request: Request) -> float:
    """Matmul weights a second one chip takes in: each array a row of weights a cycle
    (``ws``: a tile's R rows shift in over R cycles; ``os``: the weights stream in along
    the C columns; ``is``: along the R rows), times the K elements a PE packs in the
    linear layers' narrow mode (divided by the passes of f32 on 16-bit arrays), as
    :func:`archsim.matrix.matmul_cycles` times them; with weight-only formats, plus the
    vector units', which take a share of such a decode GEMV's columns
    (:mod:`compiler.kernels.matmul_vector`): their lanes over the operations a weight
    takes there at the batch's rows, at least a multiply-add a row and its unpacking
    (:attr:`compiler.ir.ops.Dequant.unpack_ops`: int4 two, one-byte weights one)."""
    matrix, vector = config.core.matrix, config.core.vector
    row = matrix.rows if matrix.dataflow == "is" else matrix.cols
    mode = linear_peak(config, request) / config.peak_flops
    arrays = config.cores * matrix.arrays * row * mode * config.clock_hz
    fmt = request.format if request.weights else None
    if fmt is None or fmt.activations or fmt.name == "fp8":
        return arrays  # the matmuls multiply quantized activations on the arrays
    unpack = Dequant(1, 0, "halves" if fmt.name == "int4" else "").unpack_ops
    ops = matvec_ops(request.batch, 1, 1, unpack, 0) * vector.costs.elementwise
    return arrays + config.cores * vector.lanes / ops * config.clock_hz


def causal_pairs(spec: ModelSpec, tokens: int, layer: int = 0) -> int:
    """(query, key) pairs causal attention computes over a ``tokens``-token prompt in
    layer ``layer``."""
    window = spec.window(layer)
    if not window or window >= tokens:
        return tokens * (tokens + 1) // 2
    return window * (window + 1) // 2 + (tokens - window) * window


def weight_bytes(spec: ModelSpec, request: Request) -> float:
    """Weights a decode step reads: every layer and the head (the embedding only for
    the batch's rows, counted as nothing)."""
    head = spec.head_parameters if not spec.tied_embeddings else spec.vocab * spec.hidden
    if not request.weights:
        return (spec.layers * spec.layer_parameters + head) * request.item
    # weight-only: matmul weights (the untied head's too) at their format's size; norms,
    # a tied head and one scale per matmul output row in ``dtype`` (scales ignored: a
    # bound may only be lower)
    matmul = spec.layers * spec.layer_matmul_weights \
        + (spec.vocab * spec.hidden if not spec.tied_embeddings else 0)
    rest = spec.layers * spec.layer_parameters + head - matmul
    return matmul * request.weight_item + rest * request.item


def roofline(spec: ModelSpec, request: Request, config: NpuConfig, chips: int = 1) -> Roofline:
    peak = peak_flops(config, request.dtype) * chips
    linear = linear_peak(config, request) * chips
    intake = weight_intake(config, request) * chips
    matmul_weights = spec.layers * spec.layer_matmul_weights + spec.hidden * spec.vocab
    bandwidth = config.dram_bandwidth_bytes_per_s * chips
    b, s = request.batch, request.prefill
    qk_width = spec.heads * spec.head_dim
    weights = weight_bytes(spec, request)
    head_flops = 2 * spec.hidden * spec.vocab
    pairs = sum(causal_pairs(spec, s, layer) for layer in range(spec.layers))
    linear_flops = b * (spec.layers * 2 * s * spec.layer_matmul_weights + head_flops)
    attention_flops = b * 4 * qk_width * pairs
    prefill_flops = linear_flops + attention_flops
    prefill_s = max(linear_flops / linear + attention_flops / peak, weights / bandwidth,
                    matmul_weights / intake)
    decode_bytes, decode_s = [], []
    for context in request.contexts():
        seen = spec.kv_tokens(context)  # over all layers
        kv = b * seen * spec.kv_elements_per_token() * request.kv_item
        step_linear = b * (spec.layers * 2 * spec.layer_matmul_weights + head_flops)
        decode_bytes.append(weights + kv)
        decode_s.append(max((weights + kv) / bandwidth,
                            step_linear / linear + b * 4 * qk_width * seen / peak,
                            matmul_weights / intake))
    return Roofline(prefill_flops, prefill_s, tuple(decode_bytes), tuple(decode_s))


__all__ = ["Roofline", "causal_pairs", "linear_peak", "peak_flops", "roofline",
           "weight_bytes", "weight_intake"]
