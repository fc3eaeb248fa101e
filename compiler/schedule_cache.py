"""Compiled schedules kept for reuse, least recently used dropped first.

``compile_graph`` looks schedules up by (graph, shapes, dtypes, folded constants,
config, options). A schedule is kept without the weights and graph it was compiled
from (those belong to the caller and are bound again on a hit), and the cache holds at
most :data:`MAX_COMMANDS` commands in all (about 1 KB of host memory each; the newest
schedule is always kept), so a long session of sweeps or models does not grow without
bound.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Generic, Protocol, TypeVar

MAX_COMMANDS = 1_000_000


class _Sized(Protocol):
    @property
    def program(self) -> Any: ...


T = TypeVar("T", bound=_Sized)


class ScheduleCache(Generic[T]):
    def __init__(self, max_commands: int = MAX_COMMANDS) -> None:
        self.max_commands = max_commands
        self._entries: OrderedDict[Hashable, T] = OrderedDict()
        self._commands = 0

    def get(self, key: Hashable) -> T | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: Hashable, entry: T) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._commands -= len(old.program.commands)
        self._entries[key] = entry
        self._commands += len(entry.program.commands)
        while len(self._entries) > 1 and self._commands > self.max_commands:
            _, dropped = self._entries.popitem(last=False)
            self._commands -= len(dropped.program.commands)

    def clear(self) -> None:
        self._entries.clear()
        self._commands = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def commands(self) -> int:
        return self._commands


__all__ = ["MAX_COMMANDS", "ScheduleCache"]
