"""How long a serving iteration takes, from archsim's own simulation.

An iteration computes some prefill tokens (chunks of prompts) and one token for each of
some decoding sequences, in one forward pass as vLLM runs it. A prefill-only iteration
is timed as a prefill of its tokens, a decode-only one as a decode step of its
sequences at their mean context; a mixed one as a prefill of all its new tokens (the
weights read once for them all) plus what the decoding sequences' cached context adds
to their decode step (its time at their context less its time at context 1). Each is
timed exactly as ``archsim llm`` times a prefill and a decode step: the stages composed
by :class:`serving.compose.Composer` from blocks compiled and simulated on one chip
(:class:`serving.timing.Timer`), with the runtime's kernel launches, collective
latency and host step (``runtime:``), and the stage-to-stage sends, simulated as one
pass (:func:`archsim.cluster.run_cluster`); the host's step is paid once an iteration.

Simplifications (the report says them): prefill chunks of several sequences are timed
as one sequence of their total length, without the context earlier chunks left in the
cache (the two errors in the attention's share go opposite ways); with ``--pp`` the
stages of an iteration run one after another, not overlapped with the next iteration's.

Speed: each distinct shape is simulated once and cached; iterations between shapes are
interpolated linearly -- prefill on a grid of token counts (1, 16, 24, 32, 48, ...,
steps of about sqrt(2)), decode on a grid of batch sizes (powers of two), each with two
contexts (attention's work is linear in the context; its time steps with the kernel's key
tiles, which the line through two contexts averages).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from archsim.config.model import NpuConfig
from serving.compose import Composer, PipelineBuilder
from serving.plan import Parallelism, Request, check
from serving.spec import ModelSpec

PREFILL_GRID = (1, 16) + tuple(n for k in range(3, 14) for n in (3 << k, 4 << k))
"""Prefill token counts simulated (as needed): 1, 16, 24, 32, 48, 64, 96, ... 32768
(up to the iteration's token budget),
steps of about sqrt(2) (powers of two alone were 3-12% off between them on tiny and
tpu-v4)."""
CONTEXT_HI = 1024
"""The longer context of a batch size's two decode points (less when the KV cache of
that many sequences would not fit)."""


@dataclass
class IterationTimer:
    spec: ModelSpec
    config: NpuConfig
    par: Parallelism
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    algorithm: str = "auto"
    kv_tokens: int = 1 << 20
    """Tokens the KV cache holds: bounds the decode grid's longer context."""
    max_tokens: int = 2048
    """Tokens an iteration computes at most (``max_num_batched_tokens``): the prefill
    grid ends at the first point at or above it; beyond (static batching's padded
    prefill of many sequences) the line through its last two points goes on, linear
    in the tokens as the matmuls are (each sequence's attention stays its own)."""
    weights: str = ""
    """Weight-only format of the matmul weights (``int8``); empty: ``dtype``."""
    _passes: dict[tuple[int, int, int], int] = field(default_factory=dict)
    _composers: dict[int, Composer] = field(default_factory=dict)
    _decode_lines: dict[int, tuple[float, float]] = field(default_factory=dict)
    simulated: list[tuple[int, int, int]] = field(default_factory=list)
    """Every (batch, tokens, context) pass simulated, in order."""

    # -- direct simulation --------------------------------------------------------------
    def pass_s(self, batch: int, tokens: int, context: int) -> float:
        """One pass of ``batch`` sequences of ``tokens`` new tokens reading ``context``
        cached ones (0: a prefill), host step included, simulated (cached)."""
        key = (batch, tokens, context)
        cycles = self._passes.get(key)
        if cycles is None:
            from archsim.cluster import run_cluster

            composer = self._composer(batch)
            stages = [composer.stage(s, tokens, context) for s in range(self.par.pp)]
            build = PipelineBuilder(composer)
            previous = [] if context else None  # a decode step gets a sampled token
            build.pass_(("decode" if context else "prefill",), 0, stages, tokens, previous)
            cycles = run_cluster(build.tasks, self.config, self.par.chips).total_cycles
            self._passes[key] = cycles
            self.simulated.append(key)
        return cycles / self.config.clock_hz

    def _composer(self, batch: int) -> Composer:
        found = self._composers.get(batch)
        if found is None:
            from serving.timing import Timer  # imports torch

            request = Request(batch, 1, 0, self.dtype, self.kv_dtype, self.weights)
            par = Parallelism(self.par.tp, self.par.pp, 1)
            shard = check(self.spec, request, par)
            timer = Timer(self.spec, shard, request, batch, self.config)
            found = Composer(self.spec, request, par, self.config, timer, self.algorithm)
            self._composers[batch] = found
        return found

    def direct_s(self, prefill: int, seqs: int, context: float) -> float:
        """An iteration simulated at its exact shapes (what the grid approximates)."""
        c = max(1, round(context))
        if not seqs:
            return self.pass_s(1, prefill, 0) if prefill else 0.0
        if not prefill:
            return self.pass_s(seqs, 1, c)
        return (self.pass_s(1, prefill + seqs, 0) + self.pass_s(seqs, 1, c)
                - self.pass_s(seqs, 1, 1))

    # -- interpolated ----------------------------------------------------------------
    def prefill_s(self, tokens: int) -> float:
        top = bisect.bisect_left(PREFILL_GRID, self.max_tokens)
        grid = PREFILL_GRID[:top + 1]
        if tokens in grid:
            return self.pass_s(1, tokens, 0)
        i = min(max(bisect.bisect_left(grid, tokens), 1), len(grid) - 1)
        lo, hi = grid[i - 1], grid[i]
        a, b = self.pass_s(1, lo, 0), self.pass_s(1, hi, 0)
        return a + (b - a) * (tokens - lo) / (hi - lo)

    def decode_s(self, seqs: int, context: float) -> float:
        lo = 1 << max(0, math.floor(math.log2(seqs)))
        if lo == seqs:
            return self._decode_at(seqs, context)
        hi = lo * 2
        a, b = self._decode_at(lo, context), self._decode_at(hi, context)
        return a + (b - a) * (seqs - lo) / (hi - lo)

    def _decode_at(self, seqs: int, context: float) -> float:
        line = self._decode_lines.get(seqs)
        if line is None:
            c_hi = max(2, min(CONTEXT_HI, self.spec.max_positions, self.kv_tokens // seqs))
            a, b = self.pass_s(seqs, 1, 1), self.pass_s(seqs, 1, c_hi)
            line = self._decode_lines[seqs] = (a, (b - a) / (c_hi - 1))
        return line[0] + line[1] * (context - 1)

    def attention_s(self, seqs: int, context: float) -> float:
        """What reading ``context - 1`` more cached tokens adds to a decode step of
        ``seqs`` sequences (the slope of its line, interpolated between batch sizes)."""
        return self.decode_s(seqs, context) - self.decode_s(seqs, 1.0)

    def __call__(self, prefill: int, seqs: int, context: float) -> float:
        if not seqs:
            return self.prefill_s(prefill) if prefill else 0.0
        if not prefill:
            return self.decode_s(seqs, context)
        # one forward over every new token, plus the decoding sequences' cached context
        return self.prefill_s(prefill + seqs) + self.attention_s(seqs, context)


__all__ = ["CONTEXT_HI", "IterationTimer", "PREFILL_GRID"]
