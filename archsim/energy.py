"""Energy and power of a run, from its trace.

Each command charges the dynamic energy of what it does (:func:`command_energy`):
a matmul its MACs at the array's input dtype (times the passes an f32 matmul takes on
a 16-bit array) and the scratchpad bytes of its operands; a vector op its elements
times its class's cycle cost and the bytes it streams through the scratchpad; a
transfer its bytes on every link it crosses (DRAM, each NoC hop, the scratchpad and
shared SRAM ports, the host link). Static power (:mod:`archsim.area`) is charged over
the run's whole duration per component; with ``power.gating: compute`` the arrays and
vector units draw their full static power only while busy. So stalls and idle time
cost static energy and nothing else, as on silicon.

Costs are per distinct command shape (the plan's cost kinds), spread to commands with
numpy: the accounting is a small fraction of a simulation's wall time (measured in
``benchmarks/energy_overhead.py``). Units not simulated (:class:`~archsim.result.
Extension`) add the dynamic energy of the trace window they repeat, scaled as their
cycles are.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from archsim import vector
from archsim.area import COMPONENTS, GATEABLE, static_power_w
from archsim.config.energy_reference import EnergyTable, energy_table
from archsim.config.model import NARROW_DTYPES, MatrixConfig, NpuConfig
from archsim.config.names import SHARED, engine_kind
from archsim.matrix import passes
from archsim.plan import plan_for
from archsim.result import SimResult
from compiler.ir.access import sram_operands
from compiler.ir.ops import MatMul, Op

PJ = 1e-12
_COMPONENT = {name: i for i, name in enumerate(COMPONENTS)}
_LINK_COMPONENT = (("dram", "dram"), ("noc.", "noc"), ("sram", "sram"), ("shared", "sram"),
                   ("host_link", "links"))
"""Flow-network link name prefix -> the component its bytes are charged to."""


@dataclass(frozen=True)
class RunEnergy:
    """Energy and power of one run (joules, watts; components as in
    :data:`archsim.area.COMPONENTS`)."""

    config: NpuConfig
    seconds: float
    command_j: np.ndarray = field(repr=False)
    """Dynamic energy of each command (program order), joules."""
    dynamic_j: Mapping[str, float]
    """Per component, with what extensions add."""
    static_j: Mapping[str, float]
    engine_j: Mapping[str, float]
    """Dynamic energy per engine, with what extensions add."""
    static_w: Mapping[str, float]
    """Per component, ungated."""
    idle_power_w: float
    """What the chip draws doing nothing (gated blocks at their gated share)."""
    extension_j: float
    """Dynamic energy the units not simulated add."""
    idle_w: Mapping[str, float]
    """Per component, what it draws doing nothing (``idle_power_w`` in parts)."""
    _timeline: tuple[np.ndarray, np.ndarray] = field(repr=False)
    """Breakpoints (seconds) and the cumulative variable energy (J) at them: dynamic
    energy and the busy-time part of gated static power, piecewise linear."""
    _spread: tuple[np.ndarray, np.ndarray, np.ndarray] = field(repr=False)
    """Per command and extension: start and end (seconds) and variable energy per
    component (a column each), for the per-component curves."""

    @property
    def dynamic_total_j(self) -> float:
        return sum(self.dynamic_j.values())

    @property
    def static_total_j(self) -> float:
        return sum(self.static_j.values())

    @property
    def energy_j(self) -> float:
        return self.dynamic_total_j + self.static_total_j

    @property
    def average_power_w(self) -> float:
        return self.energy_j / self.seconds if self.seconds else 0.0

    @property
    def component_j(self) -> Mapping[str, float]:
        return MappingProxyType({c: self.dynamic_j[c] + self.static_j[c] for c in COMPONENTS})

    def energy_until(self, seconds: np.ndarray) -> np.ndarray:
        """Energy (J) spent from the start to each of ``seconds``: idle power times the
        time, plus the variable energy up to then. Its slope is the power."""
        times, cumulative = self._timeline
        t = np.clip(np.asarray(seconds, dtype=np.float64), 0.0, self.seconds)
        return self.idle_power_w * t + np.interp(t, times, cumulative)

    def component_power_over_time(self, bins: int = 200
                                  ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``(edges, {component: watts})``: each component's average power in ``bins``
        equal slices of the run; the components add up to :meth:`power_over_time`."""
        edges = np.linspace(0.0, self.seconds, max(1, bins) + 1)
        width = np.diff(edges)
        cumulative = _energy_at(edges, *self._spread)
        watts = {}
        for column, name in enumerate(COMPONENTS):
            dynamic = np.divide(np.diff(cumulative[:, column]), width,
                                out=np.zeros_like(width), where=width > 0)
            watts[name] = self.idle_w[name] + dynamic
        return edges, watts

    def power_over_time(self, bins: int = 200) -> tuple[np.ndarray, np.ndarray]:
        """``(edges, watts)``: average power in ``bins`` equal slices of the run (edges
        in seconds, ``bins + 1`` of them)."""
        edges = np.linspace(0.0, self.seconds, max(1, bins) + 1)
        energy = self.energy_until(edges)
        width = np.diff(edges)
        watts = np.divide(np.diff(energy), width, out=np.zeros_like(width), where=width > 0)
        return edges, watts

    def peak_power_w(self, bins: int = 100) -> float:
        """The highest average power over ``bins`` equal slices of the run."""
        return float(self.power_over_time(bins)[1].max()) if self.seconds else 0.0

    def window_power_w(self, window_s: float) -> float:
        """The highest average power over any window of ``window_s`` seconds (sampled
        every half window); the whole run's average if it is shorter."""
        if self.seconds <= window_s or window_s <= 0:
            return self.average_power_w
        starts = np.arange(0.0, self.seconds - window_s, window_s / 2)
        starts = np.append(starts, self.seconds - window_s)
        energy = self.energy_until(starts + window_s) - self.energy_until(starts)
        return float(energy.max() / window_s)


def command_energy(op: Op, engine: str, timing_links: tuple[int, ...], nbytes: float,
                   dram_bytes: int, link_names: tuple[str, ...], config: NpuConfig,
                   table: EnergyTable) -> np.ndarray:
    """Dynamic energy (pJ) of one command, per component."""
    out = np.zeros(len(COMPONENTS))
    if isinstance(op, MatMul):
        macs = math.prod(op.a.shape) * op.columns
        matrix = config.core.matrix
        out[_COMPONENT["arrays"]] = (macs * passes(op.a.dtype, matrix)
                                     * table.mac_pj[mac_dtype(op, matrix)])
        out[_COMPONENT["sram"]] = sum(ref.nbytes * _sram_pj(ref.space, table)
                                      for _, ref in sram_operands(op))
    elif engine_kind(engine) == "vpu":
        cls = vector.op_class(op)
        cost = getattr(config.core.vector.costs, cls)
        out[_COMPONENT["vector"]] = vector.arithmetic_ops(op) * cost * table.vector_op_pj
        out[_COMPONENT["sram"]] = vector.streamed_bytes(op) * table.scratchpad_pj_per_byte
    for link in timing_links:
        name = link_names[link]
        component = next(c for prefix, c in _LINK_COMPONENT if name.startswith(prefix))
        moved = dram_bytes if component == "dram" and dram_bytes else nbytes
        out[_COMPONENT[component]] += moved * _link_pj(name, table)
    return out


def mac_dtype(op: MatMul, matrix: MatrixConfig) -> str:
    """The dtype a matmul's MACs cost as: a narrow input the array has a mode for
    (``core.matrix.rates``) runs on the narrow datapath; anything else on the array's
    native one (wider inputs in passes, narrower ones widened on the way in)."""
    dtype = op.a.dtype.rate_name  # e4m3 and e5m2 both run in the fp8 mode
    if dtype in NARROW_DTYPES and getattr(matrix.rates, dtype):
        return dtype
    return matrix.input_dtype


def _sram_pj(space: str, table: EnergyTable) -> float:
    return table.shared_sram_pj_per_byte if space == SHARED else table.scratchpad_pj_per_byte


def _link_pj(name: str, table: EnergyTable) -> float:
    if name.startswith("dram"):
        return table.dram_pj_per_byte
    if name.startswith("noc."):
        return table.noc_pj_per_byte_hop
    if name.startswith("shared"):
        return table.shared_sram_pj_per_byte
    if name.startswith("sram"):
        return table.scratchpad_pj_per_byte
    return table.host_link_pj_per_byte


_CACHE: dict[int, tuple[weakref.ref, RunEnergy]] = {}


def run_energy(result: SimResult) -> RunEnergy:
    """The energy and power of ``result`` (computed once per result object)."""
    key = id(result)
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is result:
        return hit[1]
    energy = _account(result)
    _CACHE[key] = (weakref.ref(result), energy)
    weakref.finalize(result, _CACHE.pop, key, None)
    return energy


def _account(result: SimResult) -> RunEnergy:
    config = result.config
    plan = plan_for(result.program, config, verify=False)
    table = energy_table(config)
    commands = result.program.commands
    kinds = np.asarray(plan.kinds, dtype=np.intp)
    n_kinds = len(plan.timings)
    per_kind = np.zeros((n_kinds, len(COMPONENTS)))
    if len(kinds):
        _, first = np.unique(kinds, return_index=True)
        for k, i in zip(kinds[first].tolist(), first.tolist()):
            t = plan.timings[k]
            per_kind[k] = command_energy(commands[i].op, commands[i].engine, t.links,
                                         t.nbytes, t.dram_read + t.dram_written,
                                         plan.link_names, config, table)
    per_kind *= PJ
    kind_total = per_kind.sum(axis=1)
    command_j = kind_total[kinds]
    engine_names = list(plan.queues)
    engine_of = np.asarray(plan.engine_index, dtype=np.intp)
    engine_sum = np.bincount(engine_of, weights=command_j, minlength=len(engine_names)) \
        if len(kinds) else np.zeros(len(engine_names))
    component = np.bincount(kinds, minlength=n_kinds) @ per_kind
    clock = config.clock_hz
    seconds = result.total_cycles / clock
    # what the units not simulated add: their window's energy, scaled like its cycles
    extension_j = 0.0
    spans: list[tuple[float, float, np.ndarray]] = []  # (start s, end s, J per component)
    for part in result.extensions:
        ext = part.extension
        lo, hi = ext.window
        if hi <= lo or not ext.cycles:
            continue
        inside = (result.ends > lo) & (result.ends <= hi)
        scale = ext.cycles / (hi - lo)
        component = component + scale * (np.bincount(kinds[inside], minlength=n_kinds)
                                          @ per_kind)
        engine_sum = engine_sum + scale * np.bincount(
            engine_of[inside], weights=command_j[inside], minlength=len(engine_names))
        added = scale * (np.bincount(kinds[inside], minlength=n_kinds) @ per_kind)
        extension_j += float(added.sum())
        spans.append((ext.first_cycle / clock, ext.last_cycle / clock, added))
    static_w = static_power_w(config)
    static_j, idle_by_component, gated = _static(result, static_w, seconds)
    joules = per_kind[kinds]  # per command and component
    if gated:  # a gated engine's wake power while it runs, on its component
        wake = np.array([gated.get(e, 0.0) for e in engine_names])[engine_of]
        column = np.array([_COMPONENT["arrays" if engine_kind(e) == "mxu" else "vector"]
                           for e in engine_names], dtype=np.intp)[engine_of]
        joules[np.arange(len(kinds)), column] += wake * (result.ends - result.starts) / clock
    spread = _spread(result, joules, spans)
    timeline = _timeline(spread, seconds)
    return RunEnergy(
        config=config, seconds=seconds, command_j=command_j,
        dynamic_j=MappingProxyType(dict(zip(COMPONENTS, component.tolist()))),
        static_j=static_j,
        engine_j=MappingProxyType(dict(zip(engine_names, engine_sum.tolist()))),
        static_w=static_w, idle_power_w=sum(idle_by_component.values()),
        extension_j=extension_j, idle_w=idle_by_component, _timeline=timeline,
        _spread=spread)


def _static(result: SimResult, static_w: Mapping[str, float], seconds: float
            ) -> tuple[Mapping[str, float], Mapping[str, float], dict[str, float]]:
    """Static energy and idle power per component, and per gated engine the extra
    power it draws while busy."""
    config = result.config
    power = config.power
    energy = {name: watts * seconds for name, watts in static_w.items()}
    idle = dict(static_w)
    gated: dict[str, float] = {}
    if power.gating == "compute" and seconds:
        engines = {"arrays": [e for e in config.engines if engine_kind(e) == "mxu"],
                   "vector": [e for e in config.engines if engine_kind(e) == "vpu"]}
        for name in GATEABLE:
            share = static_w[name] / len(engines[name])
            busy = sum(result.engine_busy_cycles.get(e, 0) for e in engines[name])
            awake = (1 - power.gated_fraction) * share
            energy[name] = (power.gated_fraction * static_w[name] * seconds
                            + awake * busy / config.clock_hz)
            idle[name] = power.gated_fraction * static_w[name]
            gated.update({e: awake for e in engines[name]})
    return MappingProxyType(energy), MappingProxyType(idle), gated


def _spread(result: SimResult, joules: np.ndarray,
            spans: list[tuple[float, float, np.ndarray]]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Starts, ends (seconds, at least a cycle long) and energy per component of every
    command (``joules``: a row each) and of each extension, placed after the trace."""
    clock = result.config.clock_hz
    starts = result.starts.astype(np.float64) / clock
    ends = np.maximum(result.ends.astype(np.float64), result.starts + 1.0) / clock
    for lo, hi, added in spans:
        starts, ends = np.append(starts, lo), np.append(ends, max(hi, lo + 1 / clock))
        joules = np.vstack((joules, added))
    return starts, ends, joules


def _timeline(spread: tuple[np.ndarray, np.ndarray, np.ndarray], seconds: float
              ) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints and the cumulative variable energy at them: each piece's energy
    spread evenly over its duration (exact, so ∫ power dt is the energy)."""
    starts, ends, joules = spread
    rate = joules.sum(axis=1) / (ends - starts)
    times = np.concatenate(([0.0], starts, ends, [max(seconds, float(ends.max(initial=0)))]))
    delta = np.concatenate(([0.0], rate, -rate, [0.0]))
    order = np.argsort(times, kind="stable")
    times, delta = times[order], delta[order]
    power = np.cumsum(delta)[:-1]
    return times, np.concatenate(([0.0], np.cumsum(power * np.diff(times))))


def _energy_at(edges: np.ndarray, starts: np.ndarray, ends: np.ndarray,
               joules: np.ndarray) -> np.ndarray:
    """Cumulative energy per component (a column each) at each of the sorted ``edges``:
    what the pieces that ended before an edge spent, plus the share of the ones it
    cuts. Work grows with the pieces and the edges inside them, not pieces x edges."""
    n_edges, n_parts = len(edges), joules.shape[1]
    done_at = np.searchsorted(edges, ends, side="left")  # first edge at or after the end
    out = np.zeros((n_edges + 1, n_parts))
    for column in range(n_parts):
        out[:, column] = np.bincount(done_at, weights=joules[:, column],
                                     minlength=n_edges + 1)
    out = np.cumsum(out, axis=0)[:n_edges]
    first = np.searchsorted(edges, starts, side="right")  # edges strictly inside
    inside = np.maximum(done_at - first, 0)
    if inside.any():
        piece = np.repeat(np.arange(len(starts)), inside)
        offset = np.arange(len(piece)) - np.repeat(np.cumsum(inside) - inside, inside)
        edge = first[piece] + offset
        share = (edges[edge] - starts[piece]) / (ends[piece] - starts[piece])
        for column in range(n_parts):
            out[:, column] += np.bincount(edge, weights=joules[piece, column] * share,
                                          minlength=n_edges)
    return out


__all__ = ["RunEnergy", "command_energy", "run_energy"]
