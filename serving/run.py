"""``serve``: one LLM serving run (prefill, then decode steps with a KV cache) on one
chip or many, with TTFT, TPOT, tokens/s, memory per chip, utilization and the
rooflines they are measured against."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from archsim.cluster import Compute
from archsim.config.model import NpuConfig
from serving.breakdown import CATEGORIES, step_breakdown, step_counts
from serving.compose import Composer, Pipeline
from serving.plan import (Memory, Parallelism, Request, check, check_links,
                          check_memory)
from serving.roofline import Roofline, peak_flops, roofline
from serving.spec import ModelSpec, load_model


@dataclass(frozen=True)
class ServeResult:
    spec: ModelSpec
    request: Request
    par: Parallelism
    config: NpuConfig
    memory: Memory
    roofline: Roofline
    pipeline: Pipeline
    simulated: tuple[tuple[str, int, int], ...]
    """(block, tokens, context) shapes compiled and simulated on one chip."""
    algorithm: str = "auto"

    # -- time ---------------------------------------------------------------------------
    def _s(self, cycles: float) -> float:
        return cycles / self.config.clock_hz

    @property
    def ttft_s(self) -> float:
        return self._s(self.pipeline.ttft_cycles)

    @property
    def e2e_s(self) -> float:
        return self._s(self.pipeline.result.total_cycles)

    @property
    def decode_s(self) -> float:
        return self.e2e_s - self.ttft_s

    @property
    def tpot_s(self) -> float:
        """Mean time between a sequence's generated tokens."""
        return self.decode_s / self.request.decode if self.request.decode else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second over the decode phase, all sequences."""
        decode = self.decode_s
        return self.request.batch * self.request.decode / decode if decode else 0.0

    @property
    def link_bytes(self) -> int:
        """Bytes moved between chips: collectives inside stages and pipeline sends."""
        inside = sum(seg.link_bytes for _, seg in self.pipeline.segments.values())
        return inside // self.par.tp + self.pipeline.result.link_bytes

    # -- utilization --------------------------------------------------------------------
    def _phase(self, phase: str) -> tuple[int, int, int]:
        """(matmul FLOPs, DRAM bytes, collective chip-cycles) of a phase, all chips."""
        flops = dram = coll = 0
        for label, segment in self.pipeline.segments.values():
            if label[0] != phase:
                continue
            flops += segment.matmul_flops // self.par.tp
            dram += segment.dram_bytes // self.par.tp
            coll += segment.collective_cycles
        return flops, dram, coll

    def utilization(self) -> dict[str, float]:
        chips, cfg = self.par.chips, self.config
        peak = peak_flops(cfg, self.request.dtype) * chips
        bandwidth = cfg.dram_bandwidth_bytes_per_s * chips
        pf, pd, pc = self._phase("prefill")
        df, dd, dc = self._phase("decode")
        total_cycles = self.pipeline.result.total_cycles * chips
        decode = self.decode_s
        return {
            "matrix_prefill": pf / (self.ttft_s * peak) if self.ttft_s else 0.0,
            "matrix_decode": df / (decode * peak) if decode else 0.0,
            "hbm_prefill": pd / (self.ttft_s * bandwidth) if self.ttft_s else 0.0,
            "hbm_decode": dd / (decode * bandwidth) if decode else 0.0,
            "collectives": (pc + dc) / total_cycles if total_cycles else 0.0,
        }

    # -- energy ---------------------------------------------------------------------------
    def energy(self, phase: str) -> dict[str, float]:
        """Energy of a phase (``prefill`` or ``decode``) over all chips: the dynamic
        energy of its simulated blocks (:mod:`archsim.energy`), the bytes its
        collectives moved over chip-to-chip links, and every chip's static power over
        the phase's time; per generated token and as average power per chip."""
        from archsim.area import static_power_w
        from archsim.config.energy_reference import energy_table

        dynamic = link = 0.0
        for label, segment in self.pipeline.segments.values():
            if label[0] == phase:  # each segment once per chip of its group
                dynamic += segment.energy_j / self.par.tp
                link += segment.link_bytes / self.par.tp
        link_j = link * energy_table(self.config).interconnect_pj_per_byte * 1e-12
        seconds = self.ttft_s if phase == "prefill" else self.decode_s
        static = sum(static_power_w(self.config).values()) * self.par.chips * seconds
        total = dynamic + link_j + static
        tokens = self.request.batch * (self.request.prefill if phase == "prefill"
                                       else self.request.decode)
        return {"energy_j": total, "dynamic_j": dynamic + link_j, "static_j": static,
                "energy_per_token_j": total / tokens if tokens else 0.0,
                "average_power_w": total / seconds / self.par.chips if seconds else 0.0}

    # -- where the time goes ------------------------------------------------------------
    def breakdown(self, phase: str = "decode") -> dict[str, float]:
        """Seconds per category of a mean ``phase`` step (:mod:`serving.breakdown`)."""
        return step_breakdown(self, phase)

    def step_counts(self) -> dict[str, int]:
        """Kernels launched and collectives run per chip in a decode step."""
        return step_counts(self)

    def notes(self) -> list[str]:
        spec, par, request = self.spec, self.par, self.request
        blocks = ", ".join(f"{k}({t}{f', ctx {c}' if c else ''})" for k, t, c in self.simulated)
        notes = [f"simulated once per distinct shape on one chip: {blocks}"]
        if par.tp == 1:
            from torch_bridge.layer_stack import KEEP_LAYERS, MIN_LAYERS

            part = (f"of {spec.layers} identical layers the first {KEEP_LAYERS} simulated, "
                    f"the others extended" if spec.layers >= MIN_LAYERS else
                    f"its {spec.layers} layer{'s' if spec.layers != 1 else ''} all simulated "
                    f"(a stack of fewer than {MIN_LAYERS} is not extended)")
            notes.append(f"each stage compiled and simulated as one program, as archsim."
                         f"estimate runs a model: {part}")
        else:
            notes.append(f"{spec.layers} identical layers composed from one simulated layer "
                         f"per shape (exact: each layer ends with every chip of its group "
                         f"idle); rotary cos/sin are inputs of each attention block")
        notes.append("prefill: the final norm over every token, the LM head over the last "
                     "token only (what generation samples from; a plain forward of "
                     "transformers' *ForCausalLM computes logits for every token)")
        window = spec.sliding_window
        if window and request.prefill > window:
            notes.append(f"prompt {request.prefill} > sliding window {window}: prefill "
                         f"attention of the windowed layers is timed as full causal "
                         f"attention (the kernel does not skip key tiles left of the window)")
        if request.weights.startswith("int4") and self.config.core.matrix.dequant == "vector":
            notes.append("int4 weights are read at half a byte and dequantized per group on "
                         "the vector unit (core.matrix.dequant=vector), a tile at a time in "
                         "the scratchpad before its multiply (5 vector ops a weight)")
        elif request.weights.startswith("int4"):
            notes.append("int4 weights are read at half a byte and dequantized per group in "
                         "the arrays' input path; a weight tile still takes as many cycles "
                         "to shift into an array as a 16-bit one, so where that binds a "
                         "decode GEMV the vector units multiply a share of its columns "
                         "(unpacked, widened and multiply-added in place), and small-batch "
                         "decode cannot go below weights / (the arrays' and vector units' "
                         "intake) cycles, whatever the packed HBM roofline says")
        if spec.attention_softcap:
            notes.append("attention logit soft-capping is not timed (inside the flash "
                         "kernel; transformers' SDPA path leaves it out too)")
        if self.request.decode > 2:
            notes.append(f"decode steps 2..{self.request.decode - 1} interpolated linearly "
                         f"between the simulated first and last steps (attention is linear "
                         f"in the context)")
        if self.config.runtime.kernel_launch_us:
            notes.append("kernels launched: the compiler's fused groups (a matmul with its "
                         "epilogue, a run of vector ops), counted on each compiled block; "
                         "runtimes with hand-fused kernels (QKV, rotary, add+norm) launch "
                         "fewer, larger ones")
        if par.micro_batches > 1:
            notes.append(f"{par.micro_batches} micro-batches of "
                         f"{self.request.batch // par.micro_batches}: TTFT is when the last "
                         f"one has its first token")
        if par.chips > 1:
            notes.append(f"{par.chips} chips ({self.config.interconnect.kind}, "
                         f"{self.config.interconnect.topology}): collectives "
                         f"({self.algorithm}) and stage-to-stage sends simulated as traffic "
                         f"on the chip-to-chip links; each stage's collectives are "
                         f"simulated with its group alone on the links")
        return notes


def serve(model: str | Path | ModelSpec, config: NpuConfig, request: Request,
          par: Parallelism | None = None, algorithm: str = "auto") -> ServeResult:
    """Simulate serving ``request`` with ``model`` on ``par.chips`` chips of ``config``
    (one chip by default); tensor-parallel all-reduces use ``algorithm`` (ring,
    bidir_ring, tree, or auto: the cheapest for each message size)."""
    from serving.timing import Timer  # imports torch

    par = par or Parallelism()
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    shard = check(spec, request, par)
    check_links(config, par)
    memory = check_memory(spec, request, par, shard, config)
    timer = Timer(spec, shard, request, request.batch // par.micro_batches, config)
    composer = Composer(spec, request, par, config, timer, algorithm)
    pipeline = composer.pipeline()
    return ServeResult(spec, request, par, config, memory,
                       roofline(spec, request, config, par.chips), pipeline,
                       tuple(timer.simulated), algorithm)


def chip_busy(result: ServeResult, chip: int) -> int:
    """Cycles ``chip`` spent computing (its stage passes, collectives included)."""
    return result.pipeline.result.busy_cycles(chip, Compute)


__all__ = ["CATEGORIES", "ServeResult", "chip_busy", "serve"]
