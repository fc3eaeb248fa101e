"""Chrome trace-event JSON of a run, for ui.perfetto.dev (or chrome://tracing).

Layout: one process per core (``core N``) plus ``chip`` for the task DMA, host DMA and
host; one thread (track) per engine that ran a command, named like a vendor profiler
(``neural engine mxu0``, ``neural engine vector``, ``neural DMA 0``, ``task DMA``, ``host DMA``,
``host``). Each command is one complete event (``ph: X``) with ``ts``/``dur`` in
microseconds converted from cycles at the chip clock; its ``args`` hold the command id,
op, source, operands (shapes) and bytes. Dependencies between different engines are
flow arrows (``ph: s`` on the producer's slice, ``ph: f`` with ``bp: e`` on the
consumer's). Metadata events name and order processes and threads.

An extended run (layers or matmul panels counted but not simulated,
:mod:`reports.extended`) has one more process, ``extended (not simulated)``, with a
track per extension and one slice per unit not simulated (``layers.5 (extended)``),
after the simulated trace, so the trace spans the run's whole latency; each slice's
``args`` say what it stands for and the busy cycles per engine it adds.

Power over time (:mod:`reports.energy`) is a counter track (``ph: C``) in its own
process, ``power``; each command's ``args`` carry its dynamic energy (``energy_j``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from compiler.ir.ops import engine_core, engine_kind
from reports.data import ReportData, ResultLike, report_data
from reports.energy import power_counter_events

_CHIP_THREADS = {"tdma": "task DMA", "hdma": "host DMA", "host": "host"}


def track_name(engine: str) -> str:
    """The profiler-style track name of an engine (``core0.mxu1`` -> ``neural engine
    mxu1``)."""
    if engine in _CHIP_THREADS:
        return _CHIP_THREADS[engine]
    kind = engine_kind(engine)
    unit = engine.partition(".")[2]
    if kind == "dma":
        return f"neural DMA {unit.removeprefix('dma')}"
    if kind == "mxu":
        return f"neural engine {unit}"
    if kind == "vpu":
        return "neural engine vector"
    return engine


def _pid(engine: str, cores: int) -> int:
    core = engine_core(engine)
    return core + 1 if core is not None else cores + 1


def perfetto_trace(result: ResultLike) -> dict[str, Any]:
    """The trace as a JSON-ready dict (``{"traceEvents": [...], ...}``)."""
    data = report_data(result)
    engines = list(data.used_engines)
    tids = {engine: i + 1 for i, engine in enumerate(engines)}
    events: list[dict[str, Any]] = _metadata(data, engines, tids)
    us = 1e6 / data.clock_hz
    by_id = {c.id: c for c in data.commands}
    flow_id = 0
    for c in data.commands:
        pid, tid = _pid(c.engine, data.cores), tids[c.engine]
        events.append({
            "name": f"{c.op} {c.source}".rstrip(), "cat": c.kind, "ph": "X",
            "ts": c.start * us, "dur": c.cycles * us, "pid": pid, "tid": tid,
            "args": {"command": c.id, "op": c.op, "source": c.source, "engine": c.engine,
                     "operands": c.operands, "bytes": c.bytes, "flops": c.flops,
                     "cycles": c.cycles, "deps": list(c.deps), "energy_j": c.energy_j},
        })
        for d in c.deps:
            producer = by_id[d]
            if producer.engine == c.engine:
                continue
            flow_id += 1
            events.append({"name": "dependency", "cat": "dependency", "ph": "s", "id": flow_id,
                           "ts": producer.start * us, "pid": _pid(producer.engine, data.cores),
                           "tid": tids[producer.engine]})
            events.append({"name": "dependency", "cat": "dependency", "ph": "f", "bp": "e",
                           "id": flow_id, "ts": c.start * us, "pid": pid, "tid": tid})
    events.extend(_extended_events(data))
    if data.energy is not None:  # a counter track of power over time, its own process
        events.extend(power_counter_events(data.energy, pid=data.cores + 3))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"program": data.program_name, "config": data.config_name,
                      "clock_hz": data.clock_hz, "total_cycles": data.total_cycles,
                      "simulated_cycles": data.total_cycles - data.extended_cycles,
                      "extended": [span.label for span in data.extended]},
    }


def _extended_events(data: ReportData) -> list[dict[str, Any]]:
    """The extensions' process, tracks and one slice per unit not simulated."""
    if not data.extended:
        return []
    pid = data.cores + 2
    us = 1e6 / data.clock_hz
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
         "args": {"name": "extended (not simulated)"}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
         "args": {"sort_index": pid}}]
    for tid, span in enumerate(data.extended, start=1):
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"name": span.label}})
        per_unit = {e: round(b / span.units) for e, b in span.busy_cycles.items() if b}
        note = (f"not simulated: each {span.unit} adds the mean of the simulated middle "
                f"{span.unit}s (trace cycles {span.window[0]:,}-{span.window[1]:,}); "
                f"in the model these run before the last simulated {span.unit}, drawn "
                f"here after the trace")
        for i in range(span.units):
            start, end = span.unit_bounds(i)
            events.append({
                "name": span.unit_label(i), "cat": "extended", "ph": "X",
                "ts": start * us, "dur": (end - start) * us, "pid": pid, "tid": tid,
                "args": {"extended": span.label, "cycles": end - start, "note": note,
                         "busy_cycles_per_engine": per_unit}})
    return events


def _metadata(data: ReportData, engines: list[str], tids: dict[str, int]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for pid in sorted({_pid(e, data.cores) for e in engines}):
        name = f"core {pid - 1}" if pid <= data.cores else "chip"
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
    for engine in engines:
        pid, tid = _pid(engine, data.cores), tids[engine]
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"name": track_name(engine)}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"sort_index": tid}})
    return events


def export_perfetto(result: ResultLike, path: str | os.PathLike[str]) -> None:
    """Write :func:`perfetto_trace` to ``path`` (open it in ui.perfetto.dev)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(perfetto_trace(result), f)


__all__ = ["export_perfetto", "perfetto_trace", "track_name"]
