"""The part of an extended run that was not simulated, as reports show it.

A performance-only run may simulate the first layers of a stack of identical layers,
or the first panels of a large matmul, and extend the totals to the whole
(:mod:`archsim.repeated`). The trace then covers only the simulated part. Each
extension is an :class:`ExtendedSpan`: its units are placed on the timeline after the
simulated trace (and after any extension applied before), and reports split their
time the way the simulated middle units they repeat split theirs (their *window* of
the trace), scaled to the extension's cycles. Busy cycles are the result's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from archsim.result import RepeatedLayers, RepeatedTiles

K = TypeVar("K")


@dataclass(frozen=True)
class ExtendedSpan:
    """Units of a run (layers of a stack, panels of a matmul) counted in its totals but
    not simulated."""

    name: str
    """The stack's module path (``model.layers``) or the matmul kernel (``mm``)."""
    unit: str
    """``layer`` or ``panel``."""
    first_unit: int
    """Index of the first unit not simulated (the number simulated)."""
    units: int
    """Units not simulated."""
    unit_cycles: int
    """Cycles each adds (the mean of the middle simulated units)."""
    start_cycle: int
    """Where they are placed on the run's timeline (after the simulated trace)."""
    cycles: int
    """Cycles they add to the run's latency."""
    window: tuple[int, int]
    """Trace cycles of the simulated middle units they repeat."""
    busy_cycles: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Busy cycles they add, per engine."""

    @property
    def end_cycle(self) -> int:
        return self.start_cycle + self.cycles

    @property
    def label(self) -> str:
        """``model.layers.3-31 (29 layers, extended)``, ``mm panels 3-63 (61 panels,
        extended)``."""
        last = self.first_unit + self.units - 1
        indices = str(self.first_unit) if self.units == 1 else f"{self.first_unit}-{last}"
        where = (f"{self.name}.{indices}" if self.unit == "layer"
                 else f"{self.name} {self.unit}s {indices}")
        plural = "" if self.units == 1 else "s"
        return f"{where} ({self.units} {self.unit}{plural}, extended)"

    def unit_label(self, index: int) -> str:
        """The ``index``-th extended unit (0-based): ``model.layers.5 (extended)``."""
        number = self.first_unit + index
        where = (f"{self.name}.{number}" if self.unit == "layer"
                 else f"{self.name} {self.unit} {number}")
        return f"{where} (extended)"

    def unit_bounds(self, index: int) -> tuple[int, int]:
        """Start and end cycle of the ``index``-th unit (they tile the span exactly)."""
        def at(i: int) -> int:
            return self.start_cycle + (self.cycles * i) // self.units

        return at(index), at(index + 1)

    @property
    def window_cycles(self) -> int:
        return self.window[1] - self.window[0]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "unit": self.unit, "first_unit": self.first_unit,
                "units": self.units, "unit_cycles": self.unit_cycles,
                "start_cycle": self.start_cycle, "cycles": self.cycles,
                "window": list(self.window), "busy_cycles": dict(self.busy_cycles),
                "label": self.label}

    @staticmethod
    def from_json(item: Mapping[str, Any]) -> ExtendedSpan:
        return ExtendedSpan(
            name=item["name"], unit=item["unit"], first_unit=int(item["first_unit"]),
            units=int(item["units"]), unit_cycles=int(item["unit_cycles"]),
            start_cycle=int(item["start_cycle"]), cycles=int(item["cycles"]),
            window=(int(item["window"][0]), int(item["window"][1])),
            busy_cycles=MappingProxyType({k: int(v) for k, v in item["busy_cycles"].items()}))


def extended_spans(parts: Iterable[RepeatedLayers | RepeatedTiles]) -> tuple[ExtendedSpan, ...]:
    """The extensions of a result (``SimResult.extensions``) as spans."""
    from archsim.result import RepeatedLayers

    spans = []
    for part in parts:
        ext = part.extension
        if part.simulated >= part.total:
            continue
        layers = isinstance(part, RepeatedLayers)
        spans.append(ExtendedSpan(
            name=part.path if layers else part.kernel, unit="layer" if layers else "panel",
            first_unit=part.simulated, units=part.total - part.simulated,
            unit_cycles=part.layer_cycles if layers else part.panel_cycles,
            start_cycle=ext.first_cycle, cycles=ext.cycles, window=tuple(ext.window),
            busy_cycles=MappingProxyType(dict(ext.busy_cycles))))
    return tuple(spans)


def overlap(start: int, end: int, window: tuple[int, int]) -> int:
    """Cycles of ``[start, end)`` inside ``window``."""
    return max(0, min(end, window[1]) - max(start, window[0]))


def apportion(total: int, weights: Mapping[K, float]) -> dict[K, int]:
    """``total`` split in proportion to ``weights`` into integers that sum to it exactly
    (largest remainders get the leftover cycles); empty when every weight is 0."""
    whole = sum(weights.values())
    if whole <= 0 or total == 0:
        return {}
    exact = {k: total * w / whole for k, w in weights.items()}
    parts = {k: int(v) for k, v in exact.items()}
    leftover = total - sum(parts.values())
    for k in sorted(exact, key=lambda k: parts[k] - exact[k])[:leftover]:
        parts[k] += 1
    return {k: v for k, v in parts.items() if v}


__all__ = ["ExtendedSpan", "apportion", "extended_spans", "overlap"]
