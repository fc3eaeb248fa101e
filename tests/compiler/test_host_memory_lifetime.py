"""What the compiler and simulator keep between runs: a simulated program is freed with
its result, the schedule cache is bounded in commands and holds no weights, and large
programs leave the cyclic collector's hot generations."""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import torch

import archsim
from compiler import compile as compile_module
from compiler.byte_map import ByteMap
from compiler.ir import collector
from compiler.schedule_cache import ScheduleCache


def test_a_result_and_its_program_are_freed_once_the_schedule_cache_drops_it() -> None:
    model = torch.nn.Linear(32, 32)
    result = archsim.estimate(model, torch.randn(4, 32), "tiny")
    program = weakref.ref(result.program)
    del result
    gc.collect()
    assert program() is not None  # the schedule is cached for the next call
    compile_module.clear_cache()
    gc.collect()
    assert program() is None  # nothing else (the plan cache) holds it


def test_the_schedule_cache_keeps_no_weights_or_graph() -> None:
    model = torch.nn.Linear(24, 24)
    exported = torch.export.export(model, (torch.randn(2, 24),))
    from archsim.config import load_config

    compiled = compile_module.compile_graph(exported, load_config("tiny"))
    assert compiled.bound and compiled.reference is not None
    cached = compile_module._CACHE.get(next(reversed(compile_module._CACHE._entries)))
    assert cached is not None and cached.program is compiled.program
    assert not cached.bound and cached.reference is None


def _entry(commands: int) -> SimpleNamespace:
    return SimpleNamespace(program=SimpleNamespace(commands=[None] * commands))


def test_the_schedule_cache_drops_the_least_recently_used_past_its_commands() -> None:
    cache: ScheduleCache[SimpleNamespace] = ScheduleCache(max_commands=10)
    cache.put("a", _entry(4))
    cache.put("b", _entry(4))
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("c", _entry(4))  # 12 > 10: b goes
    assert (cache.get("b"), len(cache), cache.commands) == (None, 2, 8)
    cache.put("huge", _entry(50))  # the newest is kept even alone over the bound
    assert (len(cache), cache.commands) == (1, 50)


def test_byte_map_cuts_at_the_query_so_neighbours_stay_apart() -> None:
    space = ByteMap()
    space.write(0, 100, command=1)
    space.write(50, 150, command=2)  # overwrites [50, 100)
    assert [(r.start, r.end, r.writer) for r in space.inside(0, 200)] == [
        (0, 50, 1), (50, 150, 2)]
    reads = space.inside(40, 60)
    assert [(r.start, r.end, r.writer) for r in reads] == [(40, 50, 1), (50, 60, 2)]
    for r in reads:
        r.readers["core0.vpu"] = 3
    assert [(r.start, r.end, dict(r.readers)) for r in space.inside(0, 150)] == [
        (0, 40, {}), (40, 50, {"core0.vpu": 3}), (50, 60, {"core0.vpu": 3}), (60, 150, {})]
    assert space.inside(150, 300) == []


def test_a_pause_that_made_many_objects_freezes_them(monkeypatch) -> None:
    monkeypatch.setattr(collector, "FREEZE_AFTER", 1000)
    before = gc.get_freeze_count()
    try:
        with collector.paused():
            kept = [[i] for i in range(5000)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= before + len(kept)
    finally:
        gc.unfreeze()



def test_a_pause_before_the_process_exits_freezes_what_it_made() -> None:
    """Not collected on leaving (the walk the process's exit makes pointless), frozen so
    no later collection walks it either; an ordinary small pause freezes nothing."""
    before = gc.get_freeze_count()
    with collector.paused():
        kept = [[i] for i in range(5000)]  # far fewer than FREEZE_AFTER
    assert gc.get_freeze_count() == before
    try:
        with collector.paused(exiting=True):
            kept += [[i] for i in range(5000)]
            assert not gc.isenabled()
        assert gc.isenabled()
        assert gc.get_freeze_count() >= before + 5000
    finally:
        gc.unfreeze()


def test_a_command_run_for_the_console_script_freezes_what_it_made() -> None:
    from archsim.cli import main

    before = gc.get_freeze_count()
    try:
        assert main(["run", "gemm", "--seq", "64", "--quiet"]) == 0
        assert gc.get_freeze_count() == before  # in-process: the heap is left as it was
        assert main(["run", "gemm", "--seq", "64", "--quiet"], exiting=True) == 0
        assert gc.isenabled() and gc.get_freeze_count() > before
    finally:
        gc.unfreeze()


def test_an_estimate_sets_off_one_collection_at_most() -> None:
    """Export, compile and simulate are one pause: torch.export's allocations no longer
    set off the collector (190 walks on Llama-2-70B), only the pause's end may."""
    from compiler_models import GPT2Block

    collections = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    with torch.device("meta"):
        model = GPT2Block(64, 4)
    archsim.estimate(model, torch.randn(1, 8, 64, device="meta"), "tiny")  # imports done
    gc.callbacks.append(count)
    try:
        archsim.estimate(model, torch.randn(1, 16, 64, device="meta"), "tiny")
        during = list(collections)
    finally:
        gc.callbacks.remove(count)
    assert len(during) <= 1, during  # the young objects' one walk as the pause ends
