"""What is served and how it is split: the request shape, tensor and pipeline
parallelism, each chip's shard of the model, and memory per chip against DRAM.

Megatron-style tensor parallelism: attention heads and the MLP's intermediate
dimension are split over ``tp`` chips (column-parallel Q/K/V and up/gate, row-parallel
output and down projections, an all-reduce after each); key/value heads are split
too, or replicated when there are fewer of them than chips. The embedding and the LM
head are split along the vocabulary. Pipeline parallelism gives each of ``pp`` stages
a contiguous run of layers (earlier stages take the remainder); stage s uses chips
s*tp ... s*tp + tp - 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from archsim.config.model import NpuConfig
from archsim.errors import DeviceMemoryError, ModelConfigError
from serving.spec import ModelSpec

DTYPE_BYTES: dict[str, int] = {"f32": 4, "f16": 2, "bf16": 2}
WEIGHT_BYTES: dict[str, float] = {"int8": 1.0, "fp8": 1.0}
"""Bytes per matmul weight of each weight-only format (``--weights``)."""
KV_BYTES: dict[str, int] = {**DTYPE_BYTES, "int8": 1, "fp8": 1}
"""Bytes per cached K/V element of each ``--kv-dtype``; int8 and fp8 (e4m3) add one
scale per token and key/value head, in the activations' dtype
(:attr:`Request.kv_scale_item`)."""


@dataclass(frozen=True)
class Request:
    """``batch`` sequences, each a ``prefill``-token prompt then ``decode`` generated
    tokens, computed in ``dtype`` with the KV cache in ``kv_dtype``."""

    batch: int = 1
    prefill: int = 128
    decode: int = 16
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    weights: str = ""
    """Format of the matmul weights: ``int8`` weight-only (one byte each, a scale per
    output channel in ``dtype``), ``fp8`` (e4m3, one byte each, an f32 scale per output
    channel; the activations are quantized to e4m3 per token for the matmuls); empty:
    in ``dtype``."""

    @property
    def item(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def weight_item(self) -> float:
        """Bytes per matmul weight."""
        return WEIGHT_BYTES[self.weights] if self.weights else self.item

    @property
    def weight_scale_item(self) -> int:
        """Bytes of each output channel's weight scale (f32 for fp8, else ``dtype``)."""
        return 4 if self.weights == "fp8" else self.item

    @property
    def precision(self) -> str:
        """``int8 weights, bf16 activations, bf16 KV cache``."""
        scales = f" ({self.dtype} scale per token and head)" if self.kv_scale_item else ""
        kv = "fp8 (e4m3)" if self.kv_dtype == "fp8" else self.kv_dtype
        weights, into = self.weights or self.dtype, ""
        if self.weights == "fp8":
            weights, into = "fp8 (e4m3)", " (e4m3 per token into the matmuls)"
        return (f"{weights} weights, {self.dtype} activations{into}, "
                f"{kv} KV cache{scales}")

    @property
    def kv_item(self) -> int:
        return KV_BYTES[self.kv_dtype]

    @property
    def kv_scale_item(self) -> int:
        """Bytes of the scale of each cached token's K (or V) head: an int8 or fp8
        cache keeps one per token and head in ``dtype``; a 16/32-bit cache none."""
        return self.item if self.kv_dtype in ("int8", "fp8") else 0

    def contexts(self) -> tuple[int, ...]:
        """Cache length each decode step attends to (the new token included)."""
        return tuple(self.prefill + 1 + t for t in range(self.decode))


@dataclass(frozen=True)
class Parallelism:
    tp: int = 1
    pp: int = 1
    micro_batches: int = 1

    @property
    def chips(self) -> int:
        return self.tp * self.pp

    def stage_chips(self, stage: int) -> tuple[int, ...]:
        return tuple(range(stage * self.tp, (stage + 1) * self.tp))

    def stage_layers(self, spec: ModelSpec) -> tuple[int, ...]:
        base, extra = divmod(spec.layers, self.pp)
        return tuple(base + (1 if s < extra else 0) for s in range(self.pp))


@dataclass(frozen=True)
class Shard:
    """One chip's part of a layer under tensor parallelism."""

    heads: int
    kv_heads: int
    intermediate: int
    vocab: int


def check(spec: ModelSpec, request: Request, par: Parallelism) -> Shard:
    """The per-chip shard, or a ModelConfigError naming what does not divide."""
    problems = []
    for name, value in (("batch", request.batch), ("prefill", request.prefill),
                        ("decode", request.decode), ("tp", par.tp), ("pp", par.pp),
                        ("micro-batches", par.micro_batches)):
        if value < (0 if name == "decode" else 1):
            problems.append(f"{name} must be >= {0 if name == 'decode' else 1}, got {value}")
    for name, dtype, known in (("dtype", request.dtype, DTYPE_BYTES),
                               ("kv-dtype", request.kv_dtype, KV_BYTES)):
        if dtype not in known:
            problems.append(f"{name} {dtype!r} is not one of {', '.join(known)}")
    if request.weights and request.weights not in WEIGHT_BYTES:
        problems.append(f"weights {request.weights!r} is not one of {', '.join(WEIGHT_BYTES)}")
    if request.weights and request.dtype == "f32":
        problems.append(f"{request.weights} weights take 16-bit activations: --dtype bf16 "
                        f"or f16")
    if problems:
        raise ModelConfigError("; ".join(problems))
    if spec.heads % par.tp:
        raise ModelConfigError(f"{spec.name}: --tp {par.tp} does not divide its {spec.heads} "
                               f"attention heads")
    if spec.kv_heads % par.tp and par.tp % spec.kv_heads:
        raise ModelConfigError(f"{spec.name}: --tp {par.tp} neither divides nor is a multiple "
                               f"of its {spec.kv_heads} key/value heads")
    if par.pp > spec.layers:
        raise ModelConfigError(f"{spec.name}: --pp {par.pp} is more stages than its "
                               f"{spec.layers} layers")
    if request.batch % par.micro_batches:
        raise ModelConfigError(f"--micro-batches {par.micro_batches} does not divide "
                               f"--batch {request.batch}")
    if request.prefill + request.decode > spec.max_positions:
        raise ModelConfigError(f"{spec.name}: {request.prefill} + {request.decode} tokens "
                               f"exceed its {spec.max_positions} positions")
    return Shard(heads=spec.heads // par.tp, kv_heads=max(1, spec.kv_heads // par.tp),
                 intermediate=math.ceil(spec.intermediate / par.tp),
                 vocab=math.ceil(spec.vocab / par.tp))


@dataclass(frozen=True)
class Memory:
    """Bytes on the most loaded chip."""

    weights: int
    kv_cache: int
    activations: int
    """Estimate: one micro-batch's largest layer intermediates (prefill), twice."""

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.activations


def memory_per_chip(spec: ModelSpec, request: Request, par: Parallelism,
                    shard: Shard) -> Memory:
    hd, h = spec.head_dim, spec.hidden
    q, kv = shard.heads * hd, shard.kv_heads * hd
    mlp = (3 if spec.gated else 2) * h * shard.intermediate
    # bytes, weights at their format's size (a per-channel scale each output row)
    outputs = q + 2 * kv + h + (2 if spec.gated else 1) * shard.intermediate + h
    layer = (h * (2 * q + 2 * kv) + mlp) * request.weight_item \
        + (spec.layer_parameters - spec.layer_matmul_weights) * request.item \
        + (outputs * request.weight_scale_item if request.weights else 0)
    embed = (shard.vocab + spec.position_rows) * h * request.item
    head = (0 if spec.tied_embeddings else shard.vocab * h * request.weight_item) \
        + spec.norm_parameters * request.item
    tokens = request.prefill + request.decode
    kv_token = request.batch * 2 * (kv * request.kv_item  # one cached token of one layer
                                    + shard.kv_heads * request.kv_scale_item)
    mb_tokens = request.batch // par.micro_batches * request.prefill
    act = 2 * mb_tokens * (2 * h + q + 2 * kv + 2 * shard.intermediate) * request.item
    worst = Memory(0, 0, 0)
    first = 0
    for stage, layers in enumerate(par.stage_layers(spec)):
        params = layers * layer
        cached = sum(spec.attended(tokens, i) for i in range(first, first + layers))
        first += layers
        if stage == 0:
            params += embed
        if stage == par.pp - 1:
            params += head + (shard.vocab * h * request.item
                              if spec.tied_embeddings and par.pp > 1 else 0)
        mem = Memory(math.ceil(params), cached * kv_token, act)
        worst = max(worst, mem, key=lambda m: m.total)
    return worst


def check_memory(spec: ModelSpec, request: Request, par: Parallelism, shard: Shard,
                 config: NpuConfig) -> Memory:
    """Memory per chip, or a DeviceMemoryError saying by how much it is over and which
    split would fit."""
    mem = memory_per_chip(spec, request, par, shard)
    capacity = config.dram.capacity_bytes
    if mem.total <= capacity:
        return mem
    hint = suggest_split(spec, request, par, config)
    raise DeviceMemoryError(
        f"{spec.name} needs {gib(mem.total)} per chip on {config.name} (weights "
        f"{gib(mem.weights)}, KV cache {gib(mem.kv_cache)}, activations "
        f"{gib(mem.activations)}) but a chip has {gib(capacity)}: "
        f"{gib(mem.total - capacity)} too much; {hint}")


def suggest_split(spec: ModelSpec, request: Request, par: Parallelism,
                  config: NpuConfig) -> str:
    for chips in (2, 4, 8, 16, 32, 64, 128, 256):
        if chips <= par.chips:
            continue
        for tp, pp in ((chips, 1), (min(chips, 8), chips // min(chips, 8))):
            if tp * pp != chips:
                continue
            candidate = Parallelism(tp, pp, par.micro_batches)
            try:
                shard = check(spec, request, candidate)
            except ModelConfigError:
                continue
            if memory_per_chip(spec, request, candidate, shard).total <= config.dram.capacity_bytes:
                flags = f"--tp {tp}" + (f" --pp {pp}" if pp > 1 else "")
                return f"split it over more chips, e.g. {flags} (--chips {chips})"
    return "use more chips (--tp/--pp), a smaller batch or a shorter context"


def gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


__all__ = ["DTYPE_BYTES", "KV_BYTES", "WEIGHT_BYTES", "Memory", "Parallelism", "Request", "Shard", "check",
           "check_memory", "gib", "memory_per_chip", "suggest_split"]
