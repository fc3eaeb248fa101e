"""Composing simulated blocks into prefill and decode on one chip or many.

Three levels, each simulated once per distinct shape:

1. on one chip (``tp`` 1), a whole pipeline stage (its layers, the embedding on the
   first, the LM head on the last) is one program, compiled and simulated as
   ``archsim.estimate`` runs a model (identical layers in part, then extended), so
   the next layer's weights stream in under this one's work as they would; with
   tensor parallelism, a block (attention half or MLP half of a layer, embedding, LM
   head) on one chip (:mod:`serving.timing`);
2. a layer on its tensor-parallel group: the blocks as computes on every chip of the
   group with an all-reduce after each (one after both when attention and MLP run side
   by side), simulated on the chip-to-chip links
   (:func:`archsim.cluster.run_cluster`). A layer ends with an all-reduce that
   leaves every chip of the group idle, so the layers of a stage run back to back and
   a stage takes exactly (its layers) x (one layer); layers whose sliding window makes
   them read less of the cache are a layer shape of their own;
3. the pipeline: each stage of each micro-batch as a compute on its chips, the
   activations sent to the next stage and each micro-batch's sampled token sent back
   to the first stage, over all prefill micro-batches and decode steps, simulated on
   the links so bubbles and send/compute overlap emerge.

Decode steps differ only in context length. When there are more than two, the first
and last are simulated and the steps between are interpolated linearly (attention
work is linear in the context); the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from archsim.cluster import (ClusterResult, Collective, Compute, Host, Send, Task,
                             run_cluster)
from archsim.collectives import choose_algorithm
from archsim.config.model import NpuConfig
from serving.plan import Parallelism, Request
from serving.spec import ModelSpec

if TYPE_CHECKING:
    from serving.timing import Timer

TOKEN_BYTES = 4
"""A sampled token id sent back to the first stage."""


@dataclass(frozen=True)
class BlockTime:
    """A block simulated on one chip (:class:`serving.timing.Timer`)."""

    cycles: int
    matmul_flops: int
    dram_bytes: int
    kernels: int = 0
    """Kernels the compiler made of it (counted when ``runtime.kernel_launch_us`` is
    set; each is launched before it runs)."""
    energy_j: float = 0.0
    """Dynamic energy of its simulation (:func:`archsim.energy.run_energy`)."""


@dataclass(frozen=True)
class Segment:
    """Time of a piece of a stage on its group: total and the part in collectives,
    plus the work its chips did (summed over the group)."""

    cycles: int
    collective_cycles: int
    matmul_flops: int
    dram_bytes: int
    link_bytes: int = 0
    """Bytes the group's collectives moved between chips."""
    parts: tuple[Part, ...] = field(default=(), compare=False, repr=False)
    """What one chip of the group does, in order (for the trace)."""
    launch_cycles: int = 0
    """Of ``cycles``, one chip's kernel launches (``runtime.kernel_launch_us``)."""
    fixed_cycles: int = 0
    """Of ``collective_cycles``, the collectives' fixed latency
    (``runtime.collective_latency_us``)."""
    kernels: int = 0
    """Kernels one chip of the group runs."""
    collectives: int = 0
    energy_j: float = 0.0
    """Dynamic energy of the group's chips' compute (summed over the group)."""

    def __add__(self, other: Segment) -> Segment:
        return Segment(self.cycles + other.cycles,
                       self.collective_cycles + other.collective_cycles,
                       self.matmul_flops + other.matmul_flops,
                       self.dram_bytes + other.dram_bytes, self.link_bytes + other.link_bytes,
                       self.parts + _shift(other.parts, self.cycles, ""),
                       self.launch_cycles + other.launch_cycles,
                       self.fixed_cycles + other.fixed_cycles, self.kernels + other.kernels,
                       self.collectives + other.collectives, self.energy_j + other.energy_j)

    def times(self, n: int, first_layer: int = 0) -> Segment:
        """``n`` of these back to back (layers ``first_layer``... in the parts)."""
        parts = tuple(p for i in range(n)
                      for p in _shift(self.parts, i * self.cycles, f"layer {first_layer + i} "))
        return Segment(self.cycles * n, self.collective_cycles * n,
                       self.matmul_flops * n, self.dram_bytes * n, self.link_bytes * n, parts,
                       self.launch_cycles * n, self.fixed_cycles * n, self.kernels * n,
                       self.collectives * n, self.energy_j * n)


Part = tuple[str, int, int, bool]
"""(name, start, end, is a collective), cycles from the start of its segment."""


def _shift(parts: tuple[Part, ...], by: int, prefix: str) -> tuple[Part, ...]:
    return tuple((prefix + name, start + by, end + by, coll) for name, start, end, coll in parts)


def _launch_name(kernels: int) -> str:
    return f"runtime: {kernels} kernel launch{'es' if kernels != 1 else ''}"


def interpolate(a: Segment, b: Segment, weight: float) -> Segment:
    """A segment between ``a`` and ``b``; its parts are ``a``'s, stretched to fit."""
    def mix(x: int, y: int) -> int:
        return round(x + (y - x) * weight)
    cycles = mix(a.cycles, b.cycles)
    scale = cycles / a.cycles if a.cycles else 1.0
    parts = tuple((name, round(start * scale), round(end * scale), coll)
                  for name, start, end, coll in a.parts)
    return Segment(cycles, mix(a.collective_cycles, b.collective_cycles),
                   mix(a.matmul_flops, b.matmul_flops), mix(a.dram_bytes, b.dram_bytes),
                   mix(a.link_bytes, b.link_bytes), parts,
                   mix(a.launch_cycles, b.launch_cycles), mix(a.fixed_cycles, b.fixed_cycles),
                   mix(a.kernels, b.kernels), mix(a.collectives, b.collectives),
                   a.energy_j + (b.energy_j - a.energy_j) * weight)


@dataclass
class Composer:
    spec: ModelSpec
    request: Request
    par: Parallelism
    config: NpuConfig
    timer: Timer
    """Anything with ``block(kind, tokens, context) -> BlockTime``."""
    algorithm: str = "auto"
    """All-reduce algorithm (:data:`archsim.collectives.ALGORITHMS`, or ``auto``: the
    cheapest for each collective's size); the LM head's all-gather uses the same ring,
    or the bidirectional ring with ``tree``."""
    _segments: dict[tuple[str, int, int, int], Segment] = field(default_factory=dict)

    @property
    def mb_batch(self) -> int:
        return self.request.batch // self.par.micro_batches

    # -- level 2: a block on its tensor-parallel group ----------------------------------
    def _group(self, kind: str, stage: int, tokens: int, context: int,
               layer: int = 0) -> Segment:
        seen = self.spec.attended(context, layer) if kind == "layer" and context else 0
        key = (kind, stage, tokens, context, seen)
        found = self._segments.get(key)
        if found is not None:
            return found
        group = self.par.stage_chips(stage)
        h, item = self.spec.hidden, self.request.item
        activation = self.mb_batch * tokens * h * item
        if kind == "layer":
            # side by side (Falcon), the two halves' partial sums meet in one all-reduce
            after_attention = "" if self.spec.parallel else "all_reduce"
            parts = [("attention", self.timer.layer_block("attention", tokens, context, layer),
                      after_attention, activation),
                     ("mlp", self.timer.block("mlp", tokens), "all_reduce", activation)]
        elif kind == "embed":
            parts = [("embed", self.timer.block("embed", tokens), "all_reduce", activation)]
        else:  # head: each chip holds a vocabulary slice of the logits
            logits = self.mb_batch * self.spec.vocab * item
            parts = [("head", self.timer.block("head", tokens), "all_gather", logits)]
        found = self._on_group(group, parts)
        self._segments[key] = found
        return found

    def _on_group(self, group: tuple[int, ...],
                  parts: list[tuple[str, BlockTime, str, int]]) -> Segment:
        flops = sum(p[1].matmul_flops for p in parts) * len(group)
        dram = sum(p[1].dram_bytes for p in parts) * len(group)
        energy = sum(p[1].energy_j for p in parts) * len(group)
        kernels = sum(p[1].kernels for p in parts)
        launches = self.config.launch_cycles(kernels)
        if len(group) == 1:
            timeline, now = [], 0
            for name, block, _, _ in parts:
                launch = self.config.launch_cycles(block.kernels)
                if launch:
                    timeline.append((_launch_name(block.kernels), now, now + launch, False))
                timeline.append((name, now + launch, now + launch + block.cycles, False))
                now += launch + block.cycles
            return Segment(now, 0, flops, dram, 0, tuple(timeline), launches, 0, kernels,
                           energy_j=energy)
        tasks: list[Task] = []
        collectives = []
        after: dict[int, tuple[int, ...]] = {c: () for c in group}
        """What each chip's next compute waits for."""
        for name, block, op, nbytes in parts:
            launch = self.config.launch_cycles(block.kernels)
            if launch:  # the chip's stream launches the block's kernels, then runs them
                tasks += [Compute(_launch_name(block.kernels), c, launch, after[c])
                          for c in group]
                after = {c: () for c in group}  # in order on each chip
            first = len(tasks)
            tasks += [Compute(name, c, block.cycles, after[c]) for c in group]
            if not op:  # the next part follows on each chip
                after = {c: (first + i,) for i, c in enumerate(group)}
                continue
            collectives.append(len(tasks))
            after = {c: (len(tasks),) for c in group}
            algorithm = self.algorithm
            if algorithm == "auto":
                link = self.config.interconnect
                algorithm = choose_algorithm(
                    op, len(group), nbytes, link.latency_cycles,
                    link.link_bandwidth_gb_per_s * 1e9 / self.config.clock_hz)
            if op != "all_reduce" and algorithm == "tree":
                algorithm = "bidir_ring"
            tasks.append(Collective(op, op, group, nbytes, tuple(range(first, len(tasks))),
                                    algorithm))
        result = run_cluster(tasks, self.config, self.par.chips)
        in_collectives = sum(result.spans[i].end - result.spans[i].start for i in collectives)
        timeline = tuple((span.task.name.replace("_", "-"), span.start, span.end,
                          i in collectives) for i, span in enumerate(result.spans)
                         if i in collectives or span.task.chip == group[0])
        fixed = self.config.us_to_cycles(self.config.runtime.collective_latency_us)
        return Segment(result.total_cycles, in_collectives, flops, dram, result.link_bytes,
                       timeline, launches, fixed * len(collectives), kernels,
                       len(collectives), energy)

    def _whole_stage(self, stage: int, tokens: int, context: int) -> Segment:
        """A stage on one chip as one program (no collective splits it)."""
        key = ("stage", stage, tokens, context, 0)
        found = self._segments.get(key)
        if found is None:
            counts = self.par.stage_layers(self.spec)
            first, count = sum(counts[:stage]), counts[stage]
            embed, head = stage == 0, stage == self.par.pp - 1
            block = self.timer.stage(first, count, embed, head, tokens, context)
            name = "+".join((["embed"] if embed else [])
                            + [f"layers {first}-{first + count - 1}"]
                            + (["head"] if head else []))
            launch = self.config.launch_cycles(block.kernels)
            parts = ((_launch_name(block.kernels), 0, launch, False),) if launch else ()
            found = Segment(launch + block.cycles, 0, block.matmul_flops, block.dram_bytes,
                            0, parts + ((name, launch, launch + block.cycles, False),),
                            launch, 0, block.kernels, energy_j=block.energy_j)
            self._segments[key] = found
        return found

    def stage(self, stage: int, tokens: int, context: int) -> Segment:
        """One micro-batch through one stage (its layers, plus the embedding on the first
        and the LM head on the last): one program on one chip; with tensor parallelism,
        blocks with collectives between them."""
        if self.par.tp == 1:
            return self._whole_stage(stage, tokens, context)
        counts = self.par.stage_layers(self.spec)
        first = sum(counts[:stage])
        total = None
        start = first
        for layer in range(first, first + counts[stage] + 1):
            end = layer == first + counts[stage]
            if not end and (self.spec.attended(context, layer)
                            == self.spec.attended(context, start)):
                continue
            run = self._group("layer", stage, tokens, context, start).times(layer - start,
                                                                            start)
            total = run if total is None else total + run
            start = layer
        if stage == 0:
            total = self._group("embed", 0, tokens, 0) + total
        if stage == self.par.pp - 1:
            total = total + self._group("head", stage, tokens, 0)
        return total

    def decode_stages(self) -> list[list[Segment]]:
        """Per decode step, per stage; steps between the first and last interpolated."""
        contexts = self.request.contexts()
        if not contexts:
            return []
        ends = {0: contexts[0], len(contexts) - 1: contexts[-1]}
        exact = {i: [self.stage(s, 1, c) for s in range(self.par.pp)] for i, c in ends.items()}
        steps = []
        for i, context in enumerate(contexts):
            if i in exact:
                steps.append(exact[i])
                continue
            weight = (context - contexts[0]) / (contexts[-1] - contexts[0])
            steps.append([interpolate(a, b, weight)
                          for a, b in zip(exact[0], exact[len(contexts) - 1])])
        return steps

    # -- level 3: the pipeline -------------------------------------------------------
    def pipeline(self) -> Pipeline:
        par, mb_count = self.par, self.par.micro_batches
        prefill = [self.stage(s, self.request.prefill, 0) for s in range(par.pp)]
        decode = self.decode_stages()
        build = PipelineBuilder(self)
        for mb in range(mb_count):
            build.pass_(("prefill", mb), mb, prefill, self.request.prefill, None)
        for step, stages in enumerate(decode):
            for mb in range(mb_count):
                build.pass_(("decode", step, mb), mb, stages, 1, build.last[mb])
        result = run_cluster(build.tasks, self.config, par.chips)
        ttft = max(result.spans[i].end for i in build.prefill_ends)
        return Pipeline(result, ttft, build.segments, prefill, decode)


@dataclass(frozen=True)
class Pipeline:
    result: ClusterResult
    ttft_cycles: int
    segments: dict[int, tuple[tuple, Segment]]
    """Task index of each stage compute -> (its label, its segment)."""
    prefill: list[Segment]
    decode: list[list[Segment]]


class PipelineBuilder:
    """The task list of a pipeline, one pass (a micro-batch through every stage) at a
    time (``archsim serve`` builds one pass of an iteration with it, as ``archsim llm``
    builds its passes)."""

    def __init__(self, composer: Composer) -> None:
        self.c = composer
        self.tasks: list[Task] = []
        self.segments: dict[int, tuple[tuple, Segment]] = {}
        self.last: dict[int, list[int]] = {}
        """Micro-batch -> task indices of its latest pass through the last stage."""
        self.prefill_ends: list[int] = []

    def pass_(self, label: tuple, mb: int, stages: list[Segment], tokens: int,
              previous: list[int] | None) -> None:
        par, spec, item = self.c.par, self.c.spec, self.c.request.item
        incoming: tuple[int, ...] = ()
        if previous is not None:  # the sampled token goes back to the first stage
            last_chip = par.stage_chips(par.pp - 1)[0]
            self.tasks.append(Send(f"{label} token", last_chip, 0,
                                   self.c.mb_batch * TOKEN_BYTES, tuple(previous)))
            incoming = (len(self.tasks) - 1,)
        config = self.c.config
        host = config.us_to_cycles(config.runtime.host_step_us)
        if host:  # the host samples, schedules and prepares the step's inputs first
            self.tasks.append(Host(f"{label} host", host, tuple(previous or ())))
            incoming += (len(self.tasks) - 1,)
        for stage, segment in enumerate(stages):
            computes = []
            for chip in par.stage_chips(stage):
                computes.append(len(self.tasks))
                self.segments[len(self.tasks)] = ((*label, stage), segment)
                self.tasks.append(Compute(f"{label} stage {stage}", chip, segment.cycles,
                                          incoming))
            if stage == par.pp - 1:
                break
            nbytes = self.c.mb_batch * tokens * spec.hidden * item // par.tp
            sends = []
            for rank, chip in enumerate(par.stage_chips(stage)):
                sends.append(len(self.tasks))
                self.tasks.append(Send(f"{label} activations {stage}->{stage + 1}", chip,
                                       par.stage_chips(stage + 1)[rank], nbytes,
                                       (computes[rank],)))
            incoming = tuple(sends)
        self.last[mb] = computes
        if label[0] == "prefill":
            self.prefill_ends += computes


__all__ = ["BlockTime", "Composer", "Pipeline", "PipelineBuilder", "Segment", "TOKEN_BYTES",
           "interpolate"]
