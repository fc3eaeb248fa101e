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
from archsim.errors import DeviceMemoryError, ModelConfigError, NoChipLinksError
from serving.spec import ModelSpec, check_positions

DTYPE_BYTES: dict[str, int] = {"f32": 4, "f16": 2, "bf16": 2}
WEIGHT_BYTES: dict[str, float] = {"int8": 1.0, "fp8": 1.0, "int4": 0.5}
"""Bytes per matmul weight of each weight format (``--weights``; int4: two a byte)."""
INT4_GROUP_SIZES = (32, 64, 128, 256)
"""Input features sharing an int4 scale and zero point (what torch's CPU op takes)."""
DEFAULT_GROUP_SIZE = 128
ACTIVATIONS: dict[str, str] = {"int8": "int8", "fp8": "fp8"}
"""``--activations`` format -> the weight format it needs (W8A8; fp8's ``_scaled_mm``)."""


@dataclass(frozen=True)
class WeightFormat:
    """A ``Request.weights`` string taken apart: ``int8``, ``fp8``, ``int4-g128``
    (group size 128) or ``int8-a8`` (int8 weights and int8 activations)."""

    name: str
    group_size: int = 0
    """Inputs per int4 scale and zero point (0: per channel)."""
    activations: str = ""
    """Format the activations are quantized to per token ("": the matmuls take them
    in ``dtype``); fp8 weights always quantize them to e4m3."""

    @property
    def text(self) -> str:
        if self.group_size:
            return f"{self.name}-g{self.group_size}"
        return f"{self.name}-a8" if self.activations == "int8" else self.name


def weight_format(weights: str, group_size: int | None = None,
                  activations: str | None = None) -> WeightFormat:
    """``weights`` (a ``--weights`` name or a :attr:`WeightFormat.text`) with the
    ``--group-size`` and ``--activations`` options, or a ModelConfigError saying what
    would be accepted."""
    name, _, suffix = weights.partition("-")
    if suffix.startswith("g") and suffix[1:].isdigit() and group_size is None:
        group_size = int(suffix[1:])
    elif suffix == "a8" and activations is None:
        activations = "int8"
    elif suffix:
        raise ModelConfigError(f"weight format {weights!r} is not one of "
                               f"{', '.join(WEIGHT_BYTES)} (int4-gN, int8-a8)")
    if name not in WEIGHT_BYTES:
        raise ModelConfigError(f"--weights {name!r} is not one of {', '.join(WEIGHT_BYTES)}")
    check_weight_options(name, group_size, activations)
    group = DEFAULT_GROUP_SIZE if group_size is None else group_size
    if name == "int4" and group not in INT4_GROUP_SIZES:
        raise ModelConfigError(f"--group-size {group_size} is not one of "
                               f"{', '.join(map(str, INT4_GROUP_SIZES))}")
    return WeightFormat(name, group if name == "int4" else 0,
                        "int8" if activations == "int8" else "")


def check_weight_options(name: str, group_size: int | None, activations: str | None) -> None:
    """``--group-size`` and ``--activations`` against ``--weights name`` ("": none given):
    a ModelConfigError naming the one weight format each applies to, as ``--help``
    says."""
    got = f"--weights {name}" if name else "no --weights"
    if group_size is not None and name != "int4":
        raise ModelConfigError(f"--group-size applies to --weights int4 (a scale and zero "
                               f"point per group of inputs), got {got}")
    if activations and activations not in ACTIVATIONS:
        raise ModelConfigError(f"--activations {activations!r} is not one of "
                               f"{', '.join(ACTIVATIONS)}")
    if activations and ACTIVATIONS[activations] != name:
        raise ModelConfigError(f"--activations {activations} applies to --weights "
                               f"{ACTIVATIONS[activations]}, got {got}")
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
    """Format of the matmul weights (:func:`weight_format`): ``int8`` weight-only (one
    byte each, a scale per output channel in ``dtype``), ``int8-a8`` (the same weights
    with f32 scales, activations quantized to int8 per token), ``int4-g<G>`` (half a
    byte each, a scale and a zero point in ``dtype`` per output channel and group of
    ``G`` inputs), ``fp8`` (e4m3, one byte each, an f32 scale per output channel; the
    activations are quantized to e4m3 per token for the matmuls); empty: in ``dtype``."""

    @property
    def format(self) -> WeightFormat:
        return weight_format(self.weights)

    @property
    def item(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def weight_item(self) -> float:
        """Bytes per matmul weight."""
        return WEIGHT_BYTES[self.format.name] if self.weights else self.item

    @property
    def weight_scale_item(self) -> int:
        """Bytes of each output channel's weight scale (f32 for fp8 and W8A8, else
        ``dtype``)."""
        fmt = self.format if self.weights else None
        return 4 if fmt and (fmt.name == "fp8" or fmt.activations) else self.item

    def scale_bytes(self, matmul_weights: int, outputs: int) -> float:
        """Bytes of the scales (and zero points) of matmul weights with ``outputs``
        output channels in all: one scale a channel, or for int4 a scale and a zero
        a channel and group."""
        if not self.weights:
            return 0
        group = self.format.group_size
        if group:
            return matmul_weights / group * 2 * self.item
        return outputs * self.weight_scale_item

    @property
    def precision(self) -> str:
        """``int8 weights, bf16 activations, bf16 KV cache``."""
        scales = f" ({self.dtype} scale per token and head)" if self.kv_scale_item else ""
        kv = "fp8 (e4m3)" if self.kv_dtype == "fp8" else self.kv_dtype
        weights, into = self.weights or self.dtype, ""
        fmt = self.format if self.weights else None
        if self.weights == "fp8":
            weights, into = "fp8 (e4m3)", " (e4m3 per token into the matmuls)"
        elif fmt and fmt.group_size:
            weights = (f"int4 (a {self.dtype} scale and zero per {fmt.group_size} "
                       f"inputs)")
        elif fmt and fmt.activations:
            weights, into = "int8", " (int8 per token into the matmuls, int32 sums)"
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
    fmt = None
    if request.weights:
        try:
            fmt = weight_format(request.weights)
        except ModelConfigError as error:  # named with the others, as they are
            problems.append(str(error).removeprefix("--"))
    if fmt and request.dtype == "f32":
        problems.append(f"{fmt.name} weights take 16-bit activations: --dtype bf16 "
                        f"or f16")
    if problems:
        raise ModelConfigError("; ".join(problems))
    if fmt and fmt.group_size:
        _check_groups(spec, par, fmt.group_size)
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
    check_positions(spec.name, (request.prefill, request.decode), spec.max_positions)
    return Shard(heads=spec.heads // par.tp, kv_heads=max(1, spec.kv_heads // par.tp),
                 intermediate=math.ceil(spec.intermediate / par.tp),
                 vocab=math.ceil(spec.vocab / par.tp))


def _check_groups(spec: ModelSpec, par: Parallelism, group: int) -> None:
    """Every matmul's input features (on a chip) split into whole int4 groups."""
    inputs = {"hidden size": spec.hidden,
              "attention output width": spec.heads * spec.head_dim // par.tp,
              "intermediate size": math.ceil(spec.intermediate / par.tp)}
    for what, features in inputs.items():
        if features % group:
            raise ModelConfigError(f"{spec.name}: --group-size {group} does not divide the "
                                   f"{what} {features} (the input features of a matmul"
                                   f"{' per chip' if par.tp > 1 else ''})")


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
    matmul = h * (2 * q + 2 * kv) + mlp
    layer = matmul * request.weight_item \
        + (spec.layer_parameters - spec.layer_matmul_weights) * request.item \
        + request.scale_bytes(matmul, outputs)
    embed = (shard.vocab + spec.position_rows) * h * request.item
    head = (0 if spec.tied_embeddings else shard.vocab * h * request.weight_item
            + request.scale_bytes(shard.vocab * h, shard.vocab)) \
        + spec.norm_parameters * request.item  # the head's scales: a row's, or int4's groups'
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


def check_links(config: NpuConfig, par: Parallelism) -> None:
    """Several chips need the links between them: refused before anything is timed."""
    if par.chips == 1 or config.interconnect is not None:
        return
    raise NoChipLinksError(
        f"{config.name} has no chip-to-chip links (no interconnect: section), so it cannot "
        f"run on {par.chips} chips (--tp {par.tp} --pp {par.pp}): add an interconnect: "
        f"section (kind, topology, links_per_chip, link_bandwidth_gb_per_s, "
        f"latency_cycles) as the shipped presets have, or run on one chip")


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


__all__ = ["ACTIVATIONS", "DEFAULT_GROUP_SIZE", "DTYPE_BYTES", "INT4_GROUP_SIZES", "KV_BYTES",
           "Memory", "Parallelism", "Request", "Shard", "WEIGHT_BYTES", "WeightFormat",
           "check", "check_links", "check_memory", "check_weight_options", "gib",
           "memory_per_chip", "suggest_split", "weight_format"]
