"""Convolution weights shared through shared SRAM (``ConvTiling.staged_weights``), the
convolution's counterpart of the matmul's staged B
(:class:`compiler.kernels.matmul_staging.StagedB`).

An implicit-GEMM tile needs the weight block of its output channels, input-channel
chunk and kernel rows; the tiles of the other output rows of those channels need the
same block. Loaded by each core, a block crosses DRAM once per core that meets it, so
a tiling of many small tiles (ResNet's 14x14 layers on 16 of ascend-910b's 20 cores
instead of 8) pays DRAM for every copy. Staged, the first core to need a block loads
it from DRAM into shared SRAM and copies it from there into its scratchpad; every later
core that needs it only copies it (over the NoC: no DRAM read), then rearranges it as
an unstaged tiling does. DRAM carries each block once, what the on-chip L2 of an
Ascend part does for weights several cores read: a miss fills the L2 from DRAM and the
core reads through it, the other cores hit.

(A first version had the first core load the block into its own scratchpad,
rearrange it and copy the rearranged block into shared SRAM for the others, saving
their rearrangement; the others then waited for a load, a vector pass queued behind
the core's own window work and a store before their copy, and on atom ResNet-18's
28x28 layers ran 50% slower than unstaged.)

The tiles of one block start their input-channel chunks at different chunks
(:func:`rotated`), so the first loads of a block's chunks fall on different cores and
the later cores' copies of one chunk overlap the first loads of the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TypeVar

from archsim.config.model import NpuConfig
from archsim.config.names import SHARED
from compiler.cost import (
    COMMAND_TOLERANCE, DRAM_EFFICIENCY, STAGING_GAIN, Cost, load_bandwidth,
)
from compiler.emit import ALIGN_BYTES, Arena
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, SramRef
from compiler.ir.ops import Copy
from compiler.kernels.common import Context
from compiler.kernels.transfers import load_dense

T = TypeVar("T")

Key = tuple[tuple[int, int], tuple[int, int], int | None]
"""(output channels, input channels of the group, kernel row or None: all) of a block."""

SHARING = 2
"""A tiling stages its weights only when at least this many cores meet each block: a
block one core loads again for its next tiles gains nothing from shared SRAM but a
second hop (ResNet-50's 1x1 layers on atom, eight output-channel tiles on eight
cores, each core reloading its own block: 13.7k -> 32k cycles staged)."""


STAGING_MARGIN = COMMAND_TOLERANCE
"""A staged tiling is taken only when its estimate beats the unstaged ones' by this
fraction, as the matmul's staged A must by :data:`~compiler.cost.STAGING_GAIN` and for
the same reason: a second hop and cores waiting on each other's loads change how a
kernel overlaps its neighbours, which one kernel's estimate does not see. Measured
(cycles, ResNet-18 / ResNet-50): with 5%, ascend-910b 165.3k / 396.3k, atom 377.6k /
1,013.9k; with 10%, ascend-910b 160.1k / 393.9k, atom 378.5k / 1,027.0k, and the
standalone 14x14 x 256 convolution stays on 8 cores (13.4k cycles against 9.9k)."""


def sharers(o_tiles: int, tiles: int, cores: int) -> int:
    """Cores that meet one weight block when the tiles, output-channel tile innermost,
    are dealt to the cores in turn: the tiles of channel tile ``o`` are ``o, o +
    o_tiles, ...``, on cores that repeat with period ``cores / gcd(o_tiles, cores)``
    (per group: a group's tiles are consecutive)."""
    return min(-(-tiles // o_tiles), cores // math.gcd(o_tiles, cores))


@dataclass(frozen=True)
class StagingCost:
    """What a staged tiling's estimate needs besides the unstaged one's (bytes and
    bandwidths of one core, per the cost model's conventions)."""

    distinct: int
    """Bytes of every weight block once (what shared SRAM holds and DRAM carries)."""
    sharers: int
    """Cores that meet each block (:func:`sharers`)."""
    blocks: int
    """Distinct weight blocks: at most this many cores load from DRAM at once."""
    weight_share: float
    """Weight bytes one core loads over the kernel."""
    step_weights: int
    """Bytes of one step's weight block."""
    load_bw: float
    """A core's load bandwidth when every core loads from DRAM (the unstaged figure)."""
    setup: float
    """A DRAM load's fixed cycles (the unstaged fill counts two)."""


def staged_cost(config: NpuConfig, cost: Cost, cores: int, s: StagingCost) -> Cost | None:
    """``cost`` (the unstaged estimate) with its weights staged, or None when staging
    does not apply: no shared SRAM, the blocks do not fit it, too few cores share them
    (:data:`SHARING`), or the DRAM time the repeated loads take is under
    :data:`~compiler.cost.STAGING_GAIN` of the estimate (staging is for DRAM traffic;
    below, the estimate would pick it for the copies' shorter setups alone, which a
    small kernel's cores wait out on the first loads anyway: an 8x8 patch embedding of
    a 40x48 image on ascend-910b, staged 3.5k cycles against 2.1k as one GEMM; with 5%
    here instead of 10%, ResNet-50 on ascend-910b took 406k cycles against 396k).

    Of a core's weight bytes the fraction ``f = distinct / (cores x share)`` it loads
    first crosses DRAM into shared SRAM, at the DRAM share of the cores loading first
    (at most one per block); all of them are copied from shared SRAM at the core's
    share of its bandwidth, a copy paying a DMA setup and the NoC's latency where a
    DRAM load pays the DRAM's too. DRAM carries the blocks once. A core's first step
    waits for its block's DRAM load (its own or another core's: the distinct blocks'
    first loads run at once, :func:`rotated`), then for its copy."""
    shared = config.shared_sram
    # what shared SRAM must hold: each block allocated at its own aligned offset
    # (a partial last block takes less than this bound)
    held = s.blocks * (-(-s.step_weights // ALIGN_BYTES) * ALIGN_BYTES)
    loaded = cores * s.weight_share
    dram_rate = config.dram_sustained_bytes_per_cycle * DRAM_EFFICIENCY
    if not shared.size_bytes or held > shared.size_bytes or s.sharers < SHARING or \
            (loaded - s.distinct) / dram_rate < STAGING_GAIN * cost.estimate(config):
        return None
    dma_config = config.core.dma
    f = s.distinct / loaded
    share = s.weight_share
    copy_bw = min(load_bandwidth(config), shared.bandwidth_bytes_per_cycle / cores)
    first_bw = min(load_bandwidth(config), dram_rate / min(cores, s.blocks))
    copy_setup = dma_config.setup_latency_cycles + config.noc.latency_cycles
    blocks = share / s.step_weights  # weight blocks a core brings in
    dma = cost.dma_cycles - share / s.load_bw + f * share / first_bw + share / copy_bw + \
        blocks * (copy_setup - (1 - f) * s.setup) / max(1, dma_config.engines - 1)
    w = s.step_weights
    fill = w / first_bw + w / copy_bw + copy_setup
    return replace(cost, dma_cycles=dma, dram_bytes=cost.dram_bytes - loaded + s.distinct,
                   serial_cycles=cost.serial_cycles - w / s.load_bw + fill)


def staging_pays(estimate: float, staged: Cost, fastest: float, taken: Cost) -> bool:
    """Whether a staged tiling (``estimate``, its cost ``staged``) may compete with the
    unstaged ones (the lowest estimate ``fastest``; the tiling they would take costs
    ``taken``): it must beat ``fastest`` by :data:`STAGING_MARGIN` and keep its
    arrays no busier than ``taken``'s.

    Staging is for tilings that spread the work over more cores (more, smaller tiles),
    which the weights' DRAM traffic kept from paying. A staged tiling whose arrays take
    longer wins its estimate on DRAM traffic alone, and a convolution's input is often
    not in DRAM at all (:mod:`compiler.residency` keeps the previous layer's output in
    shared SRAM): on atom, ResNet-50's 1x1 layers took 2-row tiles of 256 channels,
    estimated 6% under 7-row tiles of 128, which ran 2.6x faster (13.7k against 35k
    cycles), their arrays a third as busy."""
    return estimate <= (1 - STAGING_MARGIN) * fastest and staged.mxu_cycles <= taken.mxu_cycles


def rotated(steps: list[T], turn: int) -> list[T]:
    """``steps`` (a tile's input-channel chunks and kernel rows) starting at step
    ``turn`` (modulo their count): the ``turn``-th tile of a block starts where the
    earlier ones do not, so each loads a different chunk first."""
    turn %= len(steps)
    return steps[turn:] + steps[:turn]


@dataclass
class StagedWeights:
    """The shared copies of a convolution's weight blocks, as stored
    (``[outputs, channels, kernel rows, kernel columns]``)."""

    arena: Arena
    dtype: DType
    buffers: dict[Key, SramRef] = field(default_factory=dict)

    @classmethod
    def plan(cls, ctx: Context, dtype: DType) -> StagedWeights:
        return cls(Arena(SHARED, ctx.config.shared_sram.size_bytes), dtype)

    def fill(self, ctx: Context, key: Key, ref: DramRef, dst: SramRef, core: int,
             source: str) -> None:
        """Bring block ``key`` (``ref`` in DRAM) into ``dst`` on ``core``: the first time
        from DRAM into shared SRAM, then (every time) a copy from there."""
        held = self.buffers.get(key)
        if held is None:
            held = self.buffers[key] = self.arena.alloc(dst.shape, self.dtype,
                                                        "staged conv weights")
            load_dense(ctx, ref, held, core, source)
        ctx.em.emit(ctx.em.dma(core, "load"), Copy(held, dst), source)


__all__ = ["SHARING", "STAGING_MARGIN", "sharers", "StagedWeights", "StagingCost", "rotated", "staged_cost", "staging_pays"]
