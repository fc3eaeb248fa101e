"""Memory-space assignment (:mod:`compiler.residency`) on small hand-written programs,
pinned where a mutation run found nothing checking it (issue 34): where in shared SRAM
each tensor lands (above the program's own use, the smallest free region, new space
only while it fits), which boxes count as one contiguous run, and which tensors stay
in DRAM because the host or a gather reads them.

Each program stores temps from a core's scratchpad and loads them back; the expected
shared SRAM offsets follow from the module's rules by hand (64-byte alignment, regions
reused once every access to the previous tensor happens before the next one's writes).
"""

from __future__ import annotations

import dataclasses

import pytest

from archsim.config import load_config
from compiler.ir.ops import Copy, Load, Program, Store
from compiler.ir.text import parse_program
from compiler.ir.verify import find_problems
from compiler.residency import keep_on_chip

TINY = load_config("tiny")  # 256 KiB of shared SRAM


def _program(tensors: list[str], commands: list[str]) -> Program:
    return parse_program("program p target=tiny\n"
                         + "".join(f"dram {t}\n" for t in tensors)
                         + "".join(f"{i}: {c}\n" for i, c in enumerate(commands)))


def _with_shared(size_bytes: int):
    return dataclasses.replace(TINY, shared_sram=dataclasses.replace(
        TINY.shared_sram, size_bytes=size_bytes))


def _offsets(program: Program, config=TINY) -> dict[int, int | None]:
    """Position of each load and store of a temp -> the shared SRAM offset its copy
    now uses (None: still a DRAM transfer)."""
    temps = {t.name for t in program.tensors if t.role == "temp"}
    placed = keep_on_chip(program, config)
    out: dict[int, int | None] = {}
    for p, (before, after) in enumerate(zip(program.commands, placed.commands)):
        if isinstance(before.op, (Load, Store)):
            ref = before.op.src if isinstance(before.op, Load) else before.op.dst
            if ref.tensor not in temps:
                continue
            op = after.op
            if isinstance(op, Copy):
                out[p] = (op.src if op.src.space == "shared" else op.dst).offset
            else:
                assert op == before.op
                out[p] = None
    return out


def _dram_temps(program: Program, config=TINY) -> set[str]:
    return {t.name for t in keep_on_chip(program, config).tensors if t.role == "temp"}


def test_a_temp_written_and_never_read_is_placed_and_its_region_reused() -> None:
    """%D has a single access (its store); %T's store is queued behind it on the same
    DMA engine, so %D is done before %T is written and %T takes the same region."""
    program = _program(["%D : f32[1,64] temp", "%T : f32[1,64] temp"], [
        "core0.dma1 store sram0[0x0] f32[1,64] -> %D[0:1, 0:64]",
        "core0.dma1 store sram0[0x0] f32[1,64] -> %T[0:1, 0:64] after 0",
        "core0.dma0 load %T[0:1, 0:64] -> sram0[0x100] f32[1,64] after 1",
    ])
    assert _offsets(program) == {0: 0, 1: 0, 2: 0}
    assert _dram_temps(program) == set()


# The program's own 100 bytes of shared SRAM; %A (256 B) and %B (64 B) live together;
# %C (64 B) written once both are read.
BASE_PROGRAM = (
    ["%A : f32[1,64] temp", "%B : f32[1,16] temp", "%C : f32[1,16] temp"],
    ["core0.dma0 copy sram0[0x0] f32[25] -> shared[0x0] f32[25]",
     "core0.dma1 store sram0[0x0] f32[1,64] -> %A[0:1, 0:64]",
     "core0.dma1 store sram0[0x100] f32[1,16] -> %B[0:1, 0:16]",
     "core1.dma0 load %A[0:1, 0:64] -> sram1[0x0] f32[1,64] after 1",
     "core1.dma0 load %B[0:1, 0:16] -> sram1[0x100] f32[1,16] after 2",
     "core0.dma1 store sram0[0x200] f32[1,16] -> %C[0:1, 0:16] after 3,4",
     "core1.dma0 load %C[0:1, 0:16] -> sram1[0x200] f32[1,16] after 5"],
)


def test_tensors_go_above_the_programs_own_shared_sram_and_reuse_the_smallest_region(
        ) -> None:
    """The program uses shared bytes 0-99: placement starts at the next 64-byte
    boundary, 128. %A takes 128-383; %B is written while %A is still to be read, so it
    takes new space at 384-447; %C fits both freed regions and takes the smaller,
    %B's, at 384."""
    program = _program(*BASE_PROGRAM)
    assert program.sram_high_water["shared"] == 100
    assert _offsets(program) == {1: 128, 2: 384, 3: 128, 4: 384, 5: 384, 6: 384}
    placed = keep_on_chip(program, TINY)
    assert find_problems(placed, TINY) == []
    assert placed.sram_high_water["shared"] == 448


def test_new_space_is_taken_up_to_the_last_byte_and_a_tensor_that_does_not_fit_is_skipped(
        ) -> None:
    """With exactly 448 bytes of shared SRAM everything above still fits. With 447 %B
    (384 + 64 = 448) does not: it stays in DRAM, and %C, after it, still takes %A's
    freed region."""
    program = _program(*BASE_PROGRAM)
    assert _offsets(program, _with_shared(448)) == {1: 128, 2: 384, 3: 128, 4: 384,
                                                    5: 384, 6: 384}
    assert _offsets(program, _with_shared(447)) == {1: 128, 2: None, 3: 128, 4: None,
                                                    5: 128, 6: 128}
    assert _dram_temps(program, _with_shared(447)) == {"B"}


def test_a_freed_region_too_small_for_the_next_tensor_is_not_reused() -> None:
    """%A (64 B) is done before %B (256 B) is written, but %B does not fit in its
    region: %B goes above it, at 64."""
    program = _program(["%A : f32[1,16] temp", "%B : f32[1,64] temp"], [
        "core0.dma1 store sram0[0x0] f32[1,16] -> %A[0:1, 0:16]",
        "core1.dma0 load %A[0:1, 0:16] -> sram1[0x0] f32[1,16] after 0",
        "core0.dma1 store sram0[0x100] f32[1,64] -> %B[0:1, 0:64] after 1",
        "core1.dma0 load %B[0:1, 0:64] -> sram1[0x100] f32[1,64] after 2",
    ])
    assert _offsets(program) == {0: 0, 1: 0, 2: 64, 3: 64}


def test_a_region_is_free_only_once_every_engines_accesses_precede_every_engines_writes(
        ) -> None:
    """Both cores read %A; core 0 writes its half of %B after both reads, but core 1
    writes its half after only %A's store: core 1's read of %A (command 2) and its
    write of %B (command 4) are unordered, so %B may not share %A's region (the
    shared SRAM race check would then fail)."""
    program = _program(["%A : f32[1,64] temp", "%B : f32[1,64] temp"], [
        "core0.dma1 store sram0[0x0] f32[1,64] -> %A[0:1, 0:64]",
        "core0.dma0 load %A[0:1, 0:64] -> sram0[0x100] f32[1,64] after 0",
        "core1.dma0 load %A[0:1, 0:64] -> sram1[0x0] f32[1,64] after 0",
        "core0.dma1 store sram0[0x200] f32[1,32] -> %B[0:1, 0:32] after 1,2",
        "core1.dma1 store sram1[0x100] f32[1,32] -> %B[0:1, 32:64] after 0",
    ])
    assert _offsets(program) == {0: 0, 1: 0, 2: 0, 3: 256, 4: 256 + 32 * 4}
    assert find_problems(keep_on_chip(program, TINY), TINY) == []


def test_tensors_the_host_or_a_gather_touches_stay_in_dram() -> None:
    """The host reads %X and writes %Y (neither through shared SRAM), %Z is sent to
    the host and %G is a gather's table: only %K, loaded and stored alone, moves."""
    program = _program(
        ["%X : f32[1,64] temp", "%Y : f32[1,64] temp", "%Z : f32[1,64] temp",
         "%G : f32[4,16] temp", "%K : f32[1,64] temp", "%I : i32[2] in"],
        ["core0.dma1 store sram0[0x0] f32[1,64] -> %X[0:1, 0:64]",
         "core0.dma1 store sram0[0x0] f32[1,64] -> %Y[0:1, 0:64]",
         "host host_op aten.cumsum.default (%X) -> (%Y) cycles=10 after 0,1",
         "core0.dma0 load %Y[0:1, 0:64] -> sram0[0x100] f32[1,64] after 2",
         "core0.dma1 store sram0[0x0] f32[1,64] -> %Z[0:1, 0:64] after 3",
         "hdma host_transfer to_host %Z[0:1, 0:64] after 4",
         "core0.dma1 store sram0[0x0] f32[4,16] -> %G[0:4, 0:16] after 5",
         "core0.dma0 load %I[0:2] -> sram0[0x200] i32[2]",
         "core0.dma0 gather %G[0:4, 0:16][sram0[0x200] i32[2]] -> sram0[0x300] f32[2,16] "
         "after 6,7",
         "core0.dma1 store sram0[0x0] f32[1,64] -> %K[0:1, 0:64] after 8",
         "core0.dma0 load %K[0:1, 0:64] -> sram0[0x100] f32[1,64] after 9"])
    assert _dram_temps(program) == {"X", "Y", "Z", "G"}
    assert _offsets(program) == {0: None, 1: None, 3: None, 4: None, 6: None, 9: 0,
                                 10: 0}


@pytest.mark.parametrize(("shape", "box", "offset"), [
    ("4,8", "0:4, 0:8", 0),
    ("4,8", "0:2, 0:8", 0),  # whole rows
    ("4,8", "2:4, 0:8", 2 * 8 * 4),
    ("4,8", "1:2, 2:6", (1 * 8 + 2) * 4),  # part of one row
    ("4,8", "1:2:2, 0:8", 1 * 8 * 4),  # a step over a single row moves nothing
    ("2,4,8", "1:2, 1:3, 0:8", (1 * 32 + 1 * 8) * 4),
    ("4,8", "0:2, 0:4", None),  # parts of two rows
    ("4,8", "0:4:2, 0:8", None),  # every other row
    ("4,8", "0:4, 0:8:2", None),  # every other column
    ("2,4,8", "0:2, 1:3, 0:8", None),  # rows 1-2 of both planes
])
def test_only_boxes_that_are_one_run_of_bytes_move_to_shared_sram(
        shape: str, box: str, offset: int | None) -> None:
    """A box is one run when it has full inner dims, then one partial dim, then dims of
    length 1; its copy starts at the box's first element (row-major) in the region."""
    dims = parse_program(f"program p\ndram %T : f32[{shape}] temp\n"
                         f"0: core0.dma0 load %T[{box}] -> sram0[0x0] f32[1]\n"
                         ).commands[0].op.src.shape
    tile = f"f32[{','.join(str(n) for n in dims)}]"
    program = _program([f"%T : f32[{shape}] temp"], [
        f"core0.dma1 store sram0[0x0] {tile} -> %T[{box}]",
        f"core0.dma0 load %T[{box}] -> sram0[0x200] {tile} after 0",
    ])
    assert _offsets(program) == {0: offset, 1: offset}
