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

Prefill chunks' attention context: the prefill of all new tokens is one sequence, its
causal attention one triangle. Each chunk of ``c`` tokens whose prompt has ``s``
tokens in the cache (a chunk after the first, or a recompute) also reads those: its
attention over them is added, :meth:`IterationTimer.chunk_attention_s` -- what the
layers' attention blocks take with ``c`` queries over a cache of ``s`` keys less with a
cache of 1 (simulated, every layer, its sliding window included). The same term
removes what the one sequence counts and separate sequences do not: a chunk placed
after ``p`` tokens of other chunks in it (in scheduling order) attends to those ``p``
keys, so ``chunk_attention_s(c, p)`` is taken off (at a chunk's attention rate: the
one sequence's causal kernel spends more per query-key pair, 1.4x on Llama-2-7B and
1.6x on Llama-3-8B for two 512-token prompts on tpu-v4, so part of the overcount
stays; BENCHMARKS.md). Static
batching's padded prefill is still timed as one sequence (its line beyond the grid
treats each sequence's attention as its own).

Simplifications (the report says them): in a mixed iteration's one-sequence prefill
the decoding tokens (first) attend to each other and the chunks to them (a triangle of
at most ``max_num_seqs`` tokens and a few keys more per chunk query, against the chunks'
own triangles: 10 decoding tokens and a 512-token chunk, 0.03% of the iteration;
correcting it would simulate a grid point for nearly every chunk size); with ``--pp`` the stages of
an iteration run one after another, not overlapped with the next iteration's.

Speed: each distinct shape is simulated once and cached; iterations between shapes are
interpolated linearly -- prefill on a grid of token counts (1, 16, 24, 32, 48, ...,
steps of about sqrt(2)), decode on a grid of batch sizes (powers of two), each with two
contexts (attention's work is linear in the context; its time steps with the kernel's key
tiles, which the line through two contexts averages); a chunk's attention over its
cache on the prefill grid of chunk sizes by a grid of cached tokens (1, 1024, then
steps of 4x, the model's positions last), bilinearly, one attention block per point
and window.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
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
CACHED_GRID = (1, 1024, 4096, 16384, 65536, 262144)
"""Cached tokens a prefill chunk's attention is simulated at (as needed), the model's
positions the last point. Past about a thousand its time is a line (one step per key
tile; Llama-3-8B on tpu-v4, 512 new tokens: 72 us a layer at 1,024, then 101 us per
1,024 more to 8,192, within 0.1 us); below it bends (5 us at 128, where the line from
1 gives 9), which points there would follow at a simulation each for every chunk size
a short prompt's chunks and offsets take."""
CONTEXT_HI = 1024
"""The longer context of a batch size's two decode points (less when the KV cache of
that many sequences would not fit)."""

Chunks = tuple[tuple[int, int], ...]
"""An iteration's prefill chunks in scheduling order: (new tokens, tokens of the same
sequence already cached)."""


def _around(grid: tuple[int, ...], x: float) -> tuple[tuple[int, float], ...]:
    """The grid points a linear interpolation at ``x`` takes, with their weights: ``x``
    itself on the grid, else its two neighbours (beyond the ends, the end segment's
    line goes on)."""
    if x in grid:
        return ((int(x), 1.0),)
    i = min(max(bisect.bisect_left(grid, x), 1), len(grid) - 1)
    lo, hi = grid[i - 1], grid[i]
    w = (x - lo) / (hi - lo)
    return ((lo, 1.0 - w), (hi, w))


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
    _chunk_points: dict[tuple[int, int], float] = field(default_factory=dict)
    simulated: list[tuple[int, int, int]] = field(default_factory=list)
    """Every (batch, tokens, context) pass simulated, in order."""
    chunk_points: list[tuple[int, int]] = field(default_factory=list)
    """Every (new tokens, cached tokens) point of the chunk-attention grid simulated
    (its attention blocks, one per sliding window), in order."""

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

    def chunk_direct_s(self, new: int, cached: int) -> float:
        """What reading ``cached`` tokens adds to the attention of a prefill chunk of
        ``new`` tokens, over all layers: each layer's attention block with ``new``
        queries over a cache of ``cached`` tokens (its window's share of them) less the
        same block over a cache of 1, simulated (cached per shape); 0 up to 1 token."""
        if cached <= 1:
            return 0.0
        timer = self._composer(1).timer
        cycles = 0
        for layer, count in self._window_groups():
            at, base = (timer.layer_block("attention", new, n, layer) for n in (cached, 1))
            cycles += count * (at.cycles - base.cycles
                               + self.config.launch_cycles(at.kernels - base.kernels))
        return cycles / self.config.clock_hz

    def _window_groups(self) -> list[tuple[int, int]]:
        """(first layer, number of layers) of each distinct sliding window (or none)."""
        groups: dict[int | None, list[int]] = {}
        for layer in range(self.spec.layers):
            groups.setdefault(self.spec.window(layer), []).append(layer)
        return [(layers[0], len(layers)) for layers in groups.values()]

    def direct_s(self, prefill: int, seqs: int, context: float, chunks: Chunks = ()) -> float:
        """An iteration simulated at its exact shapes (what the grid approximates)."""
        c = max(1, round(context))
        if not prefill:
            return self.pass_s(seqs, 1, c) if seqs else 0.0
        time = self._chunks_s(chunks, self.chunk_direct_s)
        if not seqs:
            return self.pass_s(1, prefill, 0) + time
        return (self.pass_s(1, prefill + seqs, 0) + self.pass_s(seqs, 1, c)
                - self.pass_s(seqs, 1, 1) + time)

    # -- interpolated ----------------------------------------------------------------
    def _prefill_grid(self) -> tuple[int, ...]:
        return PREFILL_GRID[:bisect.bisect_left(PREFILL_GRID, self.max_tokens) + 1]

    def prefill_s(self, tokens: int) -> float:
        return sum(w * self.pass_s(1, n, 0) for n, w in _around(self._prefill_grid(), tokens))

    def chunk_attention_s(self, new: int, cached: float) -> float:
        """:meth:`chunk_direct_s` interpolated: bilinearly between the prefill grid's
        chunk sizes and :data:`CACHED_GRID`'s cached tokens; 0 with no cache."""
        if cached <= 0:
            return 0.0
        end = self.spec.max_positions
        cached_grid = tuple(n for n in CACHED_GRID if n < end) + (end,)
        return sum(wn * wc * self._chunk_point(n, c)
                   for n, wn in _around(self._prefill_grid(), new)
                   for c, wc in _around(cached_grid, cached))

    def _chunk_point(self, new: int, cached: int) -> float:
        key = (new, cached)
        found = self._chunk_points.get(key)
        if found is None:
            found = self._chunk_points[key] = self.chunk_direct_s(new, cached)
            if cached > 1:  # else 0, nothing simulated
                self.chunk_points.append(key)
        return found

    @staticmethod
    def _chunks_s(chunks: Chunks, attention: Callable[[int, float], float]) -> float:
        """What the chunks' own contexts add to the one-sequence prefill of all new
        tokens: each chunk's attention over its cached tokens, less its attention over
        the chunks before it in that one sequence, which are other sequences'."""
        time, before = 0.0, 0
        for new, cached in chunks:
            time += attention(new, cached) - attention(new, before)
            before += new
        return time

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

    def __call__(self, prefill: int, seqs: int, context: float, chunks: Chunks = ()) -> float:
        """Seconds of an iteration computing ``prefill`` prompt tokens, in ``chunks``
        (empty: one sequence, static batching's padded prefill), and one token of each
        of ``seqs`` decoding sequences at mean context ``context``."""
        if not prefill:
            return self.decode_s(seqs, context) if seqs else 0.0
        # one forward over every new token, each chunk with its own context
        time = self.prefill_s(prefill + seqs) + self._chunks_s(chunks,
                                                               self.chunk_attention_s)
        if seqs:  # plus the decoding sequences' cached context
            time += self.attention_s(seqs, context)
        return time


__all__ = ["CACHED_GRID", "CONTEXT_HI", "Chunks", "IterationTimer", "PREFILL_GRID"]
