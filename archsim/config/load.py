"""Loading and validating hardware descriptions.

YAML (or a plain dict) goes into the frozen dataclasses of :mod:`archsim.config.model`.
Every problem is collected — unknown keys, missing keys, wrong types, non-positive
sizes, impossible combinations — and raised once as a :class:`ConfigError` naming each
dotted path and value.
"""

from __future__ import annotations

import dataclasses
import decimal
import types
import typing
from dataclasses import fields, is_dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from archsim.config.model import (
    DATAFLOWS,
    TOPOLOGIES,
    MATRIX_ACCUMULATOR_DTYPES,
    MATRIX_INPUT_DTYPES,
    MatrixConfig,
    NpuConfig,
)
from archsim.config import bounds
from archsim.errors import ConfigError

DEFAULT_PRESET = "atom"
_PRESET_PACKAGE = "archsim.config.presets"

# Fields that may be zero (latencies, the runtime's software costs); every other
# number must be > 0.
_MAY_BE_ZERO_SUFFIXES = ("latency_cycles", "shared_sram.size_bytes")


def preset_names() -> tuple[str, ...]:
    """Names of the presets shipped with archsim, default first."""
    names = sorted(
        p.name.removesuffix(".yaml")
        for p in resources.files(_PRESET_PACKAGE).iterdir()
        if p.name.endswith(".yaml")
    )
    names.remove(DEFAULT_PRESET)
    return (DEFAULT_PRESET, *names)


def load_config(name_or_path: str | Path = DEFAULT_PRESET) -> NpuConfig:
    """Load a preset by name (``"atom"``, ``"tpu-v3"``...) or a YAML file by path."""
    text, source = _read_source(name_or_path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:  # its problem and where, on one line
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError([f"not valid YAML{where}: {what}"], source=source) from None
    if not isinstance(data, dict):
        raise ConfigError([f"top level must be a mapping, got {type(data).__name__}"], source)
    # Nothing is merged in: a preset's file is the whole chip, so a copy of it loaded by
    # path is the same chip as the preset loaded by name.
    return config_from_dict(data, source=source)


def _read_source(name_or_path: str | Path) -> tuple[str, str]:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError([f"no such file: {path}"], source=str(path))
        return path.read_text(), str(path)
    name = str(name_or_path)
    if name not in preset_names():
        raise ConfigError(
            [f"unknown preset {name!r}; presets: {', '.join(preset_names())}"], source=name
        )
    resource = resources.files(_PRESET_PACKAGE).joinpath(f"{name}.yaml")
    return resource.read_text(), f"preset {name}"


def config_from_dict(data: dict[str, Any], source: str = "config") -> NpuConfig:
    """Build an :class:`NpuConfig` from nested dicts, or raise one ConfigError."""
    problems: list[str] = []
    config = _build(NpuConfig, data, "", problems)
    if not problems:
        _check_combinations(config, problems)
    if problems:
        raise ConfigError(problems, source=source)
    return config


def config_to_dict(config: Any) -> dict[str, Any]:
    """Nested plain dicts, the inverse of :func:`config_from_dict`."""
    return dataclasses.asdict(config)


_CHECKED_CHOICES: dict[tuple[type, str], tuple] = {
    (MatrixConfig, "input_dtype"): tuple(MATRIX_INPUT_DTYPES),
    (MatrixConfig, "accumulator_dtype"): tuple(MATRIX_ACCUMULATOR_DTYPES),
}
"""String fields whose values :func:`_check_combinations` checks against a set."""


def choice_fields(cls: type = NpuConfig, path: str = "") -> list[tuple[str, tuple]]:
    """Every config field that takes one of a fixed set of values (a ``Literal``), with
    its values, by dotted path (``archsim configs --explain``)."""
    out: list[tuple[str, tuple]] = []
    for name, hint in typing.get_type_hints(cls).items():
        optional = [a for a in typing.get_args(hint) if a is not type(None)]
        if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(optional) == 1:
            hint = optional[0]
        if is_dataclass(hint):
            out += choice_fields(hint, _join(path, name))
        elif typing.get_origin(hint) is typing.Literal:
            out.append((_join(path, name), typing.get_args(hint)))
        elif (cls, name) in _CHECKED_CHOICES:  # strings checked against a set
            out.append((_join(path, name), _CHECKED_CHOICES[cls, name]))
    return out


def _build(cls: type, data: Any, path: str, problems: list[str]) -> Any:
    where = path or "<top>"
    if not isinstance(data, dict):
        problems.append(f"{where}: expected a mapping, got {data!r}")
        return None
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    for key in data:
        if key not in known:
            problems.append(
                f"{_join(path, str(key))}: unknown key (known: {', '.join(known)})"
            )
    values: dict[str, Any] = {}
    for name, f in known.items():
        field_path = _join(path, name)
        if name not in data:
            has_default = (f.default is not dataclasses.MISSING
                           or f.default_factory is not dataclasses.MISSING)
            if not has_default:
                problems.append(f"{field_path}: missing")
            continue
        values[name] = _convert(hints[name], data[name], field_path, problems)
    if problems:  # every failed conversion adds one; optional fields may be None
        # keep collecting problems in sibling blocks, but build nothing invalid
        return None
    return cls(**values)


def _convert(hint: Any, value: Any, path: str, problems: list[str]) -> Any:
    optional = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(optional) == 1:
        return None if value is None else _convert(optional[0], value, path, problems)
    if is_dataclass(hint):
        return _build(hint, value, path, problems)
    if typing.get_origin(hint) is typing.Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            problems.append(f"{path}: {value!r} is not one of {', '.join(map(str, allowed))}")
            return None
        return value
    if hint is str:
        if not isinstance(value, str) or not value:
            problems.append(f"{path}: expected a non-empty string, got {value!r}")
            return None
        return value
    if hint is int:
        whole = _integer_or_none(value)
        if whole is None:
            problems.append(f"{path}: expected an integer, got {value!r}")
            return None
        return _check_number(whole, path, problems)
    if hint is float:
        if isinstance(value, str):  # YAML 1.1 reads "1.0e9" (no exponent sign) as a string
            number = _float_or_none(value) if value.strip() else None
            if number is None:  # the text as typed, not the None it parsed to
                problems.append(f"{path}: expected a number, got {value!r}")
                return None
            value = number
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(f"{path}: expected a number, got {value!r}")
            return None
        return _check_number(float(value), path, problems)
    raise TypeError(f"config field {path} has unsupported type {hint!r}")


def _integer_or_none(value: Any) -> int | None:
    """An integer field's value: an int, or a number that is a whole one written as a
    float or in exponent form (``1e9``, ``1.2e9``, ``2.0e+9``). YAML 1.1 reads ``1e9``
    (no dot, no exponent sign) as a string, so --set, --grid and config files would
    otherwise take ``clock_hz: 1.0e+9`` but not ``clock_hz: 1e9``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if not isinstance(value, str):
        return None
    try:  # exactly, as decimal digits: no float rounding of large values
        number = decimal.Decimal(value.strip())
    except decimal.InvalidOperation:
        return None
    if not number.is_finite() or number.adjusted() > _MAX_DIGITS or \
            number != number.to_integral_value():
        return None  # (1e5000 would be 5,001 digits; 1e2000000 takes minutes to build)
    return int(number)


_MAX_DIGITS = 30
"""An integer field's value in exponent form has at most this many digits before the
point (no field takes one nearly that large; its bounds then name the range)."""


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _check_number(value: int | float, path: str, problems: list[str]) -> int | float | None:
    may_be_zero = path.endswith(_MAY_BE_ZERO_SUFFIXES) or path.startswith("runtime.") \
        or ".matrix.rates." in path  # 0: the array has no mode for that dtype
    if value < 0 or (value == 0 and not may_be_zero):
        bound = ">= 0" if may_be_zero else "> 0"
        problems.append(f"{path}: must be {bound}, got {value!r}")
        return None
    problem = bounds.check(path, value)  # finite, and what a real chip could have
    if problem is not None:
        problems.append(problem)
        return None
    return value


def _check_combinations(config: NpuConfig, problems: list[str]) -> None:
    matrix = config.core.matrix
    if matrix.dataflow not in DATAFLOWS:  # Literal already checked; kept for overrides
        problems.append(f"core.matrix.dataflow: {matrix.dataflow!r} is not one of "
                        f"{', '.join(DATAFLOWS)}")
    if matrix.input_dtype not in MATRIX_INPUT_DTYPES:
        problems.append(f"core.matrix.input_dtype: {matrix.input_dtype!r} is not one of "
                        f"{', '.join(MATRIX_INPUT_DTYPES)}")
    if matrix.accumulator_dtype not in MATRIX_ACCUMULATOR_DTYPES:
        problems.append(f"core.matrix.accumulator_dtype: {matrix.accumulator_dtype!r} is not "
                        f"one of {', '.join(MATRIX_ACCUMULATOR_DTYPES)}")
    integer_in = matrix.input_dtype == "i8"
    integer_acc = matrix.accumulator_dtype == "i32"
    if integer_in != integer_acc:
        problems.append(
            f"core.matrix.accumulator_dtype: {matrix.accumulator_dtype!r} cannot accumulate "
            f"input_dtype {matrix.input_dtype!r} (i8 needs i32, floats need f32)"
        )
    pad = config.core.scratchpad
    if pad.size_bytes % pad.banks:
        problems.append(f"core.scratchpad.banks: {pad.banks} does not divide "
                        f"size_bytes {pad.size_bytes}")
    dram = config.dram
    if dram.interleave_bytes % dram.access_granularity_bytes:
        problems.append(f"dram.interleave_bytes: {dram.interleave_bytes} is not a multiple of "
                        f"access_granularity_bytes {dram.access_granularity_bytes}")
    _check_interconnect(config, problems)


_TOPOLOGY_DIRECTIONS = {"ring": 2, "torus2d": 4, "torus3d": 6, "switch": 1}
"""Neighbour directions a chip's links are shared over, per topology."""


def _check_interconnect(config: NpuConfig, problems: list[str]) -> None:
    link = config.interconnect
    if link is None:
        return
    if link.topology not in TOPOLOGIES:
        problems.append(f"interconnect.topology: {link.topology!r} is not one of "
                        f"{', '.join(TOPOLOGIES)}")
        return
    directions = _TOPOLOGY_DIRECTIONS[link.topology]
    if link.links_per_chip < directions:
        problems.append(f"interconnect.links_per_chip: {link.topology} needs at least "
                        f"{directions} links per chip, got {link.links_per_chip}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
