"""The emitter's DRAM write index answers exactly like a scan of every write."""

from __future__ import annotations

import random

import pytest

from compiler.dram_index import Box, BoxIndex, overlap
from compiler.ir.operands import Slice


def _box(rng: random.Random, shape: tuple[int, ...]) -> Box:
    slices = []
    for n in shape:
        start = rng.randrange(n + 1)
        stop = rng.randrange(start, n + 1) if rng.random() < 0.9 else start  # some empty
        slices.append(Slice(start, stop))
    return tuple(slices)


@pytest.mark.parametrize("tail", [BoxIndex.TAIL, 2])
def test_matches_a_scan_of_every_write(tail: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(BoxIndex, "TAIL", tail)  # 2: remembered answers also go stale
    rng = random.Random(7)
    for shape in ((1, 300, 40), (4096, 16), (1,), (7, 1, 9), (1, 5, 700, 3)):
        index = BoxIndex(shape)
        writes: list[tuple[Box, int]] = []
        queries: list[Box] = []
        for cid in range(600):
            if rng.random() < 0.4:
                box = _box(rng, shape) if rng.random() < 0.9 else tuple(
                    Slice(0, n) for n in shape)  # whole-tensor writes are kept aside
                index.add(box, cid)
                writes.append((box, cid))
            # asking again for earlier boxes uses (and must refresh) remembered answers
            query = rng.choice(queries) if queries and rng.random() < 0.5 else _box(rng, shape)
            queries.append(query)
            expected = {c for box, c in writes if overlap(box, query)}
            assert index.overlapping(query) == expected
        assert index.all() == {c for _, c in writes}


def test_rank_zero_tensor() -> None:
    index = BoxIndex(())
    index.add((), 3)
    assert index.overlapping(()) == {3}
