"""A stack of identical layers simulated in part: the run of the first few layers
extended to the whole stack.

Models are stacks of identical layers (a Llama-2-70B is 80 copies of one decoder
layer). When only the first ``k`` (at least 3) layers of a stack of ``n`` were compiled
and simulated, :func:`extend` returns the result of the whole stack. The first layer
(which follows the embedding) and the last (which is followed by the final norm and
the head, and fuses with them) are not like the others; the layers between are. So
each of the ``n - k`` layers not simulated adds what a middle simulated layer added on
average: its cycles (from the end of the layer before it to its own end, so the
overlap between neighbouring layers counts as simulated), its engines' busy cycles, its
bytes and its FLOPs. Work, bytes and FLOPs are exact. Cycles differ from layer to
layer where engines are taken in turn across kernels (a layer starting on the other
DMA engine alternates two timings): the mean over several middle layers follows that,
one middle layer (``archsim.estimate`` simulates three) is within 2% on the models
``tests/torch_bridge/test_layer_stack.py`` compares with whole-model runs. A layer adds
at least its busiest engine's work and its DRAM bytes at the sustained rate: work that
needs only a layer's weights (int4 weights dequantized ahead) can run under the layers
before it, so the simulated span understates what each later layer adds once that work
has caught up. The bound is a floor: such stacks can still come out under a whole run
(an 8-layer one in ``tests/archsim/test_repeated_extension.py``: -11%, -57% without it).

The trace (starts, ends, per-command bytes and FLOPs) stays that of the simulated
layers; totals, utilization and bandwidths cover the whole stack. What the missing
layers add is recorded (``RepeatedLayers.extension``: their cycles, busy cycles per
engine, and the window of the trace they repeat), so reports can place them after the
trace and split their time like the middle layers' without re-deriving anything.

Commands belong to layer ``i`` of the stack at ``path`` when their source (module path
and aten node, ``model.layers.3.mlp.up_proj:mm``) starts with ``path.i`` followed by
``.`` or ``:``.
"""

from __future__ import annotations

import dataclasses
import re
from types import MappingProxyType

import numpy as np

from archsim.errors import ArchsimError
from compiler.ir.access import dram_tensors
from compiler.ir.dram_peak import check_dram_capacity
from archsim.plan import plan_for
from archsim.result import Extension, RepeatedLayers, RepeatedTiles, SimResult
from archsim.simulator import busy_cycles


def layer_of_commands(result: SimResult, path: str) -> np.ndarray:
    """Per command, the index of the layer of ``path`` it belongs to (-1: outside)."""
    pattern = re.compile(re.escape(path) + r"\.(\d+)(?:[.:]|$)")
    index = np.full(len(result.program.commands), -1, dtype=np.int64)
    for i, command in enumerate(result.program.commands):
        match = pattern.match(command.source or "")
        if match:
            index[i] = int(match.group(1))
    return index


def extend(result: SimResult, path: str, total: int) -> SimResult:
    """``result`` (of a model whose stack ``path`` kept its first layers) extended to a
    stack of ``total`` identical layers; see the module docstring."""
    layer = layer_of_commands(result, path)
    simulated = _simulated(layer, path, total, "layers")
    middle = (layer >= 1) & (layer <= simulated - 2)
    extra = total - simulated
    check_dram_capacity(result.program, result.config,
                        round(_resident_bytes(result, middle) * extra / (simulated - 2)),
                        f"with the {extra} layers of {path} not simulated")
    extended, each, extension = _extended(result, layer, simulated, total)
    return dataclasses.replace(extended, layers=RepeatedLayers(path, simulated, total, each,
                                                               extension))


def extend_tiles(result: SimResult, panel: np.ndarray, total: int, kernel: str,
                 tiles_per_panel: int) -> SimResult:
    """``result`` of a program whose last kernel, a matmul, was compiled in part
    extended to the whole matmul: ``panel`` gives, per command, the panel of output
    tiles it belongs to (-1: another kernel), and each of the ``total`` panels not
    simulated adds what a middle simulated one added (as :func:`extend` does for
    layers). The DRAM tensors are declared whole, so the capacity check already
    counted them."""
    simulated = _simulated(panel, kernel, total, "panels")
    extended, each, extension = _extended(result, panel, simulated, total)
    return dataclasses.replace(extended, tiles=RepeatedTiles(kernel, simulated, total,
                                                             tiles_per_panel, each, extension))


def _simulated(unit: np.ndarray, name: str, total: int, units: str) -> int:
    """How many units (layers, panels) the run simulated, given each command's unit;
    an ArchsimError unless that is the first 3 or more of ``total``."""
    simulated = int(unit.max()) + 1 if len(unit) else 0
    if simulated < 3 or not all((unit == i).any() for i in range(simulated)):
        raise ArchsimError(f"cannot extend {name!r} to {total} {units}: the run has commands "
                           f"of {simulated} of its {units}, the first 3 at least are needed")
    if total < simulated:
        raise ArchsimError(f"cannot extend {name!r} to {total} {units}: the run already "
                           f"simulated {simulated}")
    return simulated


def _extended(result: SimResult, unit: np.ndarray, simulated: int, total: int
              ) -> tuple[SimResult, int, Extension]:
    """The totals of ``result`` with ``total - simulated`` more units, each adding the
    mean of the middle simulated units (1 .. simulated - 2 of ``unit``, the per-command
    unit index), that mean's cycles, and what the added units add."""
    middle = (unit >= 1) & (unit <= simulated - 2)
    count = simulated - 2
    window = (int(result.ends[unit == 0].max()), int(result.ends[unit == simulated - 2].max()))
    span = window[1] - window[0]
    extra = total - simulated

    def scaled(value: float) -> int:
        """A middle units' total, as the ``extra`` units' (their mean times extra)."""
        return round(value * extra / count)

    plan = plan_for(result.program, result.config, verify=False)
    chosen = np.flatnonzero(middle)
    timings = [plan.timings[plan.kinds[i]] for i in chosen]
    busy = dict(result.engine_busy_cycles)
    added: dict[str, int] = {}
    for engine, queue in plan.queues.items():
        for i in range(1, simulated - 1):
            members = [j for j in queue if unit[j] == i]
            if members:
                more = scaled(busy_cycles(result.starts[members], result.ends[members],
                                          plan.in_flight[engine]))
                busy[engine] += more
                added[engine] = added.get(engine, 0) + more
    links = dict(result.link_bytes)
    for link, name in enumerate(plan.link_names):
        moved = sum(t.nbytes for t in timings if link in t.links)
        links[name] = int(links.get(name, 0) + scaled(moved))
    matmul = sum(int(plan.flops[i]) for i in chosen
                 if ".mxu" in result.program.commands[i].engine)
    dram = sum(t.dram_read + t.dram_written for t in timings)
    # A unit adds at least its busiest engine's work and its DRAM bytes at the sustained
    # rate: work that does not wait for the unit before it (weights dequantized ahead)
    # can run under the first unit and make the simulated span look shorter than what
    # every later unit adds once that work has caught up
    cycles = max(scaled(span), max(added.values(), default=0),
                 round(scaled(dram) / result.config.dram_sustained_bytes_per_cycle))
    return dataclasses.replace(
        result,
        total_cycles=result.total_cycles + cycles,
        engine_busy_cycles=MappingProxyType(busy),
        dram_bytes_read=result.dram_bytes_read + scaled(sum(t.dram_read for t in timings)),
        dram_bytes_written=result.dram_bytes_written
        + scaled(sum(t.dram_written for t in timings)),
        host_link_bytes=result.host_link_bytes + scaled(sum(t.host_bytes for t in timings)),
        matmul_flops=result.matmul_flops + scaled(matmul),
        flops=result.flops + scaled(sum(t.flops for t in timings)),
        link_bytes=MappingProxyType(links),
    ), round(cycles / extra) if extra else round(span / count), Extension(
        first_cycle=int(result.total_cycles), cycles=cycles, window=window,
        busy_cycles=MappingProxyType(added))


def _resident_bytes(result: SimResult, members: np.ndarray) -> int:
    """Bytes of the DRAM tensors live for the whole run (inputs such as weights, and
    outputs such as a KV cache) that only ``members`` touch: what as many more layers
    add to the footprint."""
    program = result.program
    inside: dict[str, bool] = {}
    for command, member in zip(program.commands, members.tolist()):
        for name in dram_tensors(command.op):
            inside[name] = inside.get(name, True) and member
    return sum(t.nbytes for t in program.tensors
               if t.role in ("in", "out", "inout") and inside.get(t.name, False))


__all__ = ["Extension", "RepeatedLayers", "RepeatedTiles", "extend", "extend_tiles", "layer_of_commands"]
