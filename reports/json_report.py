"""JSON for machines: every number of the reports, and enough of the run to re-render
them without re-simulating (``archsim report result.json``).

``to_json(result)`` returns a dict of plain JSON types. Sections: ``run`` (totals and
peaks), ``engines`` (busy cycles and utilization per engine of the config), ``sram``,
``extended`` (the layers or matmul panels counted but not simulated, placed after
the trace), ``energy`` (:mod:`reports.energy`: joules per component and engine, power
over time; its headline figures are also in ``run``), ``sram``, ``ops`` (the per-op table), ``critical_path``, ``engine_time``
(idle reasons) and ``trace`` (one array per field, one entry per command in program
order). Only ``run``, ``engines`` (names, busy cycles), ``extended``, ``energy``, ``sram``
and ``trace`` are read back by :func:`from_json`; the other sections are derived and exist
for consumers that do not run Python.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from reports.critical_path import critical_path, engine_times
from reports.energy import EnergySummary
from reports.data import CommandRecord, Description, Region, ReportData, ResultLike, report_data
from reports.extended import ExtendedSpan
from reports.json_check import check_document
from reports.ops import op_rows

FORMAT = "archsim.report"
VERSION = 1

_RUN_FIELDS = ("program_name", "config_name", "clock_hz", "cores", "total_cycles",
               "functional", "peak_flops", "vector_peak_flops", "dram_bandwidth_bytes_per_s",
               "host_link_bandwidth_bytes_per_s", "matmul_flops", "flops", "dram_bytes_read",
               "dram_bytes_written", "host_link_bytes")
_TRACE_FIELDS = ("id", "engine", "op", "source", "deps", "start", "end", "bytes", "flops",
                 "dram_bytes", "uncontended_cycles", "operands")


def to_json(result: ResultLike) -> dict[str, Any]:
    data = report_data(result)
    run = {name: getattr(data, name) for name in (*_RUN_FIELDS, "matrix_precision", "layers",
                                                  "tiles", "dram_efficiency")}
    run.update(seconds=data.seconds, achieved_flops=data.achieved_flops,
               dram_bandwidth_used_bytes_per_s=data.dram_bandwidth_used_bytes_per_s)
    energy = data.energy
    if energy is not None:  # the headline figures; the whole summary under "energy"
        run.update(energy_j=energy.energy_j, average_power_w=energy.average_power_w,
                   idle_power_w=energy.idle_power_w, peak_power_w=energy.peak_power_w,
                   energy_per_inference_j=energy.energy_per_inference_j)
    run.update(kernels=data.kernels, runtime_overhead_cycles=data.runtime_overhead_cycles,
               choices=dict(data.choices), integer_matmuls=data.integer_matmuls)
    busy = data.engine_busy_cycles
    util = data.utilization
    path = critical_path(data)
    return {
        "format": FORMAT,
        "version": VERSION,
        "run": run,
        "engines": {"names": list(data.engines),
                    "busy_cycles": [busy[e] for e in data.engines],
                    "utilization": [util[e] for e in data.engines]},
        "extended": [span.to_json() for span in data.extended],
        "sram": {"peak_bytes": dict(data.sram_peak_bytes),
                 "capacity_bytes": dict(data.sram_capacity_bytes)},
        "ops": [_fields(row) | {"span_cycles": row.span_cycles,
                                "dram_over_compulsory": row.dram_over_compulsory}
                for row in op_rows(data)],
        "critical_path": {"length_cycles": path.length_cycles,
                          "commands": [s.command for s in path.steps],
                          "via": [s.via for s in path.steps]},
        "engine_time": [_fields(t) for t in engine_times(data)],
        "energy": energy.to_json() if energy is not None else None,
        "trace": _trace_columns(data.commands) | {
            "energy_j": [c.energy_j for c in data.commands]},
    }


def _fields(obj: Any) -> dict[str, Any]:
    """A flat dataclass's fields as plain JSON values."""
    return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def _plain(value: Any) -> Any:
    """Mappings (including MappingProxyType) to dicts, recursively."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _trace_columns(commands: tuple[CommandRecord, ...]) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {name: [] for name in _TRACE_FIELDS}
    columns["reads"] = []
    columns["writes"] = []
    for c in commands:
        for name in _TRACE_FIELDS:
            value = getattr(c, name)
            columns[name].append(list(value) if name == "deps" else value)
        columns["reads"].append([[r.space, r.offset, r.nbytes] for r in c.reads])
        columns["writes"].append([[r.space, r.offset, r.nbytes] for r in c.writes])
    return columns


def from_json(document: Mapping[str, Any]) -> ReportData:
    """The :class:`ReportData` saved by :func:`to_json` (text reports, figures and the
    Perfetto trace all work from it)."""
    if not isinstance(document, Mapping):
        raise ValueError(f"expected a JSON object, got {type(document).__name__}")
    if document.get("format") != FORMAT:
        raise ValueError(f"not an archsim report: format is {document.get('format')!r}, "
                         f"expected {FORMAT!r}")
    if document.get("version") != VERSION:
        raise ValueError(f"archsim report version {document.get('version')!r} is not "
                         f"supported (this archsim reads version {VERSION})")
    check_document(document, _RUN_FIELDS, _TRACE_FIELDS)  # names a field of a wrong type
    try:
        run = document["run"]
        trace = document["trace"]
        fields = {name: run[name] for name in _RUN_FIELDS}
        fields["matrix_precision"] = run.get("matrix_precision", "")
        fields["layers"] = run.get("layers", "")
        fields["tiles"] = run.get("tiles", "")
        fields["dram_efficiency"] = run.get("dram_efficiency", 1.0)
        fields["kernels"] = run.get("kernels", 0)
        fields["runtime_overhead_cycles"] = run.get("runtime_overhead_cycles", 0)
        fields["choices"] = dict(run.get("choices", {}))
        fields["integer_matmuls"] = run.get("integer_matmuls", False)
        engines = document["engines"]
        if "busy_cycles" in engines:  # the result's, over the whole run when extended
            fields["run_busy_cycles"] = MappingProxyType(
                dict(zip(engines["names"], engines["busy_cycles"])))
        fields["extended"] = tuple(ExtendedSpan.from_json(item)
                                   for item in document.get("extended", ()))
        if document.get("energy") is not None:
            fields["energy"] = EnergySummary.from_json(document["energy"])
        if document.get("ops") and document["ops"][0].get("compulsory_bytes") is not None:
            fields["compulsory_dram_bytes"] = MappingProxyType({
                row["source"]: row["compulsory_bytes"] for row in document["ops"]})
        command_j = trace.get("energy_j") or [0.0] * len(trace["id"])
        lengths = {len(trace[name]) for name in (*_TRACE_FIELDS, "reads", "writes")}
        if len(lengths) > 1:
            raise ValueError(f"trace columns have different lengths: {sorted(lengths)}")
        commands = tuple(
            CommandRecord(
                **{name: trace[name][i] for name in _TRACE_FIELDS
                   if name not in ("deps", "operands")},
                deps=tuple(trace["deps"][i]),
                energy_j=command_j[i],
                description=Description(
                    operands=trace["operands"][i],
                    reads=tuple(Region(*r) for r in trace["reads"][i]),
                    writes=tuple(Region(*r) for r in trace["writes"][i])),
            )
            for i in range(len(trace["id"]))
        )
        return ReportData(
            **fields,
            engines=tuple(document["engines"]["names"]),
            sram_peak_bytes=MappingProxyType(dict(document["sram"]["peak_bytes"])),
            sram_capacity_bytes=MappingProxyType(dict(document["sram"]["capacity_bytes"])),
            commands=commands,
        )
    except KeyError as exc:
        raise ValueError(f"archsim report is missing field {exc.args[0]!r}") from None


def write_json(result: ResultLike, path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(to_json(result), f)


def read_json(path: str | os.PathLike[str]) -> ReportData:
    with open(path, encoding="utf-8") as f:
        return from_json(json.load(f))


__all__ = ["FORMAT", "VERSION", "from_json", "read_json", "to_json", "write_json"]
