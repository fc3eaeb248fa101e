"""Where a matmul kernel places its scratchpad buffers (``operand_arena``): after the
previous matmul kernel's, so the next projection's weights load while this one's last
tiles are multiplied, and from 0 again when they do not fit."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from archsim.app.pipeline import run
from archsim.app.workload import Workload
from archsim.config import load_config
from compiler.ir.operands import SramRef
from compiler.ir.ops import Load, MatMul


class TwoProjections(nn.Module):
    """Two GEMVs of one activation, as q and k of a decode step."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.q = nn.Linear(k, n, bias=False)
        self.k = nn.Linear(k, n, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.q(x), self.k(x)


def _run(config, k: int = 512, n: int = 1024):
    torch.manual_seed(0)
    module = TwoProjections(k, n).eval()
    # functional: every output is compared with torch's (NumericsError if not close)
    return run(Workload.of_module(module, (torch.randn(1, k),)), config, mode="functional")


def _by_kernel(result, kind) -> dict[str, list]:
    out: dict[str, list] = {}
    for command in result.program.commands:
        if isinstance(command.op, kind) and command.engine.startswith("core0"):
            out.setdefault(command.source.split(":")[0], []).append(command)
    return out


def test_the_second_projection_prefetches_into_buffers_of_its_own() -> None:
    """On tpu-v4 the two kernels' weight tiles occupy disjoint bytes of core 0's
    scratchpad, the second's above the first's; so no weight load of the second waits
    for a multiply of the first, and its first one starts before the first kernel's
    last multiply ends (the DMA queues reach it while the arrays still work)."""
    result = _run(load_config("tpu-v4"))
    loads, mms = _by_kernel(result, Load), _by_kernel(result, MatMul)
    first, second = (sorted(loads, key=lambda s: loads[s][0].id))
    def span(cmds):
        return (min(c.op.dst.offset for c in cmds),
                max(c.op.dst.offset + c.op.dst.nbytes for c in cmds))
    assert span(loads[second])[0] >= span(loads[first])[1]
    first_mms = {c.id for c in mms[first]}
    assert not any(set(c.deps) & first_mms for c in loads[second])
    start = {e.command: e.start for e in result.trace}
    end = {e.command: e.end for e in result.trace}
    assert min(start[c.id] for c in loads[second]) < max(end[c.id] for c in mms[first])


class Projections(nn.Module):
    """``count`` GEMVs of one activation, one kernel each."""

    def __init__(self, k: int, n: int, count: int) -> None:
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(k, n, bias=False) for _ in range(count))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(linear(x) for linear in self.linears)


def _sram_span(commands) -> tuple[int, int]:
    refs = [getattr(c.op, f.name) for c in commands for f in dataclasses.fields(c.op)]
    refs = [r for r in refs if isinstance(r, SramRef) and r.space == "sram0"]
    return min(r.offset for r in refs), max(r.offset + r.nbytes for r in refs)


def test_buffers_that_do_not_fit_above_start_from_zero_again() -> None:
    """On ``tiny`` with an 8 KiB scratchpad each 64 -> 64 projection's buffers take
    about 1.8 KiB: the kernels follow each other up the scratchpad until the next one
    would pass its end, which starts again at byte 0 (numbers against torch)."""
    size = 8192
    config = load_config("tiny").with_overrides({"core.scratchpad.size_bytes": size})
    torch.manual_seed(0)
    module = Projections(64, 64, 6).eval()
    result = run(Workload.of_module(module, (torch.randn(1, 64),)), config,
                 mode="functional")
    kernels: dict[str, list] = {}
    for command in result.program.commands:
        if command.engine.startswith("core0") and "linears" in command.source:
            kernels.setdefault(command.source.split(":")[0], []).append(command)
    spans = [_sram_span(cmds) for cmds in sorted(kernels.values(), key=lambda c: c[0].id)]
    assert len(spans) == 6 and spans[0][0] == 0
    wraps = 0
    for (_, end), (start, new_end) in zip(spans, spans[1:]):
        assert new_end <= size
        if start == 0:
            wraps += 1
            assert end + new_end > size  # it did not fit above the one before
        else:
            assert start >= end
    assert wraps >= 1
