"""The shape of a saved ``result.json``, checked before :func:`reports.from_json` builds
reports from it: every field it reads has the type its dataclass field says
(:class:`~reports.data.ReportData`, :class:`~reports.data.CommandRecord`,
:class:`~reports.energy.EnergySummary`, :class:`~reports.extended.ExtendedSpan`), so an
edited or damaged file is refused naming the field (``run.total_cycles is 'x': expected
an integer``) instead of failing inside a report.
"""

from __future__ import annotations

import itertools
import operator
import typing
from collections.abc import Callable, Mapping
from types import NoneType, UnionType
from typing import Any

from reports.data import CommandRecord, ReportData
from reports.energy import EnergySummary
from reports.extended import ExtendedSpan

Check = Callable[[Any], bool]

_TRACE_EXTRA: dict[str, Any] = {"operands": str, "reads": tuple[tuple[str, int, int], ...],
                                "writes": tuple[tuple[str, int, int], ...],
                                "energy_j": float}
"""Trace columns that are no plain CommandRecord field, and the type of one entry."""
_OPTIONAL_TRACE = ("energy_j",)
_CURVE = {"edges_s": tuple[float, ...], "watts": tuple[float, ...]}
"""``energy.power_over_time``: EnergySummary's ``power_edges_s`` and ``power_w``."""
_MAX_SHOWN = 3


def check_document(document: Any, run_fields: tuple[str, ...],
                   trace_fields: tuple[str, ...]) -> None:
    """Raise a ValueError naming the first few fields of ``document`` that are missing or
    of the wrong type (``run_fields``/``trace_fields``: those :func:`from_json` needs)."""
    if not isinstance(document, Mapping):
        raise ValueError(f"expected a JSON object, got {type(document).__name__}")
    problems = _run(document.get("run"), run_fields)
    problems += _engines(document.get("engines"))
    problems += _section(document.get("sram"), "sram", _hints(ReportData),
                         {"peak_bytes": "sram_peak_bytes",
                          "capacity_bytes": "sram_capacity_bytes"})
    problems += _trace(document.get("trace"), trace_fields)
    if not problems:  # the types hold: now what reports rely on between commands
        problems += _timeline(document["trace"])
    problems += _energy(document.get("energy"))
    problems += _extended(document.get("extended", []))
    if problems:
        more = len(problems) - _MAX_SHOWN
        raise ValueError("; ".join(problems[:_MAX_SHOWN])
                         + (f"; and {more} more" if more > 0 else ""))


def _run(run: Any, required: tuple[str, ...]) -> list[str]:
    if not isinstance(run, Mapping):
        return [_wrong("run", run, dict)]
    hints = _hints(ReportData)
    problems = [f"run.{name}: missing" for name in required if name not in run]
    for name, value in run.items():
        if name in hints and name in (*required, *_OPTIONAL_RUN):
            problem = _problem(value, hints[name], f"run.{name}")
            if problem:
                problems.append(problem)
    clock = run.get("clock_hz")
    if not problems and clock <= 0:
        problems.append(f"run.clock_hz is {clock!r}: expected > 0")
    return problems


_OPTIONAL_RUN = ("matrix_precision", "layers", "tiles", "dram_efficiency", "kernels",
                 "runtime_overhead_cycles", "integer_matmuls", "choices")
"""Run fields from_json reads when present (older files lack them)."""


def _engines(engines: Any) -> list[str]:
    if not isinstance(engines, Mapping):
        return [_wrong("engines", engines, dict)]
    problems = [_problem(engines.get("names"), tuple[str, ...], "engines.names")]
    if "busy_cycles" in engines:
        problems.append(_problem(engines["busy_cycles"], tuple[int, ...],
                                 "engines.busy_cycles"))
    return [p for p in problems if p]


def _trace(trace: Any, fields: tuple[str, ...]) -> list[str]:
    if not isinstance(trace, Mapping):
        return [_wrong("trace", trace, dict)]
    hints = {**_hints(CommandRecord), **_TRACE_EXTRA}
    problems = []
    for name in (*fields, "reads", "writes", *_OPTIONAL_TRACE):
        if name not in trace:
            if name not in _OPTIONAL_TRACE:
                problems.append(f"trace.{name}: missing")
            continue
        column = trace[name]
        if not isinstance(column, list):
            problems.append(_wrong(f"trace.{name}", column, list))
            continue
        if _all_of_types(column, hints[name]):
            continue
        ok = _predicate(hints[name])
        bad = next((i for i, value in enumerate(column) if not ok(value)), None)
        if bad is not None:
            problems.append(_wrong(f"trace.{name}[{bad}]", column[bad], hints[name]))
    return problems


def _timeline(trace: Mapping[str, list[Any]]) -> list[str]:
    """Commands named once, dependencies naming commands, no command ending before it
    starts or starting before cycle 0."""
    ids, problems = trace["id"], []
    lengths = {len(trace[name]) for name in ("id", "deps", "start", "end")}
    if len(lengths) > 1:
        return [f"trace columns have different lengths: {sorted(lengths)}"]
    if len(set(ids)) != len(ids):
        problems.append("trace.id: a command id appears twice")
    unknown = set(itertools.chain.from_iterable(trace["deps"])) - set(ids)
    if unknown:
        problems.append(f"trace.deps: {len(unknown)} dependencies name no command "
                        f"(e.g. {min(unknown)})")
    bad = next((i for i, (start, end) in enumerate(zip(trace["start"], trace["end"]))
                if not 0 <= start <= end), None)
    if bad is not None:
        problems.append(f"trace: command {ids[bad]} runs from cycle {trace['start'][bad]} "
                        f"to {trace['end'][bad]}: expected 0 <= start <= end")
    return problems


_TYPES: dict[Any, frozenset[type]] = {int: frozenset({int}), float: frozenset({int, float}),
                                      str: frozenset({str}), bool: frozenset({bool})}
"""The JSON value types a scalar field takes (``type(True)`` is bool, not int)."""


def _all_of_types(values: list[Any], hint: Any) -> bool:
    """A fast yes for a column of scalars, of lists of them, or of lists of fixed lists of
    them (a trace has an entry per command, millions on a large model; the loops are
    map and set, in C); False: look closer."""
    if hint in _TYPES:
        return set(map(type, values)) <= _TYPES[hint]
    if typing.get_origin(hint) is not tuple or not set(map(type, values)) <= {list}:
        return False
    args = typing.get_args(hint)
    if len(args) == 2 and args[1] is Ellipsis:
        return _all_of_types(list(itertools.chain.from_iterable(values)), args[0])
    if not all(arg in _TYPES for arg in args) or set(map(len, values)) - {len(args)}:
        return False
    return all(_all_of_types(list(map(operator.itemgetter(k), values)), arg)
               for k, arg in enumerate(args))


def _energy(energy: Any) -> list[str]:
    if energy is None:
        return []
    if not isinstance(energy, Mapping):
        return [_wrong("energy", energy, dict)]
    hints = {name: hint for name, hint in _hints(EnergySummary).items()
             if name not in ("power_edges_s", "power_w")}
    problems = _section(energy, "energy", hints, {name: name for name in hints},
                        optional=("area_mm2", "power_by_component"))
    return problems + _section(energy.get("power_over_time"), "energy.power_over_time",
                               _CURVE, {name: name for name in _CURVE})


def _extended(items: Any) -> list[str]:
    if not isinstance(items, list):
        return [_wrong("extended", items, list)]
    hints = _hints(ExtendedSpan)
    problems: list[str] = []
    for i, item in enumerate(items):
        problems += _section(item, f"extended[{i}]", hints, {name: name for name in hints},
                             optional=("busy_cycles",))
    return problems


def _section(data: Any, path: str, hints: Mapping[str, Any], names: Mapping[str, str],
             optional: tuple[str, ...] = ()) -> list[str]:
    """``data[key]`` against ``hints[names[key]]`` for every key of ``names``."""
    if not isinstance(data, Mapping):
        return [_wrong(path, data, dict)]
    problems = []
    for key, field in names.items():
        if key not in data:
            if key not in optional:
                problems.append(f"{path}.{key}: missing")
            continue
        problem = _problem(data[key], hints[field], f"{path}.{key}")
        if problem:
            problems.append(problem)
    return problems


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _problem(value: Any, hint: Any, path: str) -> str | None:
    return None if _predicate(hint)(value) else _wrong(path, value, hint)


def _predicate(hint: Any) -> Check:
    """Whether a JSON value is what a field of type ``hint`` holds (objects for
    mappings, lists for tuples; unknown hints accept anything)."""
    if hint is bool:
        return lambda v: isinstance(v, bool)
    if hint is int:
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if hint is float:
        return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    if hint is str:
        return lambda v: isinstance(v, str)
    if hint is NoneType:
        return lambda v: v is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, UnionType):
        checks = [_predicate(a) for a in args]
        return lambda v: any(check(v) for check in checks)
    if origin is Mapping or origin is dict:
        key, item = _predicate(args[0]), _predicate(args[1])
        return lambda v: isinstance(v, dict) and all(key(k) and item(x) for k, x in v.items())
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _predicate(args[0])
            return lambda v: isinstance(v, list) and all(item(x) for x in v)
        items = [_predicate(a) for a in args]
        return lambda v: (isinstance(v, list) and len(v) == len(items)
                          and all(check(x) for check, x in zip(items, v)))
    return lambda v: True


def _wrong(path: str, value: Any, hint: Any) -> str:
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f"{path} is {shown}: expected {_describe(hint)}"


def _describe(hint: Any) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
             NoneType: "null", dict: "an object", list: "a list"}
    if hint in names:
        return names[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin is Mapping or origin is dict:
        return f"an object of {_plural(args[1])}"
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_plural(args[0])}"
        return f"a list [{', '.join(_describe(a) for a in args)}]"
    return str(hint)


def _plural(hint: Any) -> str:
    plain = {bool: "booleans", int: "integers", float: "numbers", str: "strings"}
    return plain.get(hint, f"({_describe(hint)})")


__all__ = ["check_document"]
