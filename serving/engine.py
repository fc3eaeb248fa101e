"""The serving loop: requests arrive, the scheduler forms an iteration, the iteration
takes the time the simulator gives its shape, its sequences advance; repeat.

A discrete-event loop over iterations in plain Python: between iterations nothing
changes but arrivals, so the loop jumps from one iteration's end to the next (or to
the next arrival when nothing is left to run). A token is out when the iteration that
sampled it ends. The iteration's time comes from ``timing(prefill_tokens,
decode_sequences, mean_decode_context, prefill_chunks)``, the chunks as (new tokens,
tokens of their sequence already cached) (:class:`serving.iteration.IterationTimer`, or
any function for tests).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence as Seq
from dataclasses import dataclass, fields

from serving.kv_cache import BlockPool
from serving.scheduler import SCHEDULERS, Limits, Sequence
from serving.workload import Arrival, WorkloadError

IterationTime = Callable[[int, int, float, tuple[tuple[int, int], ...]], float]
"""(prefill tokens, decode sequences, their mean context, prefill chunks as (new,
cached) tokens) -> seconds."""


@dataclass(frozen=True)
class RequestRecord:
    id: int
    arrival_s: float
    first_token_s: float
    finish_s: float
    prompt_tokens: int
    output_tokens: int
    preemptions: int

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        """Mean time between its generated tokens after the first (0 with one)."""
        if self.output_tokens < 2:
            return 0.0
        return (self.finish_s - self.first_token_s) / (self.output_tokens - 1)


@dataclass(frozen=True)
class Iterations:
    """One entry per iteration, in order (column arrays)."""

    start_s: array
    time_s: array
    prefill_tokens: array
    decode_seqs: array
    seqs: array
    """Sequences computing tokens in it."""
    running: array
    """Sequences holding a slot (static batching: finished ones too)."""
    waiting: array
    """Arrived requests not yet running, at the iteration's start."""
    in_system: array
    """Time average over the iteration of the requests arrived and not finished
    (those arriving during it counted from their arrival)."""
    kv_blocks: array
    """Blocks in use during the iteration."""
    tokens_out: array
    """Tokens sampled at its end."""

    def __len__(self) -> int:
        return len(self.start_s)


_FLOAT_COLUMNS = ("start_s", "time_s", "in_system")


@dataclass(frozen=True)
class EngineResult:
    records: tuple[RequestRecord, ...]
    iterations: Iterations
    inter_token_s: array
    """Every gap between two successive tokens of a request."""
    preemptions: int
    kv_blocks: int
    block_size: int
    scheduler: str
    limits: Limits


def run_engine(arrivals: Seq[Arrival], timing: IterationTime, limits: Limits,
               blocks: int, block_size: int, scheduler: str = "continuous") -> EngineResult:
    """Serve ``arrivals`` (sorted by arrival) to the end."""
    pool = BlockPool(blocks, block_size)
    for a in arrivals:
        if pool.needed(a.prompt_tokens + a.output_tokens) > blocks:
            raise WorkloadError(f"request {a.id} ({a.prompt_tokens} + {a.output_tokens} "
                                f"tokens) needs more than the {blocks} KV blocks of "
                                f"{block_size} tokens there are; raise --kv-blocks or "
                                f"shorten it")
    sched = SCHEDULERS[scheduler](limits, pool)
    iters = Iterations(**{f.name: array("d" if f.name in _FLOAT_COLUMNS else "q")
                          for f in fields(Iterations)})
    gaps = array("d")
    finished: list[Sequence] = []
    now, nxt, n = 0.0, 0, len(arrivals)
    while len(finished) < n:
        while nxt < n and arrivals[nxt].arrival_s <= now:
            sched.waiting.append(Sequence(arrivals[nxt]))
            nxt += 1
        batch = sched.schedule()
        if not batch.work:
            if nxt >= n:
                raise RuntimeError("scheduler stalled with requests left")  # a bug
            now = max(now, arrivals[nxt].arrival_s)
            continue
        prefill = batch.prefill_tokens
        decode, context = batch.decode_shape()
        dt = timing(prefill, decode, context, batch.prefill_chunks())
        iters.start_s.append(now)  # the iteration's start
        iters.time_s.append(dt)
        iters.prefill_tokens.append(prefill)
        iters.decode_seqs.append(decode)
        iters.seqs.append(len(batch.work))
        iters.running.append(len(sched.running))
        iters.waiting.append(len(sched.waiting))
        present = nxt - len(finished)
        now += dt
        late = nxt
        while late < n and arrivals[late].arrival_s < now:  # arrive during it
            present += (now - arrivals[late].arrival_s) / dt
            late += 1
        iters.in_system.append(present)
        iters.kv_blocks.append(pool.used)
        out = 0
        for work in batch.work:
            seq = work.seq
            seq.computed += work.new
            if seq.computed < seq.known:
                continue
            seq.generated += 1
            out += 1
            if seq.first_token_s is None:
                seq.first_token_s = now
            else:
                gaps.append(now - seq.last_token_s)
            seq.last_token_s = now
            if seq.done:
                seq.finish_s = now
                finished.append(seq)
                sched.finish(seq)
        iters.tokens_out.append(out)
    records = tuple(sorted((_record(s) for s in finished), key=lambda r: r.id))
    return EngineResult(records, iters, gaps, sched.preemptions, blocks, block_size,
                        sched.name, limits)


def _record(seq: Sequence) -> RequestRecord:
    a = seq.request
    assert seq.first_token_s is not None and seq.finish_s is not None
    return RequestRecord(a.id, a.arrival_s, seq.first_token_s, seq.finish_s,
                         a.prompt_tokens, a.output_tokens, seq.preemptions)


__all__ = ["EngineResult", "IterationTime", "Iterations", "RequestRecord", "run_engine"]
