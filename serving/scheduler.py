"""Which sequences run in the next iteration, and how many tokens each: vLLM-like
continuous batching with chunked prefill and preemption by recompute, or static
batching for comparison.

A sequence knows ``prompt + generated`` tokens and has the keys and values of
``computed`` of them cached. An iteration gives it ``new`` tokens to compute (a chunk of
its prompt, or the one token it generated last); when that makes every known token
computed, the iteration samples its next token (the first one when its prefill ends), as
vLLM's unified scheduler models prefill and decode.

Continuous (vLLM's V1 scheduler, chunked prefill on): running sequences first, in the
order they were admitted, each a chunk of what it has left to compute within the
iteration's token budget; a sequence that needs a block when none is free preempts the
most recently admitted running sequence (its blocks freed, its tokens to be recomputed
when it runs again at the head of the queue). Then waiting requests in arrival order,
while there are sequence slots, budget and free blocks for their first chunk.

Static: when nothing runs, up to ``max_num_seqs`` arrived requests form a batch whose
blocks for every token they will ever hold are reserved up front; their prompts are
computed together (padded to the longest), then they decode in lock step (padded to
the longest context) until the last finishes; finished sequences keep their slots.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from serving.kv_cache import BlockPool
from serving.workload import Arrival


@dataclass(eq=False)
class Sequence:
    request: Arrival
    generated: int = 0
    computed: int = 0
    blocks: int = 0
    preemptions: int = 0
    first_token_s: float | None = None
    finish_s: float | None = None
    last_token_s: float = 0.0

    @property
    def known(self) -> int:
        return self.request.prompt_tokens + self.generated

    @property
    def left(self) -> int:
        """Tokens known but not yet computed."""
        return self.known - self.computed

    @property
    def done(self) -> bool:
        return self.generated >= self.request.output_tokens


@dataclass(frozen=True)
class Work:
    """One sequence's part of an iteration."""

    seq: Sequence
    new: int
    """Tokens computed this iteration."""
    context: int
    """Tokens its attention reads after this iteration (cached and new)."""
    decode: bool

    @property
    def cached(self) -> int:
        """Tokens of its sequence already in the cache, which its new tokens read."""
        return self.context - self.new


@dataclass
class Batch:
    work: list[Work] = field(default_factory=list)
    padded_prefill: int = 0
    """Static batching: prefill tokens computed, padding included (0: the real ones)."""
    padded_decode: tuple[int, int] | None = None
    """Static batching: (sequences, context) of a padded decode step."""

    @property
    def prefill_tokens(self) -> int:
        if self.padded_prefill:
            return self.padded_prefill
        return sum(w.new for w in self.work if not w.decode)

    def prefill_chunks(self) -> tuple[tuple[int, int], ...]:
        """(new tokens, cached tokens) of each prefill chunk, in order; none for static
        batching's padded prefill (timed as one sequence)."""
        if self.padded_prefill:
            return ()
        return tuple((w.new, w.cached) for w in self.work if not w.decode)

    def decode_shape(self) -> tuple[int, float]:
        """(sequences, mean context) of the decode part."""
        if self.padded_decode is not None:
            return self.padded_decode
        contexts = [w.context for w in self.work if w.decode]
        return len(contexts), (sum(contexts) / len(contexts) if contexts else 0.0)


@dataclass(frozen=True)
class Limits:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048


class Scheduler:
    """What both schedulers hold: the limits, the KV-cache block pool, the waiting queue
    and the running sequences."""

    name = ""

    def __init__(self, limits: Limits, pool: BlockPool) -> None:
        self.limits, self.pool = limits, pool
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting


class Continuous(Scheduler):
    """vLLM-like continuous batching (see the module docstring)."""

    name = "continuous"

    def schedule(self) -> Batch:
        budget = self.limits.max_num_batched_tokens
        batch = Batch()
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            new = min(seq.left, budget)
            if not self._grow(seq, new):
                # no block: preempt from the back until it fits (or it is the victim)
                while not self._grow(seq, new):
                    victim = self.running[-1]
                    self._preempt(victim)
                    if victim is seq:
                        break
                if seq not in self.running:
                    break
            batch.work.append(Work(seq, new, seq.computed + new, seq.left == 1 and seq.generated > 0))
            budget -= new
            i += 1
        while (self.waiting and budget > 0
               and len(self.running) < self.limits.max_num_seqs):
            seq = self.waiting[0]
            new = min(seq.left, budget)
            if not self._grow(seq, new):
                break
            self.waiting.popleft()
            self.running.append(seq)
            batch.work.append(Work(seq, new, seq.computed + new, False))
            budget -= new
        return batch

    def _grow(self, seq: Sequence, new: int) -> bool:
        need = self.pool.needed(seq.computed + new) - seq.blocks
        if need <= 0:
            return True
        if not self.pool.take(need):
            return False
        seq.blocks += need
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.pool.give_back(seq.blocks)
        seq.blocks = seq.computed = 0
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def finish(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.pool.give_back(seq.blocks)
        seq.blocks = 0


class Static(Scheduler):
    """Static batching (see the module docstring)."""

    name = "static"

    def schedule(self) -> Batch:
        if not self.running:
            while self.waiting and len(self.running) < self.limits.max_num_seqs:
                seq = self.waiting[0]
                need = self.pool.needed(seq.request.prompt_tokens + seq.request.output_tokens)
                if not self.pool.take(need):
                    break
                seq.blocks = need
                self.running.append(self.waiting.popleft())
        if not self.running:
            return Batch()
        batch = Batch()
        if any(s.generated == 0 for s in self.running):  # the batch's prefill
            longest = max(s.request.prompt_tokens for s in self.running)
            for seq in self.running:
                batch.work.append(Work(seq, seq.left, seq.known, False))
            batch.padded_prefill = longest * len(self.running)
            return batch
        live = [s for s in self.running if not s.done]
        for seq in live:
            batch.work.append(Work(seq, 1, seq.computed + 1, True))
        batch.padded_decode = (len(self.running), float(max(s.known for s in live)))
        return batch

    def finish(self, seq: Sequence) -> None:
        """A finished sequence keeps its slot until the whole batch is done."""
        if all(s.done for s in self.running):
            for s in self.running:
                self.pool.give_back(s.blocks)
                s.blocks = 0
            self.running.clear()


SCHEDULERS = {"continuous": Continuous, "static": Static}

__all__ = ["Batch", "Continuous", "Limits", "SCHEDULERS", "Scheduler", "Sequence", "Static", "Work"]
