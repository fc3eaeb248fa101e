"""Single-chip timing of each distinct block shape: compiled and simulated
performance-only (:func:`archsim.app.run`, as ``archsim.estimate``) on meta tensors,
once per shape.

``Timer.block(kind, tokens, context)`` returns a :class:`BlockTime` (cycles, matmul
FLOPs, DRAM bytes) for one micro-batch: ``attention``/``mlp`` of one layer, ``embed``
or ``head``. ``tokens`` is the number of new tokens per sequence (the prompt length
in prefill, 1 in decode); ``context`` is the cache length a decode step attends to
(0 in prefill).
"""

from __future__ import annotations

import torch

from archsim.config.model import NpuConfig
from serving.compose import BlockTime
from serving.layers import TORCH_DTYPES, AttentionBlock, Embed, Head, MlpBlock, meta_block
from serving.plan import Request, Shard
from serving.spec import ModelSpec


class Timer:
    def __init__(self, spec: ModelSpec, shard: Shard, request: Request, batch: int,
                 config: NpuConfig) -> None:
        """``batch``: sequences per micro-batch."""
        self.spec, self.shard, self.request, self.batch = spec, shard, request, batch
        self.config = config
        self.dtype = TORCH_DTYPES[request.dtype]
        self.kv_dtype = TORCH_DTYPES[request.kv_dtype]
        self._cache: dict[tuple[str, int, int], BlockTime] = {}
        self.simulated: list[tuple[str, int, int]] = []
        """Every (kind, tokens, context) simulated, in order (for the report)."""

    def block(self, kind: str, tokens: int, context: int = 0) -> BlockTime:
        key = (kind, tokens, context)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._simulate(kind, tokens, context)
            self.simulated.append(key)
        return found

    def _simulate(self, kind: str, tokens: int, context: int) -> BlockTime:
        from archsim.app.pipeline import run
        from archsim.app.workload import Workload

        module, inputs = self._build(kind, tokens, context)
        result = run(Workload.of_module(module, inputs), self.config, mode="performance")
        return BlockTime(result.total_cycles, result.matmul_flops, result.dram_bytes)

    def _build(self, kind: str, tokens: int, context: int
               ) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
        spec, shard, b, dtype = self.spec, self.shard, self.batch, self.dtype
        with torch.device("meta"):
            x = torch.empty(b, tokens, spec.hidden, dtype=dtype)
            if kind == "attention":
                module = AttentionBlock(spec, shard, self.kv_dtype)
                rope = torch.empty(tokens, spec.head_dim, dtype=dtype)
                inputs: tuple[torch.Tensor, ...] = (x, rope, rope)
                if context:
                    seen = spec.attended(context)
                    cache = torch.empty(b, shard.kv_heads, seen, spec.head_dim,
                                        dtype=self.kv_dtype)
                    inputs += (cache, cache)
            elif kind == "mlp":
                module, inputs = MlpBlock(spec, shard), (x,)
            elif kind == "embed":
                ids = torch.empty(b, tokens, dtype=torch.int64)
                module = Embed(spec, shard)
                inputs = (ids, torch.empty(tokens, dtype=torch.int64))
            elif kind == "head":
                module, inputs = Head(spec, shard), (x[:, -1:],)
            else:
                raise ValueError(f"unknown block {kind!r}")
        return meta_block(module, dtype), inputs


__all__ = ["BlockTime", "Timer"]
