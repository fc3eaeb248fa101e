"""The emitter's DRAM and SRAM indexes answer exactly like the plain scans they replace."""

from __future__ import annotations

import random

import pytest

from compiler.byte_map import ByteMap
from compiler.dram_index import Box, BoxIndex, overlap
from compiler.ir.operands import Slice
from compiler.sram_index import SramSpace


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


def test_sram_space_answers_like_a_byte_map() -> None:
    """The emitter's SRAM record with its fast path for exact hits keeps ByteMap's
    records (empty ranges included)."""
    rng = random.Random(3)
    fast, plain = SramSpace(), ByteMap()
    slots = [(rng.randrange(0, 512, 16), rng.choice((0, 16, 64, 128))) for _ in range(20)]
    for cid in range(3000):
        start, size = rng.choice(slots) if rng.random() < 0.8 else (
            rng.randrange(600), rng.randrange(100))
        if rng.random() < 0.5:
            fast.write(start, start + size, cid)
            plain.write(start, start + size, cid)
        else:
            got, expected = fast.inside(start, start + size), plain.inside(start, start + size)
            assert [(r.start, r.end, r.writer) for r in got] == [
                (r.start, r.end, r.writer) for r in expected]
            for a, b in zip(got, expected):
                a.readers["e"] = b.readers["e"] = cid
    assert [(r.start, r.end, r.writer, r.readers) for r in fast._records] == [
        (r.start, r.end, r.writer, r.readers) for r in plain._records]


def test_the_emitters_operand_regions_are_those_of_the_access_tables() -> None:
    """The emitter reads SRAM operands through its per-class field table, with the
    byte ends computed inline: the same regions as ``access.reads``/``access.writes``
    and ``SramRef.intervals`` (Scalars skipped, an accumulating MatMul's ``out`` read, a
    strided ref's rows, or its span when its last dim is not contiguous), and the same
    DRAM boxes as ``access.dram_refs``."""
    from archsim.config import load_config
    from compiler.emit import _FIELDS, Emitter
    from compiler.ir import access
    from compiler.ir.dtypes import DType
    from compiler.ir.operands import DramRef, Scalar, SramRef
    from compiler.ir.ops import Binary, BinaryKind, Load, MatMul, Store

    def ref(offset: int, shape: tuple[int, ...], strides: tuple[int, ...] | None = None,
            space: str = "sram0") -> SramRef:
        return SramRef(space, offset, shape, DType.f32, strides)

    box = DramRef("x", (Slice(0, 4), Slice(0, 8)))
    ops = [
        MatMul(ref(0, (4, 8)), ref(128, (8, 4)), ref(256, (4, 4)), accumulate=True),
        MatMul(ref(0, (4, 8)), ref(128, (8, 4)), ref(256, (4, 4))),
        Binary(BinaryKind.add, Scalar(2.0), ref(64, (3, 5), (16, 1), "shared"),
               ref(1024, (3, 5))),
        Binary(BinaryKind.mul, ref(0, (3, 5), (0, 1)), Scalar(1.0), ref(0, (3, 5))),
        Binary(BinaryKind.mul, ref(0, (3, 5), (8, 2)), Scalar(1.0), ref(0, (3, 5))),
        Load(box, ref(512, (4, 8))),
        Store(ref(512, (4, 8), (16, 1)), box),
    ]
    emitter = Emitter("p", load_config("tiny"))
    for op in ops:
        fields = _FIELDS[type(op)]
        got_reads = emitter._regions(op, fields.reads, fields.accumulates)
        got_writes = emitter._regions(op, fields.writes, False)
        for got, refs in ((got_reads, access.reads(op)), (got_writes, access.writes(op))):
            assert [(start, end) for _, start, end in got] == [
                run for r in refs for run in r.intervals()]
            assert [space for space, _, _ in got] == [
                emitter._sram[r.space] for r in refs for _ in r.intervals()]
        boxes = tuple((name, getattr(op, name), is_write) for name, is_write in fields.dram)
        assert boxes == access.dram_refs(op)


def test_dma_engines_are_taken_in_turn_per_core_and_kind() -> None:
    """Loads take the engines but the last in turn, stores the last, other transfers
    all of them; each core and kind keeps its own turn."""
    import dataclasses

    from archsim.config import load_config
    from compiler.emit import Emitter

    config = load_config("tiny")
    config = dataclasses.replace(config, core=dataclasses.replace(
        config.core, dma=dataclasses.replace(config.core.dma, engines=3)))
    emitter = Emitter("p", config)
    got = [emitter.dma(core, kind) for core, kind in (
        (0, "load"), (0, "load"), (0, "load"), (1, "load"), (0, "store"), (0, "any"),
        (0, "any"), (0, "any"), (0, "any"), (1, "any"))]
    assert got == ["core0.dma0", "core0.dma1", "core0.dma0", "core1.dma0", "core0.dma2",
                   "core0.dma0", "core0.dma1", "core0.dma2", "core0.dma0", "core1.dma0"]


def test_sram_dependencies_match_a_per_byte_record() -> None:
    """The emitter's SRAM dependencies (RAW, WAR, WAW; same engine dropped) equal those
    of a record kept per written byte. Reads overlap each other and the write in part, so
    lookups cut records another operand of the same command got first (the emitter
    then looks those up again)."""
    from archsim.config import load_config
    from compiler.emit import Emitter
    from compiler.ir.dtypes import DType
    from compiler.ir.operands import SramRef
    from compiler.ir.ops import Binary, BinaryKind

    rng = random.Random(11)
    engines = ("core0.vpu", "core0.mxu0", "core0.dma0")
    emitter = Emitter("p", load_config("tiny"))
    writer: dict[int, int] = {}
    readers: dict[int, dict[str, int]] = {}

    def ref() -> SramRef:
        return SramRef("sram0", 4 * rng.randrange(24), (rng.randint(1, 6),), DType.f32)

    for cid in range(2000):
        engine = rng.choice(engines)
        a, b, dst = ref(), ref(), ref()
        read_bytes = {x for r in (a, b) for x in range(r.offset, r.end)}
        write_bytes = set(range(dst.offset, dst.end))
        expected = {writer[x] for x in read_bytes | write_bytes if x in writer}
        expected |= {c for x in write_bytes for c in readers.get(x, {}).values()}
        for x in read_bytes & writer.keys():  # bytes never written keep no record
            readers[x][engine] = cid
        for x in write_bytes:
            writer[x], readers[x] = cid, {}
        got = emitter.emit(engine, Binary(BinaryKind.add, a, b, dst), "t")
        assert got == cid
        command = emitter.builder._commands[cid]
        assert command.deps == tuple(sorted(
            c for c in expected if c != cid and emitter._engine_of[c] != engine))
