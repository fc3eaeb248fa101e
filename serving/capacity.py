"""The cheapest hardware that serves a workload within its SLOs (``archsim serve
--cheapest``): candidate (config, chip count) pairs, each served in full with the same
arrivals, tried from the cheapest up; the first that meets the SLOs is the answer.

A candidate's cost is one of :data:`COSTS`: the chips themselves, their silicon area
(:func:`archsim.area.area_mm2`) or their power budget (``power.tdp_w``), times the chip
count. Chips are tensor-parallel (``--tp N``), so each layer is split N ways; a count the
model's heads do not divide is listed as such and skipped. A candidate whose weights do
not fit, or that leaves no room for a KV cache, is listed with its error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from archsim.config.model import NpuConfig
from archsim.errors import ArchsimError, ModelConfigError
from serving.engine import IterationTime
from serving.metrics import Slo
from serving.plan import Parallelism
from serving.spec import ModelSpec
from serving.traffic import ServeOptions, Server, TrafficResult
from serving.workload import Arrival


def _area(config: NpuConfig) -> float:
    from archsim.area import area_mm2

    return sum(area_mm2(config).values())


def _tdp(config: NpuConfig) -> float:
    tdp = config.power.tdp_w
    if tdp is None:
        raise ModelConfigError(f"--cost tdp: preset {config.name!r} states no power.tdp_w")
    return tdp


COSTS: dict[str, tuple[str, Callable[[NpuConfig], float]]] = {
    "chips": ("chips", lambda config: 1.0),
    "area": ("mm2", _area),
    "tdp": ("W", _tdp),
}
"""Cost name -> (unit, cost of one chip of a config)."""


@dataclass(frozen=True)
class Candidate:
    config: NpuConfig
    chips: int
    cost: float
    status: str
    """``meets``, ``misses``, ``not tried`` (a cheaper one met the SLOs) or the error."""
    result: TrafficResult | None = None

    @property
    def met(self) -> bool:
        return self.status == "meets"


def cheapest(model: ModelSpec | str, configs: Sequence[NpuConfig], chip_counts: Sequence[int],
             arrivals: Sequence[Arrival], slo: Slo, options: ServeOptions | None = None,
             cost: str = "chips",
             timing: Callable[[NpuConfig, int], IterationTime] | None = None
             ) -> tuple[Candidate | None, list[Candidate]]:
    """The cheapest (config, chips) meeting ``slo`` on ``arrivals``, and every candidate
    in cost order (ties: fewer chips, then the order of ``configs``). ``timing(config,
    chips)`` replaces the simulator's iteration times (tests)."""
    if slo.ttft_ms is None and slo.tpot_ms is None:
        raise ModelConfigError("--cheapest needs an SLO: --slo-ttft MS and/or --slo-tpot MS")
    if cost not in COSTS:
        raise ModelConfigError(f"unknown cost {cost!r}: expected one of {', '.join(COSTS)}")
    per_chip = COSTS[cost][1]
    order = sorted(((per_chip(config) * n, n, i, config) for i, config in enumerate(configs)
                    for n in chip_counts), key=lambda c: c[:3])
    found: Candidate | None = None
    tried: list[Candidate] = []
    for price, n, _, config in order:
        if found is not None:
            tried.append(Candidate(config, n, price, "not tried"))
            continue
        try:
            server = Server.build(model, config, Parallelism(tp=n), options,
                                  timing(config, n) if timing else None)
            result = server.run(arrivals, slo)
        except ArchsimError as exc:
            tried.append(Candidate(config, n, price, str(exc).splitlines()[0]))
            continue
        candidate = Candidate(config, n, price,
                              "meets" if result.summary.slo_attained else "misses", result)
        tried.append(candidate)
        if candidate.met:
            found = candidate
    return found, tried


__all__ = ["COSTS", "Candidate", "cheapest"]
