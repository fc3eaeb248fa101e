"""Text and trace reports of a :class:`~torch_bridge.profiler.ProfileResult`: pure
functions of the session (no torch)."""

from __future__ import annotations

from typing import Any

from reports.perfetto import perfetto_trace as run_trace
from reports.text import (
    format_bytes,
    format_count,
    format_cycles,
    format_si,
    format_table,
    format_us,
    percent,
)
from torch_bridge.profiler import SORT_KEYS, OpRecord, ProfileResult

_KIND_NAMES = {"mxu": "matrix", "vpu": "vector", "dma": "neural DMA", "tdma": "task DMA",
               "hdma": "host DMA", "host": "host CPU"}
_MAX_NOTE = 70


def summary_text(session: ProfileResult) -> str:
    """Latency split by kind of work, FLOP/s and utilization over the simulated runs,
    DRAM traffic, and the host work with why it ran there."""
    config, total = session.config, session.total_cycles
    graphs = sum(1 for e in session.events if e.run is not None and e.run.sources)
    runs = len(session.runs)
    host_events = sum(1 for e in session.events if e.event.kind == "host")
    copies = [e.event for e in session.events if e.event.kind == "transfer"]
    inside = session.host_cycles_inside_runs
    lines = [
        f"Profile on {config.name} ({config.clock_hz / 1e9:g} GHz): "
        f"{len(session.events)} events, {format_cycles(total)} cycles = "
        f"{format_us(session.seconds)}",
        f"  device    {format_cycles(session.device_cycles):>14} cycles "
        f"{percent(session.device_cycles, total):>6}  ({runs} simulated runs: "
        f"{runs - graphs} eager ops, {graphs} compiled graphs"
        + (f"; {format_cycles(inside)} cycles in host nodes of graphs" if inside else "")
        + ")",
        f"  host      {format_cycles(session.cycles('host')):>14} cycles "
        f"{percent(session.cycles('host'), total):>6}  ({host_events} ops on the host)",
        f"  transfer  {format_cycles(session.transfer_cycles):>14} cycles "
        f"{percent(session.transfer_cycles, total):>6}  ({len(copies)} host<->device copies, "
        f"{format_bytes(sum(e.bytes for e in copies))})",
    ]
    if session.runtime_cycles:
        lines.append(_runtime_line(session))
    device_s = config.cycles_to_seconds(sum(r.total_cycles for r in session.runs))
    if device_s:
        achieved = session.matmul_flops / device_s
        lines.append(f"matrix FLOP/s   {format_si(achieved, 'FLOP/s')} of "
                     f"{format_si(config.peak_flops, 'FLOP/s')} peak "
                     f"({percent(achieved, config.peak_flops)}) over the simulated runs")
        dram = session.dram_bytes_read + session.dram_bytes_written
        bandwidth = dram / device_s
        lines.append(f"DRAM            read {format_bytes(session.dram_bytes_read)}, written "
                     f"{format_bytes(session.dram_bytes_written)}; "
                     f"{format_si(bandwidth, 'B/s')} of "
                     f"{format_si(config.dram_bandwidth_bytes_per_s, 'B/s')}")
        used = ", ".join(f"{_KIND_NAMES.get(k, k)} {100 * u:.1f}%"
                         for k, u in session.utilization.items() if u)
        lines.append(f"utilization     {used or 'no engine busy'}")
    lines.append(f"host link       {format_bytes(session.host_link_bytes)} moved")
    host = session.host_work
    if host:
        rows = [(r.name, str(r.calls), format_cycles(r.host_cycles),
                 percent(r.host_cycles, total), _clip("; ".join(r.notes) or "no npu kernel"))
                for r in host]
        lines.append("host work:\n" + format_table(
            ("op", "calls", "cycles", "of total", "why on the host"), rows, align="lrrrl"))
    return "\n".join(lines)


def _runtime_line(session: ProfileResult) -> str:
    """The runtime's launches and dispatches: their share and what they are made of."""
    runtime, total = session.config.runtime, session.total_cycles
    launches = sum(1 for e in session.events if e.event.kind == "runtime")
    return (f"  runtime   {format_cycles(session.runtime_cycles):>14} cycles "
            f"{percent(session.runtime_cycles, total):>6}  (runtime overhead: {launches} "
            f"calls at {runtime.op_dispatch_us:g} us dispatch + {runtime.kernel_launch_us:g} "
            f"us a kernel launch, config {session.config.name!r})")


def table_text(session: ProfileResult, sort: str = "time", top: int | None = None) -> str:
    """The per-op table (see :meth:`torch_bridge.profile.table`)."""
    records = sorted_records(session, sort, top)
    total = session.total_cycles
    us = 1e6 / session.config.clock_hz
    runtime = bool(session.runtime_cycles)  # a column only when the config has a runtime
    cells = [(
        _clip(r.name, 40), str(r.calls), f"{r.device_cycles * us:.2f}",
        f"{r.host_cycles * us:.2f}", f"{r.transfer_cycles * us:.2f}",
        *((f"{r.runtime_cycles * us:.2f}",) if runtime else ()),
        percent(r.total_cycles, total), format_count(r.flops), format_bytes(r.bytes),
    ) for r in records]
    headers = ("op", "calls", "device us", "host us", "transfer us",
               *(("runtime us",) if runtime else ()), "of total", "FLOPs", "bytes")
    title = (f"Ops by {sort} ({len(records)} of {len(session.ops)}); session "
             f"{format_cycles(total)} cycles = {format_us(session.seconds)}")
    return f"{title}\n" + format_table(headers, cells, align="l" + "r" * (len(headers) - 1))


def sorted_records(session: ProfileResult, sort: str = "time",
                   top: int | None = None) -> list[OpRecord]:
    """:attr:`ProfileResult.ops` sorted by ``sort``, the ``top`` first."""
    if sort not in SORT_KEYS:
        raise ValueError(f"unknown sort {sort!r}; choose one of {', '.join(SORT_KEYS)}")
    if top is not None and top < 0:
        raise ValueError(f'"top" must be >= 0, got {top}')
    records = sorted(session.ops, key=SORT_KEYS[sort])
    return records[:top] if top is not None else records


_STREAM_PID = 0
"""Process of the session's stream: one slice per timeline event."""


def perfetto_trace(session: ProfileResult) -> dict[str, Any]:
    """One Chrome trace of the session: a ``stream`` track with every event (eager op,
    compiled graph, host op, copy) and, under the chip's processes, the commands of each
    simulated run shifted to where the run sits on the device timeline."""
    us = 1e6 / session.config.clock_hz
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": _STREAM_PID, "tid": 0,
         "args": {"name": "npu stream"}},
        {"name": "process_sort_index", "ph": "M", "pid": _STREAM_PID, "tid": 0,
         "args": {"sort_index": -1}},
    ]
    tracks = {"device": 1, "host": 2, "transfer": 3, "runtime": 4}  # runtime: overhead
    for kind, tid in tracks.items():
        if kind == "runtime" and not session.runtime_cycles:
            continue
        events.append({"name": "thread_name", "ph": "M", "pid": _STREAM_PID, "tid": tid,
                       "args": {"name": "runtime overhead" if kind == "runtime" else kind}})
    threads: dict[tuple[int, str], int] = {}
    named: set[tuple[int, int]] = set()
    flow_base = 0
    for item in session.events:
        event = item.event
        start = (event.start_cycle - session.start_cycle) * us
        events.append({"name": event.op, "cat": event.kind, "ph": "X", "ts": start,
                       "dur": event.cycles * us, "pid": _STREAM_PID,
                       "tid": tracks[event.kind],
                       "args": {"cycles": event.cycles, "bytes": event.bytes,
                                "flops": event.flops, "note": event.note}})
        if item.run is None:
            continue
        flow_base = _add_run(events, item.run.result, start, event.op, threads, named,
                             flow_base)
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"config": session.config.name,
                          "clock_hz": session.config.clock_hz,
                          "total_cycles": session.total_cycles}}


def _add_run(out: list[dict[str, Any]], result: Any, offset_us: float, label: str,
             threads: dict[tuple[int, str], int], named: set[tuple[int, int]],
             flow_base: int) -> int:
    """Append one run's trace shifted by ``offset_us``; threads are merged across runs
    by (process, name) and flow ids kept unique. Returns the next free flow id."""
    trace = run_trace(result)["traceEvents"]
    local_names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace
                   if e.get("name") == "thread_name"}
    last_flow = flow_base
    for e in trace:
        if e["ph"] == "M":
            if e["name"] in ("process_name", "process_sort_index") and \
                    (e["pid"], -1) not in named:
                out.append(e)
                if e["name"] == "process_sort_index":
                    named.add((e["pid"], -1))
            continue
        key = (e["pid"], local_names[(e["pid"], e["tid"])])
        tid = threads.get(key)
        if tid is None:
            tid = threads[key] = len(threads) + 1
            out.append({"name": "thread_name", "ph": "M", "pid": e["pid"], "tid": tid,
                        "args": {"name": key[1]}})
        shifted = {**e, "ts": e["ts"] + offset_us, "tid": tid}
        if "id" in e:
            shifted["id"] = e["id"] + flow_base
            last_flow = max(last_flow, shifted["id"])
        if e["ph"] == "X":
            shifted["args"] = {**e["args"], "run": label}
        out.append(shifted)
    return last_flow


def _clip(text: str, width: int = _MAX_NOTE) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


__all__ = ["perfetto_trace", "sorted_records", "summary_text", "table_text"]
