"""Hardware description: frozen dataclasses, one per block, units in field names.

Pure data: no SimPy, no torch. Derived figures (peak FLOP/s, DRAM bandwidth in
bytes per cycle) are properties, so there is one source of truth per number.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from collections.abc import Iterable
from typing import Any, Literal

from archsim.config.energy import EnergyConfig, PowerConfig
from archsim.config.names import (HDMA, HOST, SHARED, TDMA, dma_engine, mxu_engine,
                                   sram_space, vpu_engine)

Dataflow = Literal["ws", "os", "is"]
DATAFLOWS: tuple[str, ...] = ("ws", "os", "is")
Precision = Literal["default", "high", "highest"]
F32_PASSES: dict[str, int] = {"default": 1, "high": 3, "highest": 6}
"""bf16 passes an f32 matmul takes on a 16-bit array under each precision policy, as
XLA defines them (``jax.lax.Precision``): DEFAULT rounds the operands to bf16 (one
pass), HIGH is bf16x3 (three passes), HIGHEST is bf16x6 (six passes)."""
DequantPlacement = Literal["input_path", "vector"]
DEQUANT_PLACEMENTS: tuple[str, ...] = ("input_path", "vector")
"""Where weight-only quantized weights (int4 packed, int8, fp8) are dequantized:
``input_path``, by the arrays as they read them (no vector work, no dequantized copy);
``vector``, by the vector unit, a k step's tile at a time, into the arrays' input dtype
in the scratchpad, which a plain multiply then reads (:mod:`compiler.kernels.matmul_dequant`)."""
MATRIX_INPUT_DTYPES: tuple[str, ...] = ("f32", "f16", "bf16", "i8")
MATRIX_ACCUMULATOR_DTYPES: tuple[str, ...] = ("f32", "i32")


@dataclass(frozen=True)
class ScratchpadConfig:
    """A core's private SRAM."""

    size_bytes: int
    banks: int
    port_bandwidth_bytes_per_cycle: int
    """Bandwidth of the port DMA traffic uses (all banks together)."""


@dataclass(frozen=True)
class DmaConfig:
    """The DMA engines of one core (each an independent in-order queue)."""

    engines: int
    bandwidth_bytes_per_cycle: int
    setup_latency_cycles: int
    outstanding: int = 1
    """Transfers one engine keeps in flight. Above 1, the next command's setup and
    DRAM latency overlap the transfers before it (descriptor queues, as real DMA
    engines have), and the transfers in flight share the engine's bandwidth; 1 runs
    each transfer to its end before the next begins."""


@dataclass(frozen=True)
class NarrowRatesConfig:
    """MACs one PE does per cycle on inputs narrower than the array's native dtype, by
    the IR's name of the dtype: the array packs that many K elements into each PE
    (Ascend's cube is 16x16x16 for f16 and 16x32x16 for int8). 0: the array has no
    such mode; the compiler widens those inputs to the native dtype on the way in and
    they run at the native rate (1)."""

    i8: int = 0
    i4: int = 0
    """Packed two per byte (weights), activations in int8 or wider."""
    fp8: int = 0
    """e4m3 and e5m2 alike."""

    def of(self, dtype: str) -> int:
        """The rate of inputs of IR dtype ``dtype``: 1 for the native and float types,
        and for a narrow type the array has no mode for."""
        return (getattr(self, dtype) or 1) if dtype in NARROW_DTYPES else 1


NARROW_DTYPES: tuple[str, ...] = tuple(f.name for f in fields(NarrowRatesConfig))


@dataclass(frozen=True)
class MatrixConfig:
    """Systolic arrays of one core; each array is its own engine (``coreN.mxuM``)."""

    arrays: int
    rows: int
    cols: int
    dataflow: Dataflow
    input_dtype: str
    accumulator_dtype: str
    weight_buffers: int = 1
    """Weight tiles a weight-stationary array holds. 2 (double buffering, as TPUs do:
    the next fold's weights shift in while the current fold streams) pays the pipeline
    fill and drain once per matmul and each fold ``max(T, rows)``; 1 (SCALE-Sim's
    model) loads, fills and drains every fold: ``2R + C + T - 2``."""
    f32_precision: Precision = "high"
    """How an f32 matmul runs on an array whose native input is 16-bit: ``default``
    (one bf16 pass, what XLA does on TPUs unless a program asks for more), ``high``
    (bf16x3) or ``highest`` (bf16x6); see :data:`F32_PASSES`. Timing only: functional
    runs compute in f32. Ignored when the array's input_dtype is f32."""
    rates: NarrowRatesConfig = field(default_factory=NarrowRatesConfig)
    """Per narrow input dtype (i8, i4, fp8), MACs per PE per cycle (0: no such mode)."""
    dequant: DequantPlacement = "input_path"
    """Where weight-only quantized weights are dequantized (:data:`DEQUANT_PLACEMENTS`):
    in the arrays' input path or on the vector unit."""

    def peak_macs_per_cycle(self, dtype: str) -> int:
        """MACs all arrays of a core do per cycle on inputs of IR dtype ``dtype``."""
        return self.macs_per_cycle * self.rates.of(dtype)

    @property
    def f32_passes(self) -> int:
        return F32_PASSES[self.f32_precision]

    @property
    def macs_per_cycle(self) -> int:
        return self.arrays * self.rows * self.cols


@dataclass(frozen=True)
class VectorCostsConfig:
    """Cycles per element per lane for each vector op class."""

    elementwise: int = 1
    transcendental: int = 4
    divide: int = 2
    reduce: int = 1
    cast: int = 1
    copy: int = 1


@dataclass(frozen=True)
class VectorConfig:
    lanes: int
    pipeline_latency_cycles: int
    costs: VectorCostsConfig = field(default_factory=VectorCostsConfig)
    sram_bandwidth_bytes_per_cycle: int | None = None
    """Scratchpad bytes per cycle the vector unit's loads and stores move together: an
    op that streams its operands from SRAM and its result back takes at least
    (bytes read + bytes written) / this. None: not modelled (compute-bound only)."""


@dataclass(frozen=True)
class CoreConfig:
    scratchpad: ScratchpadConfig
    dma: DmaConfig
    matrix: MatrixConfig
    vector: VectorConfig


@dataclass(frozen=True)
class SharedSramConfig:
    """On-chip SRAM shared by all cores, filled by the task DMA (``tdma``)."""

    size_bytes: int
    bandwidth_bytes_per_cycle: int
    tdma_bandwidth_bytes_per_cycle: int
    tdma_setup_latency_cycles: int


@dataclass(frozen=True)
class DramConfig:
    kind: str
    channels: int
    channel_bandwidth_gb_per_s: float
    latency_cycles: int
    capacity_bytes: int
    interleave_bytes: int
    """Consecutive bytes mapped to one channel before moving to the next."""
    access_granularity_bytes: int
    """Smallest access; a strided transfer pays this much per contiguous run at least."""
    efficiency: float = 1.0
    """Fraction of the pins' bandwidth the channels sustain on streaming traffic: refresh
    (tRFC of every tREFI), row activations and read/write turnarounds take the rest.
    1.0 models the peak."""


@dataclass(frozen=True)
class NocConfig:
    """Each core has one link into the network-on-chip; traffic leaving or entering
    a core shares that link."""

    latency_cycles: int
    link_bandwidth_bytes_per_cycle: int


@dataclass(frozen=True)
class HostLinkConfig:
    kind: str
    bandwidth_gb_per_s: float
    latency_cycles: int
    host_flops_per_s: float
    """Throughput assumed for work that falls back to the host CPU."""


Topology = Literal["ring", "torus2d", "torus3d", "switch"]
TOPOLOGIES: tuple[str, ...] = ("ring", "torus2d", "torus3d", "switch")


@dataclass(frozen=True)
class InterconnectConfig:
    """Chip-to-chip links (ICI, NVLink, HCCS...) joining copies of this chip.

    ``ring``: each chip links to its two neighbours; ``torus2d``/``torus3d``: to its
    neighbours in each dimension (the chips of a run are laid out on the most nearly
    square/cubic grid), routes dimension by dimension; ``switch``: every chip has one
    port into a non-blocking switch. A chip's links are shared out evenly over its
    neighbour directions (``links_per_chip`` / (2 x dimensions)); a switch port carries
    all of them."""

    kind: str
    topology: Topology
    links_per_chip: int
    link_bandwidth_gb_per_s: float
    """Per link and per direction."""
    latency_cycles: int
    """Per hop (chip clock cycles), paid before a transfer's first byte arrives."""


@dataclass(frozen=True)
class RuntimeConfig:
    """What the software stack adds on top of the hardware, each where it occurs.

    All zero (the default) is the pure hardware model. ``kernel_launch_us``: per kernel
    (a fused group of the compiler), the device's dispatch of it from a captured graph
    (graph mode: no host launch, but the stream's task scheduler still starts each
    kernel after the previous one ended); it occupies the chip before the kernel.
    ``collective_latency_us``: per collective, once, on top of its transfers (the
    communication library's launch, the ranks' handshake and the completion
    notification). ``host_step_us``: per model step (prefill or decode), the host's
    work between steps: sampling, scheduling, preparing the next inputs.
    ``op_dispatch_us``: per call issued from Python one at a time (an eager op, a
    compiled graph's call, a Triton launch), the host framework's dispatch of it
    (argument checks, allocation, the launch call); a captured graph's kernels skip it,
    so eager mode pays it per op and graph mode once per step. ``kernel_order``:
    ``overlapped`` (the default, a compiler's static schedule), a kernel's first loads
    may run under the previous kernel's work (the next weights prefetched); ``serial``
    (a runtime's stream, as torchair's graph mode), each kernel starts after every
    command of the previous one ended. ``conv_taps``: how the compiler may fill a
    convolution's K; ``packed`` (the default), several taps' input channels in one
    matmul where the array's rows hold them (taps packed into K, stride phases
    interleaved), chosen by cost; ``one``, each matmul of a windowed convolution takes
    one tap's input channels, the rest of the rows left empty (XLA on TPU: it pads a
    convolution's input features to the lanes, at least below batch 64, and runs the
    window tap by tap, which is why Google's TPU ResNet code rewrites the 3-channel
    stem by space-to-depth by hand; applied at every batch). Depthwise convolutions
    and patch embeddings (kernel = stride) keep their own mappings either way: an
    assumption, no public figure says how XLA runs them."""

    kernel_order: Literal["overlapped", "serial"] = "overlapped"
    conv_taps: Literal["packed", "one"] = "packed"
    kernel_launch_us: float = 0.0
    collective_latency_us: float = 0.0
    host_step_us: float = 0.0
    op_dispatch_us: float = 0.0

    @property
    def is_zero(self) -> bool:
        """The hardware alone: no software cost, and kernels overlapped."""
        return not (self.kernel_launch_us or self.collective_latency_us or self.host_step_us
                    or self.op_dispatch_us) and self.kernel_order == "overlapped"


@dataclass(frozen=True)
class NpuConfig:
    name: str
    description: str
    clock_hz: int
    cores: int
    core: CoreConfig
    shared_sram: SharedSramConfig
    dram: DramConfig
    noc: NocConfig
    host_link: HostLinkConfig
    interconnect: InterconnectConfig | None = None
    """Links to other chips of the same kind; None: a single-chip part."""
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    """The software stack on top of the hardware: its overheads (kernel launches,
    collective latency, host work per step; all zero: the hardware alone), its kernel
    order and how its compiler fills a convolution's K."""
    energy: EnergyConfig = field(default_factory=EnergyConfig)
    """Node, voltage and per-operation energies (derived from the reference table
    unless set); see :mod:`archsim.config.energy_reference`."""
    power: PowerConfig = field(default_factory=PowerConfig)
    """Power budget, power gating and static power density."""

    def __hash__(self) -> int:
        """Cached: configs key the simulator's plan cache on every run."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f) for f in self.__dataclass_fields__))
            object.__setattr__(self, "_hash", cached)
        return cached

    # -- derived figures -----------------------------------------------------------
    @property
    def peak_flops(self) -> float:
        """Matrix-engine peak, FLOP/s (a MAC counts as two FLOPs)."""
        return 2.0 * self.cores * self.core.matrix.macs_per_cycle * self.clock_hz

    def peak_ops(self, dtype: str) -> float:
        """Matrix-engine peak on inputs of IR dtype ``dtype`` (``i8``, ``fp8``...), op/s:
        :attr:`peak_flops` times the arrays' rate for it (``core.matrix.rates``)."""
        return self.peak_flops * self.core.matrix.rates.of(dtype)

    @property
    def dram_bandwidth_bytes_per_s(self) -> float:
        return self.dram.channels * self.dram.channel_bandwidth_gb_per_s * 1e9

    @property
    def dram_channel_bytes_per_cycle(self) -> float:
        return self.dram.channel_bandwidth_gb_per_s * 1e9 / self.clock_hz

    @property
    def dram_bytes_per_cycle(self) -> float:
        """The pins' peak: rooflines and utilization are measured against it."""
        return self.dram.channels * self.dram_channel_bytes_per_cycle

    @property
    def dram_sustained_bytes_per_cycle(self) -> float:
        """What the channels deliver (``dram.efficiency`` of the peak): the simulated
        DRAM and the compiler's cost model run at this rate."""
        return self.dram_bytes_per_cycle * self.dram.efficiency

    @property
    def host_link_bytes_per_cycle(self) -> float:
        return self.host_link.bandwidth_gb_per_s * 1e9 / self.clock_hz

    @property
    def sram_capacities(self) -> dict[str, int]:
        """Bytes of each SRAM space: every core's scratchpad, and the shared SRAM when
        the chip has one."""
        spaces = {sram_space(c): self.core.scratchpad.size_bytes for c in range(self.cores)}
        if self.shared_sram.size_bytes:
            spaces[SHARED] = self.shared_sram.size_bytes
        return spaces

    @property
    def sram_total_bytes(self) -> int:
        return self.cores * self.core.scratchpad.size_bytes + self.shared_sram.size_bytes

    @property
    def engines(self) -> tuple[str, ...]:
        """Every engine name a program may use, in a stable display order."""
        names: list[str] = []
        for c in range(self.cores):
            names += [dma_engine(c, d) for d in range(self.core.dma.engines)]
            names += [mxu_engine(c, m) for m in range(self.core.matrix.arrays)]
            names.append(vpu_engine(c))
        names += [TDMA, HDMA, HOST]
        return tuple(names)

    def cycles_to_seconds(self, cycles: float) -> float:
        return cycles / self.clock_hz

    def us_to_cycles(self, microseconds: float) -> int:
        """A software cost in chip cycles (rounded to the nearest)."""
        return round(microseconds * 1e-6 * self.clock_hz)

    def launch_cycles(self, kernels: int, dispatches: int = 0) -> int:
        """Cycles the runtime adds before ``kernels`` kernels issued by ``dispatches``
        host calls (:class:`RuntimeConfig`): each kernel's launch, each call's dispatch.
        Nothing overlaps them: the next kernel starts after the previous one ended."""
        return (kernels * self.us_to_cycles(self.runtime.kernel_launch_us)
                + dispatches * self.us_to_cycles(self.runtime.op_dispatch_us))

    def with_overrides(self, overrides: dict[str, Any]) -> "NpuConfig":
        """A copy with fields replaced by dotted path, validated like a loaded file.

        >>> cfg.with_overrides({"core.matrix.rows": 256, "dram.channels": 8})
        """
        from archsim.config.load import config_from_dict, config_to_dict

        data = config_to_dict(self)
        problems: list[str] = []
        for path, value in overrides.items():
            _set_dotted(data, path, value, problems)
        if problems:
            from archsim.errors import ConfigError

            raise ConfigError(problems, source=f"overrides for {self.name!r}")
        return config_from_dict(data, source=f"{self.name} with overrides")

    def check_override_paths(self, paths: Iterable[str]) -> None:
        """Raise the ConfigError :meth:`with_overrides` would for paths that name no
        field (or a block), whatever their values: a sweep refuses a misspelled axis
        before it runs, as ``--set`` does."""
        from archsim.config.load import config_to_dict

        data = config_to_dict(self)
        problems: list[str] = []
        for path in paths:
            _set_dotted(data, path, None, problems)
        if problems:
            from archsim.errors import ConfigError

            raise ConfigError(problems, source=f"overrides for {self.name!r}")


def _set_dotted(data: dict[str, Any], path: str, value: Any, problems: list[str]) -> None:
    node: Any = data
    parts = path.split(".")
    for depth, key in enumerate(parts):
        if not isinstance(node, dict) or key not in node:
            where = ".".join(parts[:depth]) or "<top>"
            allowed = ", ".join(sorted(node)) if isinstance(node, dict) else "none"
            problems.append(f"{path}: no field {key!r} under {where} (fields: {allowed})")
            return
        if depth == len(parts) - 1:
            if isinstance(node[key], dict):
                problems.append(f"{path}: is a block, not a value; set one of its fields "
                                f"({', '.join(sorted(node[key]))})")
                return
            node[key] = value
        else:
            node = node[key]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


__all__ = [
    "CoreConfig", "DATAFLOWS", "Dataflow", "DmaConfig", "DramConfig", "F32_PASSES",
    "HostLinkConfig", "InterconnectConfig", "MatrixConfig", "NocConfig", "NpuConfig", "Precision", "RuntimeConfig",
    "ScratchpadConfig", "SharedSramConfig", "TOPOLOGIES", "Topology", "VectorConfig", "VectorCostsConfig", "ceil_div",
]
