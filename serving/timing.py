"""Single-chip timing: compiled and simulated performance-only through the one
pipeline (:func:`archsim.app.run`, as ``archsim.estimate``) on meta tensors, once per
shape.

``Timer.block(kind, tokens, context)`` returns a :class:`BlockTime` (cycles, matmul
FLOPs, DRAM bytes) for one micro-batch: ``attention``/``mlp`` of one layer, ``embed``
or ``head``. ``Timer.stage(first, count, embed, head, tokens, context)`` times a whole
pipeline stage on one chip as one program (:class:`serving.layers.Stage`): layers
``first ... first + count - 1``, with the embedding and/or the head. ``tokens`` is the
number of new tokens per sequence (the prompt length in prefill, 1 in decode);
``context`` is the cache length a decode step attends to (0 in prefill).
"""

from __future__ import annotations

import torch

from archsim.app.pipeline import torch_dtype
from archsim.config.model import NpuConfig
from archsim.energy import run_energy
from serving.compose import BlockTime
from serving.layers import (QUANTIZED_KV, AttentionBlock, Embed, Head, KvEntry, MlpBlock,
                            Stage, meta_block)
from serving.plan import Request, Shard
from serving.runtime import kernel_count
from serving.spec import ModelSpec


class Timer:
    def __init__(self, spec: ModelSpec, shard: Shard, request: Request, batch: int,
                 config: NpuConfig) -> None:
        """``batch``: sequences per micro-batch."""
        self.spec, self.shard, self.request, self.batch = spec, shard, request, batch
        self.config = config
        self.dtype = torch_dtype(request.dtype)
        self.kv_dtype = {"int8": torch.int8, "fp8": torch.float8_e4m3fn}.get(
            request.kv_dtype) or torch_dtype(request.kv_dtype)
        self._cache: dict[tuple, BlockTime] = {}
        self.simulated: list[tuple[str, int, int]] = []
        """Every (kind, tokens, cached tokens read) simulated, in order (for the
        report)."""

    def block(self, kind: str, tokens: int, context: int = 0) -> BlockTime:
        """A block of layer 0's shape (``attention`` reads the cache of layer 0)."""
        return self.layer_block(kind, tokens, context, 0)

    def layer_block(self, kind: str, tokens: int, context: int, layer: int) -> BlockTime:
        """A block of layer ``layer`` (its sliding window sets the cache it reads)."""
        seen = self.spec.attended(context, layer) if context else 0
        key = (kind, tokens, context, seen)
        found = self._cache.get(key)
        if found is None:
            module, inputs = self._build(kind, tokens, seen)
            found = self._cache[key] = self._estimate(module, inputs)
            self.simulated.append((kind, tokens, seen))  # the cache it reads
        return found

    def stage(self, first: int, count: int, embed: bool, head: bool, tokens: int,
              context: int = 0) -> BlockTime:
        """Layers ``first``... (``count`` of them), with the embedding and/or the head,
        as one program: identical layers are simulated in part and extended, as
        ``archsim.estimate`` does, unless their caches differ (sliding-window and global
        layers past the window), then each layer is simulated."""
        seen = tuple(self.spec.attended(context, i) if context else 0
                     for i in range(first, first + count))
        key = ("stage", count, embed, head, tokens, context, seen)
        found = self._cache.get(key)
        if found is None:
            spec, b = self.spec, self.batch
            with torch.device("meta"):
                module = Stage(spec, self.shard, self.kv_dtype, count, embed, head)
                x = (torch.empty(b, tokens, dtype=torch.int64) if embed
                     else torch.empty(b, tokens, spec.hidden, dtype=self.dtype))
                inputs: tuple = (x, self._positions(tokens)[0])
                if context:
                    caches = [self._cache_input(n) for n in seen]
                    inputs += (caches, caches)
            found = self._estimate(meta_block(module, self.dtype), inputs,
                                   all_layers=len(set(seen)) > 1)
            self._cache[key] = found
            name = "+".join((["embed"] if embed else []) + [f"{count} layers"]
                            + (["head"] if head else []))
            self.simulated.append((name, tokens, context))
        return found

    def _estimate(self, module: torch.nn.Module, inputs: tuple,
                  all_layers: bool = False) -> BlockTime:
        """The one place blocks are compiled and simulated (their linear layers in the
        request's weight-only format, if any)."""
        from archsim.app.pipeline import run
        from archsim.app.workload import Workload

        if self.request.weights:
            from serving.quant import quantize_weights

            module = quantize_weights(module, self.request.weights, self.dtype)

        result = run(Workload.of_module(module, inputs), self.config, mode="performance",
                     all_layers=all_layers)
        kernels = 0
        if self.config.runtime.kernel_launch_us:  # only counted when launches cost
            kernels = kernel_count(module, inputs, self.config, all_layers)
        return BlockTime(result.total_cycles, result.matmul_flops, result.dram_bytes,
                         kernels, run_energy(result).dynamic_total_j)

    def _positions(self, tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Positions of the new tokens and the rotary tables (cos, sin) for them."""
        rope = torch.empty(tokens, self.spec.rotary_dim or self.spec.head_dim,
                           dtype=self.dtype)
        return torch.empty(tokens, dtype=torch.int64), rope, rope

    def _cache_input(self, seen: int) -> KvEntry:
        """A layer's cached K (or V) of ``seen`` tokens; int8 or fp8: (values, row
        scales)."""
        shape = (self.batch, self.shard.kv_heads, seen, self.spec.head_dim)
        values = torch.empty(shape, dtype=self.kv_dtype)
        if self.kv_dtype not in QUANTIZED_KV:
            return values
        return values, torch.empty(shape[:-1] + (1,), dtype=self.dtype)

    def _build(self, kind: str, tokens: int, seen: int
               ) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
        spec, shard, b, dtype = self.spec, self.shard, self.batch, self.dtype
        with torch.device("meta"):
            x = torch.empty(b, tokens, spec.hidden, dtype=dtype)
            if kind == "attention":
                module = AttentionBlock(spec, shard, self.kv_dtype)
                inputs: tuple[torch.Tensor, ...] = (x, *self._positions(tokens)[1:])
                if seen:
                    inputs += (self._cache_input(seen), self._cache_input(seen))
            elif kind == "mlp":
                module = MlpBlock(spec, shard)
                inputs = (x, x) if spec.parallel else (x,)
            elif kind == "embed":
                module = Embed(spec, shard)
                inputs = (torch.empty(b, tokens, dtype=torch.int64),
                          self._positions(tokens)[0])
            elif kind == "head":
                module, inputs = Head(spec, shard), (x,)
            else:
                raise ValueError(f"unknown block {kind!r}")
        return meta_block(module, dtype), inputs


__all__ = ["BlockTime", "Timer"]
