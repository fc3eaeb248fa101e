"""The race check's per-space byte-interval history (``compiler.ir.verify_races``), on
its own: hand-derived cases for the in-place fast paths, then a seeded sequence of
writes and reads checked byte by byte against a plain list of per-byte histories.

Each byte's history is (last writer, latest reader per engine since); how the bytes are
cut into intervals is free, so the checks compare per-byte histories and the old
histories returned with runs of equal ones merged."""

from __future__ import annotations

import random

from compiler.ir.verify_races import _UNTOUCHED, _SpaceHistory, _with_reader

ENGINE_OF = [0, 0, 1, 1, 2, 2, 0, 1, 2, 0, 1, 2] * 4
"""Engine index of each command position."""


def per_byte(space: _SpaceHistory, size: int) -> list:
    """Each byte's history (untouched bytes: ``_UNTOUCHED``)."""
    out = [_UNTOUCHED] * size
    for start, end, history in zip(space.starts, space.ends, space.histories):
        assert start < end, "an empty interval"
        out[start:end] = [history] * (end - start)
    return out


def merged(histories) -> list:
    """Runs of equal histories as one."""
    out: list = []
    for h in histories:
        if not out or out[-1] != h:
            out.append(h)
    return out


def test_a_write_inside_an_interval_keeps_the_rest() -> None:
    space = _SpaceHistory()
    a, b = ((0, "dst"), ()), ((1, "dst"), ())
    assert list(space.write(0, 8, a)) == []
    assert list(space.write(0, 4, b)) == [a]  # same start, shorter: not the fast path
    assert per_byte(space, 8) == [b] * 4 + [a] * 4
    assert list(space.write(2, 6, a)) == [b, a]
    assert per_byte(space, 8) == [b] * 2 + [a] * 6


def test_a_read_across_a_gap_records_the_reader_in_the_gap() -> None:
    space = _SpaceHistory()
    a = ((0, "dst"), ())
    space.write(0, 4, a)
    space.write(6, 8, a)
    reader = (2, "src")
    # [0, 8) starts and ends where intervals do, but [4, 6) was never written
    assert list(space.read(0, 8, reader, ENGINE_OF)) == [a, _UNTOUCHED, a]
    assert per_byte(space, 8) == [((0, "dst"), (reader,))] * 4 + [(None, (reader,))] * 2 \
        + [((0, "dst"), (reader,))] * 2


def test_a_read_of_a_buffer_written_in_pieces_sees_every_piece() -> None:
    space = _SpaceHistory()
    a, b = ((0, "dst"), ()), ((1, "dst"), ())
    space.write(0, 4, a)
    space.write(4, 8, b)
    reader = (2, "src")
    assert list(space.read(0, 8, reader, ENGINE_OF)) == [a, b]
    assert per_byte(space, 8) == [((0, "dst"), (reader,))] * 4 + [((1, "dst"), (reader,))] * 4


def test_a_reader_replaces_the_earlier_reader_of_its_engine_only() -> None:
    # commands 2 and 3 run on engine 1, command 4 on engine 2
    history = ((0, "dst"), ((2, "src"),))
    assert _with_reader(history, (3, "src"), ENGINE_OF) == ((0, "dst"), ((3, "src"),))
    assert _with_reader(history, (4, "src"), ENGINE_OF) == ((0, "dst"), ((2, "src"), (4, "src")))
    both = ((0, "dst"), ((2, "src"), (4, "src")))
    assert _with_reader(both, (5, "a"), ENGINE_OF) == ((0, "dst"), ((2, "src"), (5, "a")))


def test_random_writes_and_reads_match_a_per_byte_model() -> None:
    rng = random.Random(34)
    size = 24
    for _ in range(40):
        space = _SpaceHistory()
        model = [_UNTOUCHED] * size
        for p in range(len(ENGINE_OF)):
            # aligned accesses make the fast paths (same interval, pieces) common
            start = rng.randrange(0, size, rng.choice((1, 4)))
            end = rng.randrange(start + 1, size + 1)
            if rng.random() < 0.5:
                want = [h for h in model[start:end] if h is not _UNTOUCHED]
                got = space.write(start, end, ((p, "dst"), ()))
                model[start:end] = [((p, "dst"), ())] * (end - start)
            else:
                want = model[start:end]
                got = space.read(start, end, (p, "src"), ENGINE_OF)
                model[start:end] = [_with_reader(h, (p, "src"), ENGINE_OF)
                                    for h in model[start:end]]
            assert merged(got) == merged(want), (p, start, end)
            assert per_byte(space, size) == model, (p, start, end)
