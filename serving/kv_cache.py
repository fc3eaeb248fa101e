"""The paged KV cache of request-level serving: a pool of fixed-size blocks (each holds
``block_size`` tokens of every layer's keys and values on a chip), handed to sequences
as their contexts grow and returned when they finish or are preempted, as vLLM's block
manager does. Only counts are kept: which physical block a sequence holds does not
change any time.

The pool's size is the memory a chip has left for it: ``utilization`` of DRAM, less the
weights and the activations of the largest prefill chunk (:mod:`serving.plan`),
divided by the bytes of one block on the most loaded pipeline stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from archsim.config.model import NpuConfig
from archsim.errors import DeviceMemoryError
from serving.plan import Parallelism, Request, Shard, gib, memory_per_chip
from serving.spec import ModelSpec


@dataclass(frozen=True)
class CacheBudget:
    """How many blocks fit and why."""

    blocks: int
    block_size: int
    block_bytes: int
    weights_bytes: int
    activations_bytes: int
    usable_bytes: int
    """``utilization`` x DRAM capacity of a chip."""

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size


def cache_budget(spec: ModelSpec, par: Parallelism, shard: Shard, config: NpuConfig,
                 dtype: str, kv_dtype: str, block_size: int, max_batched_tokens: int,
                 utilization: float = 0.9, blocks: int | None = None,
                 weights: str = "") -> CacheBudget:
    """Blocks of ``block_size`` tokens that fit on the most loaded chip, or ``blocks``
    when given (an override); a DeviceMemoryError when none fit."""
    request = Request(batch=1, prefill=max_batched_tokens, decode=0, dtype=dtype,
                      kv_dtype=kv_dtype, weights=weights)
    memory = memory_per_chip(spec, request, par, shard)  # decode 0: no KV cache counted
    layers = max(par.stage_layers(spec))
    # an int8/fp8 cache keeps a scale per token and head next to the values
    token_bytes = layers * 2 * shard.kv_heads * (spec.head_dim * request.kv_item
                                                 + request.kv_scale_item)
    block_bytes = block_size * token_bytes
    usable = int(config.dram.capacity_bytes * utilization)
    if blocks is None:
        blocks = (usable - memory.weights - memory.activations) // block_bytes
        if blocks < 1:
            raise DeviceMemoryError(
                f"{spec.name} leaves no room for a KV cache on {config.name}: weights "
                f"{gib(memory.weights)} and activations {gib(memory.activations)} of "
                f"{gib(usable)} usable ({utilization:.0%} of a chip); use more chips "
                f"(--tp/--pp), a smaller --max-num-batched-tokens or a higher "
                f"--gpu-memory-utilization")
    return CacheBudget(blocks, block_size, block_bytes, memory.weights, memory.activations,
                       usable)


class BlockPool:
    """Free and used block counts; each sequence holds ``ceil(tokens / block_size)``."""

    def __init__(self, blocks: int, block_size: int) -> None:
        if blocks < 1 or block_size < 1:
            raise ValueError(f'"blocks" and "block_size" must be >= 1, got {blocks}, '
                             f"{block_size}")
        self.total, self.block_size, self.free = blocks, block_size, blocks

    def needed(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    @property
    def used(self) -> int:
        return self.total - self.free

    def take(self, count: int) -> bool:
        """Take ``count`` blocks if that many are free."""
        if count > self.free:
            return False
        self.free -= count
        return True

    def give_back(self, count: int) -> None:
        self.free += count


__all__ = ["BlockPool", "CacheBudget", "cache_budget"]
