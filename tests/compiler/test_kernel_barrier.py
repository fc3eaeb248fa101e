"""A runtime that starts each kernel after the previous one ended (``runtime.kernel_order:
serial``, the ascend-910b4 preset's torchair stream): the compiler emits no command of a
kernel to run under the one before; by default (``overlapped``) the next kernel's
weights load under the previous one's multiplies (the compiler's prefetch)."""

from __future__ import annotations

import torch

from archsim.app.pipeline import run
from archsim.app.workload import Workload
from archsim.config import load_config
from compiler import compile as compile_module
from compiler.emit import Emitter
from compiler.ir import DType, DramRef, Load, Slice, SramRef
from compiler.ir.verify import find_problems

ATOM = load_config("atom")
SERIAL = ATOM.with_overrides({"runtime.kernel_order": "serial"})


def _kernel_spans(config) -> tuple[list[tuple[int, int]], int]:
    """(first start, last end) of each kernel in program order, and the latency."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512, bias=False),
                                torch.nn.Linear(512, 512, bias=False)).to(torch.float16)
    result = run(Workload.of_module(model, (torch.randn(64, 512, dtype=torch.float16),)),
                 config, mode="performance")
    assert find_problems(result.program, config) == []
    spans: dict[str, tuple[int, int]] = {}
    for i, command in enumerate(result.program.commands):
        lo, hi = spans.get(command.source, (result.starts[i], result.ends[i]))
        spans[command.source] = (min(lo, result.starts[i]), max(hi, result.ends[i]))
    return list(spans.values()), result.total_cycles


def test_a_serial_runtime_starts_each_kernel_after_the_last_ended() -> None:
    free, free_cycles = _kernel_spans(ATOM)
    serial, serial_cycles = _kernel_spans(SERIAL)
    assert len(free) == len(serial) == 2
    # with no runtime the second matmul's first loads run under the first's work
    assert free[1][0] < free[0][1]
    # serialized: not a cycle of overlap, and the whole takes longer
    assert serial[1][0] >= serial[0][1]
    assert serial_cycles > free_cycles


def test_the_emitters_barrier_makes_each_engines_first_command_wait_for_every_engine() -> None:
    em = Emitter("barrier", ATOM)
    em.tensor("x", (4, 16), DType.f32, "in")

    def load(engine: str, row: int, offset: int) -> int:
        return em.emit(engine, Load(DramRef("x", (Slice(row, row + 1), Slice(0, 16))),
                                    SramRef("sram0", offset, (1, 16), DType.f32)), "k")

    a, b = load("core0.dma0", 0, 0), load("core0.dma1", 1, 64)
    em.barrier()
    c = load("core1.dma0", 2, 128)  # another core's engine, different bytes
    d = load("core1.dma0", 3, 192)  # the same engine again: its queue orders it
    f = load("core1.dma1", 0, 320)  # a second engine of a core already past the barrier
    e = load("core0.dma0", 3, 256)
    program = em.build()
    assert set(program.commands[c].deps) == {a, b}
    assert program.commands[d].deps == ()
    assert set(program.commands[f].deps) == {a, b}
    # its own engine's last too: a DMA engine starts a transfer while the previous one
    # is in flight, so the queue alone would not make it wait for a's end
    assert set(program.commands[e].deps) == {a, b}


def test_no_kernel_of_a_compiled_model_starts_before_the_previous_ones_ended(
        monkeypatch) -> None:
    # every kernel boundary the compiler emits, on a model of many kernels and engines
    boundaries: list[int] = []
    barrier = Emitter.barrier

    def record(self: Emitter) -> None:
        boundaries.append(self.count)
        barrier(self)

    monkeypatch.setattr(Emitter, "barrier", record)
    compile_module.clear_cache()  # compiled here, not found in the schedule cache
    result = run(Workload.parse("llama-small"), load_config("ascend-910b4"),
                 mode="performance")
    starts, ends = result.starts, result.ends
    assert len(boundaries) > 10
    for first in boundaries[1:]:
        assert min(starts[first:]) >= max(ends[:first]), first
