"""The verifier: valid programs pass; each check fails with a pinned message."""

from __future__ import annotations

import itertools
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from archsim.config import NpuConfig
from archsim.errors import ParseError, VerifyError
from compiler.ir.access import reads, sram_reads, sram_writes, writes
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramTensor, SramRef
from compiler.ir.ops import Command, Copy, MatMul, Op, Program, Unary, UnaryKind
from compiler.ir.text import load_program, parse_program
from compiler.ir.verify import find_problems, verify

VALID_EVERY_OP = """\
program every_op target=tiny
dram %x : f32[4,8] in
dram %w : f32[8,4] in
dram %y : f32[4,4] out
dram %h : f32[4,4] out
 0: hdma       host_transfer to_device %x[0:4, 0:8]
 1: hdma       host_transfer to_device %w[0:8, 0:4]
 2: core0.dma0 load   %x[0:4, 0:8] -> sram0[0x000000] f32[4,8] after 0
 3: tdma       load   %w[0:8, 0:4] -> shared[0x000000] f32[8,4] after 1
 4: core0.dma1 copy   shared[0x000000] f32[8,4] -> sram0[0x000100] f32[8,4] after 3
 5: core0.mxu0 matmul sram0[0x000000] f32[4,8], sram0[0x000100] f32[8,4] -> sram0[0x000200] f32[4,4] after 2,4
 6: core0.vpu  unary  exp sram0[0x000200] f32[4,4] -> sram0[0x000300] f32[4,4] after 5
 7: core0.vpu  binary gt sram0[0x000300] f32[4,4], 1.0 -> sram0[0x000400] bool[4,4]
 8: core0.vpu  select sram0[0x000400] bool[4,4], sram0[0x000300] f32[4,4], 0.0 -> sram0[0x000500] f32[4,4]
 9: core0.vpu  reduce max sram0[0x000500] f32[4,4] -> sram0[0x000600] f32[4,1] axis=1
10: core0.vpu  binary sub sram0[0x000500] f32[4,4], sram0[0x000600] f32[4,1] -> sram0[0x000700] f32[4,4]
11: core0.vpu  transpose sram0[0x000700] f32[4,4] -> sram0[0x000800] f32[4,4] perm=(1,0)
12: core0.vpu  cast   sram0[0x000800] f32[4,4] -> sram0[0x000900] f16[4,4]
13: core0.vpu  cast   sram0[0x000900] f16[4,4] -> sram0[0x000a00] f32[4,4]
14: core0.vpu  vcopy  sram0[0x000600] f32[4,1] -> sram0[0x000b00] f32[4,4]
15: core0.dma0 store  sram0[0x000a00] f32[4,4] -> %y[0:4, 0:4] after 13
16: host       host_op aten.cumsum.default (%y) -> (%h) cycles=1200 after 15
17: hdma       host_transfer to_host %h[0:4, 0:4] after 16
18: core1.dma0 load   %x[0:4:2, 0:8:2] -> sram1[0x000000] f32[2,4] after 0
19: core1.vpu  unary  neg sram1[0x000000] f32[2,4] -> sram1[0x000000] f32[2,4] after 18
20: core1.dma1 gather %w[0:8, 0:4] [sram1[0x000100] i64[3]] -> sram1[0x000200] f32[3,4]
"""


def problems_of(text: str, config: NpuConfig) -> list[str]:
    return find_problems(parse_program(text), config)


def program_with(*lines: str, tensors: str = "") -> str:
    return "program p target=tiny\n" + tensors + "\n".join(lines) + "\n"


class TestValid:
    def test_every_op_passes(self, tiny: NpuConfig) -> None:
        verify(parse_program(VALID_EVERY_OP), tiny)

    def test_pipeline_passes(self, tiny: NpuConfig,
                             make_pipeline_program: Callable[..., Program]) -> None:
        verify(make_pipeline_program(50), tiny)

    def test_order_through_another_engine_is_enough(self, tiny: NpuConfig) -> None:
        # 2 reads what 0 wrote; it does not depend on 0 directly, only through 1.
        verify(parse_program(program_with(
            "0: core0.vpu unary relu sram0[0x0] f32[4] -> sram0[0x10] f32[4]",
            "1: core0.dma0 copy sram0[0x40] f32[4] -> sram1[0x0] f32[4] after 0",
            "2: core0.dma1 copy sram0[0x10] f32[4] -> sram1[0x40] f32[4] after 1",
        )), tiny)

    def test_reads_do_not_race_with_reads(self, tiny: NpuConfig) -> None:
        verify(parse_program(program_with(
            "0: core0.dma0 copy sram0[0x0] f32[4] -> sram1[0x0] f32[4]",
            "1: core0.dma1 copy sram0[0x0] f32[4] -> sram1[0x40] f32[4]",
        )), tiny)

    def test_disjoint_regions_do_not_race(self, tiny: NpuConfig) -> None:
        verify(parse_program(program_with(
            "0: core0.dma0 copy sram1[0x0] f32[4] -> sram0[0x0] f32[4]",
            "1: core0.dma1 copy sram1[0x0] f32[4] -> sram0[0x10] f32[4]",
        )), tiny)


def one_problem(text: str, config: NpuConfig) -> str:
    found = problems_of(text, config)
    assert len(found) == 1, found
    return found[0]


class TestCommandChecks:
    def test_unknown_engine(self, tiny: NpuConfig) -> None:
        text = program_with("0: core0.mxu1 matmul sram0[0] f32[4,4], sram0[64] f32[4,4] "
                            "-> sram0[128] f32[4,4]")
        assert one_problem(text, tiny) == (
            "command 0 (core0.mxu1 matmul): engine: unknown engine 'core0.mxu1' (tiny has "
            "core0..core1 each with dma0..dma1, mxu0, vpu; tdma, hdma, host)")

    def test_op_not_allowed_on_engine(self, tiny: NpuConfig) -> None:
        text = program_with("0: hdma host_op f () -> () cycles=0")
        assert one_problem(text, tiny) == (
            "command 0 (hdma host_op): op: host_op cannot run on a hdma engine "
            "(hdma engines run host_transfer)")

    def test_duplicate_ids_skip_ordering(self, tiny: NpuConfig) -> None:
        text = program_with("3: core0.vpu unary relu sram0[0] f32[4] -> sram0[16] f32[4]",
                            "3: core0.dma0 copy sram0[16] f32[4] -> sram1[0] f32[4]")
        assert one_problem(text, tiny) == (
            "command 3: id used by 2 commands (at positions 0, 1); ordering checks "
            "skipped until ids are unique")

    def test_unknown_and_self_deps(self, tiny: NpuConfig) -> None:
        text = program_with(
            "0: core0.vpu unary relu sram0[0] f32[4] -> sram0[16] f32[4] after 0,5")
        assert problems_of(text, tiny) == [
            "command 0 (core0.vpu unary): deps: depends on itself",
            "command 0 (core0.vpu unary): deps: depends on unknown command 5",
        ]

    def test_shared_sram_missing(self, tiny: NpuConfig) -> None:
        config = tiny.with_overrides({"shared_sram.size_bytes": 0})
        text = program_with("0: core0.dma0 copy sram0[0] f32[4] -> shared[0] f32[4]")
        assert one_problem(text, config) == (
            "command 0 (core0.dma0 copy): field dst: shared SRAM does not exist on this NPU "
            "(shared_sram.size_bytes is 0)")

    def test_negative_offset(self, tiny: NpuConfig) -> None:
        text = program_with("0: core0.vpu unary relu sram0[-16] f32[4] -> sram0[16] f32[4]")
        assert one_problem(text, tiny) == (
            "command 0 (core0.vpu unary): field src: negative offset -16 in sram0")

    def test_vector_engine_stays_on_its_core(self, tiny: NpuConfig) -> None:
        text = program_with("0: core1.vpu unary relu sram1[0] f32[4] -> sram0[16] f32[4]")
        assert one_problem(text, tiny) == (
            "command 0 (core1.vpu unary): field dst: core1.vpu can only access its own "
            "core's scratchpad sram1, not sram0")

    def test_core_dma_may_cross_the_noc(self, tiny: NpuConfig) -> None:
        verify(parse_program(program_with(
            "0: core0.dma0 copy sram1[0] f32[4] -> sram0[16] f32[4]")), tiny)

    def test_tdma_shared_to_shared_is_fine(self, tiny: NpuConfig) -> None:
        verify(parse_program(program_with(
            "0: tdma copy shared[0] f32[4] -> shared[16] f32[4]")), tiny)

    def test_float_matmul_on_integer_array(self, tiny: NpuConfig) -> None:
        config = tiny.with_overrides({"core.matrix.input_dtype": "i8",
                                      "core.matrix.accumulator_dtype": "i32"})
        text = program_with("0: core0.mxu0 matmul sram0[0] f32[4,4], sram0[64] f32[4,4] "
                            "-> sram0[128] i32[4,4]")
        assert one_problem(text, config) == (
            "command 0 (core0.mxu0 matmul): field a: float matmul (f32) on an i8 matrix array")

    def test_integer_matmul_on_integer_array(self, tiny: NpuConfig) -> None:
        config = tiny.with_overrides({"core.matrix.input_dtype": "i8",
                                      "core.matrix.accumulator_dtype": "i32"})
        verify(parse_program(program_with(
            "0: core0.mxu0 matmul sram0[0] i8[4,4], sram0[64] i8[4,4] -> sram0[128] i32[4,4]"
        )), config)

    def test_matmul_needs_2d(self, tiny: NpuConfig) -> None:
        text = program_with("0: core0.mxu0 matmul sram0[0] f32[4], sram0[64] f32[4,4] "
                            "-> sram0[128] f32[4,4]")
        assert one_problem(text, tiny) == (
            "command 0 (core0.mxu0 matmul): field a: matmul operands must be 2-D (a may have "
            "more leading dims, which are its rows), got f32[4]")
        rows = program_with("0: core0.mxu0 matmul sram0[0] f32[2,2,4], sram0[64] f32[4,4] "
                            "-> sram0[128] f32[4,4]")
        verify(parse_program(rows), tiny)  # a's leading dims are its rows

    def test_unary_shape_and_dtype(self, tiny: NpuConfig) -> None:
        text = program_with("0: core0.vpu unary exp sram0[0] f32[4,8] -> sram0[256] f16[8,4]")
        assert problems_of(text, tiny) == [
            "command 0 (core0.vpu unary): field dst: shape f16[8,4] does not match src's [4,8]",
            "command 0 (core0.vpu unary): field dst: dtype f16 does not match src's f32",
        ]

    def test_cast_keeps_shape(self, tiny: NpuConfig) -> None:
        text = program_with("0: core0.vpu cast sram0[0] f32[4,8] -> sram0[256] f16[32]")
        assert one_problem(text, tiny) == (
            "command 0 (core0.vpu cast): field dst: shape f16[32] does not match src's [4,8]")

    def test_comparison_inputs_share_a_dtype(self, tiny: NpuConfig) -> None:
        text = program_with("0: core0.vpu binary eq sram0[0] f32[4], sram0[16] i32[4] "
                            "-> sram0[32] bool[4]")
        assert one_problem(text, tiny) == (
            "command 0 (core0.vpu binary): field b: dtype i32 does not match a's f32")

    def test_arithmetic_dtype_follows_dst(self, tiny: NpuConfig) -> None:
        text = program_with("0: core0.vpu binary mul sram0[0] f16[4], 2.0 -> sram0[32] f32[4]")
        assert one_problem(text, tiny) == (
            "command 0 (core0.vpu binary): field a: dtype f16 does not match dst's f32")

    def test_select(self, tiny: NpuConfig) -> None:
        text = program_with("0: core0.vpu select sram0[0] f32[4], sram0[16] f32[2], 0.0 "
                            "-> sram0[32] f32[4]")
        assert problems_of(text, tiny) == [
            "command 0 (core0.vpu select): field cond: a select condition must be bool, "
            "got f32",
            "command 0 (core0.vpu select): field a: shape f32[2] does not broadcast to dst's "
            "[4]",
        ]

    def test_vcopy(self, tiny: NpuConfig) -> None:
        verify(parse_program(program_with(
            "0: core0.vpu vcopy sram0[0] f32[4,8] -> sram0[256] f32[32]")), tiny)
        text = program_with("0: core0.vpu vcopy sram0[0] f32[3] -> sram0[256] f32[4,2]")
        assert one_problem(text, tiny) == (
            "command 0 (core0.vpu vcopy): field dst: shape f32[4,2] neither has the 3 elements "
            "of src f32[3] nor is a broadcast of it")

    def test_copy_element_count(self, tiny: NpuConfig) -> None:
        text = program_with("0: core0.dma0 copy sram0[0] f32[4] -> sram1[0] f32[8]")
        assert one_problem(text, tiny) == (
            "command 0 (core0.dma0 copy): field dst: f32[8] has 8 elements but src f32[4] "
            "has 4")

    def test_store_element_count(self, tiny: NpuConfig) -> None:
        text = program_with("0: core0.dma0 store sram0[0] f32[4] -> %y[0:2]",
                            tensors="dram %y : f32[2] out\n")
        assert one_problem(text, tiny) == (
            "command 0 (core0.dma0 store): field src: f32[4] has 4 elements but destination "
            "%y[0:2] has 2")

    def test_host_op_writing_an_input(self, tiny: NpuConfig) -> None:
        text = program_with("0: host host_op f () -> (%x) cycles=1",
                            tensors="dram %x : f32[2] in\n")
        assert one_problem(text, tiny) == (
            "command 0 (host host_op): field outputs: writes %x, whose role is 'in' (inputs "
            "are read-only; declare it 'inout' to update it)")

    def test_all_problems_are_collected(self, tiny: NpuConfig) -> None:
        text = program_with("0: core9.vpu unary relu sram0[0] f32[4] -> sram0[16] f32[4]",
                            "1: core0.vpu unary relu sram0[0] f32[4] -> sram0[17] f32[4]")
        with pytest.raises(VerifyError) as info:
            verify(parse_program(text), tiny)
        assert [p.split(":")[1].strip() for p in info.value.problems] == [
            "engine", "field src", "field dst", "field dst", "field dst"]
        assert str(info.value).startswith("program 'p' is invalid (5 problems):\n  - command 0")


class TestProgramChecks:
    def test_tensor_problems(self, tiny: NpuConfig) -> None:
        program = Program("p", (DramTensor("a", (2,), DType.f32, "in"),
                                DramTensor("a", (-1,), DType.f32, "input")), ())
        assert find_problems(program, tiny) == [
            "tensor %a: declared more than once",
            "tensor %a: unknown role 'input' (expected one of in, out, inout, temp)",
            "tensor %a: negative dimension in shape [-1]",
        ]

    def test_unknown_op_class(self, tiny: NpuConfig) -> None:
        @dataclass(frozen=True)
        class Fancy(Op):
            mnemonic = "fancy"

        program = Program("p", (), (Command(0, "core0.vpu", Fancy()),))
        assert find_problems(program, tiny) == [
            "command 0 (core0.vpu fancy): op: unknown op class Fancy"]


class TestDeadlock:
    def test_dependency_on_a_later_command_in_the_same_queue(self, tiny: NpuConfig) -> None:
        text = program_with("0: core0.vpu unary relu sram0[0] f32[4] -> sram0[16] f32[4] after 1",
                            "1: core0.vpu unary relu sram0[32] f32[4] -> sram0[48] f32[4]")
        assert one_problem(text, tiny) == (
            "deadlock: command 0 (core0.vpu) waits on command 1 (core0.vpu), which is queued "
            "on core0.vpu behind command 0")

    def test_dependency_cycle_across_engines(self, tiny: NpuConfig) -> None:
        text = program_with(
            "0: core0.dma0 copy sram1[0] f32[4] -> sram0[0] f32[4] after 1",
            "1: core0.dma1 copy sram1[64] f32[4] -> sram0[64] f32[4] after 0")
        assert one_problem(text, tiny) == (
            "deadlock: command 0 (core0.dma0) waits on command 1 (core0.dma1), which waits on "
            "command 0")

    def test_each_cycle_is_reported_once(self, tiny: NpuConfig) -> None:
        text = program_with(
            "0: core0.dma0 copy sram1[0] f32[4] -> sram0[0] f32[4] after 1",
            "1: core0.dma1 copy sram1[64] f32[4] -> sram0[64] f32[4] after 0",
            "2: core1.dma0 copy sram0[0] f32[4] -> sram1[0] f32[4] after 3",
            "3: core1.dma1 copy sram0[64] f32[4] -> sram1[64] f32[4] after 2",
            "4: core0.vpu unary relu sram0[128] f32[4] -> sram0[144] f32[4] after 0,2")
        problems = problems_of(text, tiny)
        assert [p.split(",")[0] for p in problems] == [
            "deadlock: command 0 (core0.dma0) waits on command 1 (core0.dma1)",
            "deadlock: command 2 (core1.dma0) waits on command 3 (core1.dma1)",
        ]


class TestRaces:
    def test_write_after_read(self, tiny: NpuConfig) -> None:
        text = program_with(
            "0: core0.vpu unary relu sram0[0x0] f32[8] -> sram0[0x100] f32[8]",
            "1: core0.dma0 copy sram1[0x0] f32[4] -> sram0[0x10] f32[4]")
        assert one_problem(text, tiny) == (
            "command 1 (core0.dma0 copy): field dst: writes sram0[0x000010:0x000020], which "
            "command 0 (core0.vpu unary) reads (field src), but neither command waits for the "
            "other (add a dependency)")

    def test_write_after_write(self, tiny: NpuConfig) -> None:
        text = program_with(
            "0: core0.dma0 copy sram1[0x0] f32[8] -> sram0[0x0] f32[8]",
            "1: core0.dma1 copy sram1[0x40] f32[8] -> sram0[0x8] f32[8]")
        assert one_problem(text, tiny) == (
            "command 1 (core0.dma1 copy): field dst: writes sram0[0x000008:0x000020], which "
            "command 0 (core0.dma0 copy) writes (field dst), but neither command waits for "
            "the other (add a dependency)")

    def test_one_byte_is_enough_to_race(self, tiny: NpuConfig) -> None:
        write_write = program_with(
            "0: core0.dma0 copy sram1[0x0] i8[1] -> sram0[0x0] i8[1]",
            "1: core0.dma1 copy sram1[0x40] i8[1] -> sram0[0x0] i8[1]")
        assert one_problem(write_write, tiny).startswith(
            "command 1 (core0.dma1 copy): field dst: writes sram0[0x000000:0x000001], which "
            "command 0 (core0.dma0 copy) writes (field dst)")
        read_write = program_with(
            "0: core0.dma0 copy sram0[0x0] i8[1] -> sram1[0x0] i8[1]",
            "1: core0.dma1 copy sram1[0x40] i8[1] -> sram0[0x0] i8[1]")
        assert one_problem(read_write, tiny).startswith(
            "command 1 (core0.dma1 copy): field dst: writes sram0[0x000000:0x000001], which "
            "command 0 (core0.dma0 copy) reads (field src)")

    def test_a_zero_element_write_touches_nothing(self, tiny: NpuConfig) -> None:
        # f32[0] at 0x4 writes no byte: the write of [0x0, 0x10) after it races with nothing
        assert problems_of(program_with(
            "0: core0.dma0 copy sram1[0x0] f32[0] -> sram0[0x4] f32[0]",
            "1: core0.dma1 copy sram1[0x40] f32[4] -> sram0[0x0] f32[4]"), tiny) == []

    def test_a_strided_write_covers_its_whole_span(self, tiny: NpuConfig) -> None:
        # rows of 2 f32 every 8 elements: element (1, 1) is at 9 * 4 = 36, so the span is
        # [0x0, 0x28), not the 16 bytes of 4 dense f32; the second write hits its tail
        text = program_with(
            "0: core0.dma0 copy sram1[0x0] f32[2,2] -> sram0[0x0] f32[2,2] strides=(8,1)",
            "1: core0.dma1 copy sram1[0x40] f32[2] -> sram0[0x20] f32[2]")
        assert one_problem(text, tiny).startswith(
            "command 1 (core0.dma1 copy): field dst: writes sram0[0x000020:0x000028], which "
            "command 0 (core0.dma0 copy) writes (field dst)")

    def test_accumulating_matmul_reads_its_output(self, tiny: NpuConfig) -> None:
        text = program_with(
            "0: core0.vpu unary relu sram0[0x0] f32[4,4] -> sram0[0x200] f32[4,4]",
            "1: core0.mxu0 matmul sram0[0x0] f32[4,4], sram0[0x100] f32[4,4] "
            "-> sram0[0x200] f32[4,4] acc")
        assert one_problem(text, tiny).startswith(
            "command 1 (core0.mxu0 matmul): field out: reads sram0[0x000200:0x000240], which "
            "command 0 (core0.vpu unary) writes (field dst)")

    def test_a_dependency_fixes_the_race(self, tiny: NpuConfig) -> None:
        verify(parse_program(program_with(
            "0: core0.vpu unary relu sram0[0x0] f32[8] -> sram0[0x100] f32[8]",
            "1: core0.dma0 copy sram1[0x0] f32[4] -> sram0[0x10] f32[4] after 0")), tiny)

    @pytest.mark.parametrize("seed", range(40))
    def test_matches_brute_force(self, seed: int, tiny: NpuConfig) -> None:
        """Races are reported iff some conflicting pair is unordered, and every
        reported pair really is unordered (checked against a transitive closure)."""
        program = random_sram_program(random.Random(seed))
        expected = brute_force_races(program)
        reported = {tuple(int(n) for n in re.findall(r"command (\d+)", p))
                    for p in find_problems(program, tiny)}
        assert all(p[0] != p[1] for p in reported)
        assert {frozenset(p) for p in reported} <= expected
        assert bool(reported) == bool(expected)


def random_sram_program(rng: random.Random) -> Program:
    """Vector ops and copies on sram0 with random deps on earlier commands."""
    commands = []
    for i in range(rng.randint(2, 14)):
        src = SramRef("sram0", 4 * rng.randint(0, 12), (rng.randint(1, 4),), DType.f32)
        dst = SramRef("sram0", 4 * rng.randint(0, 12), src.shape, DType.f32)
        engine = rng.choice(("core0.vpu", "core0.dma0", "core0.dma1"))
        op = Unary(UnaryKind.neg, src, dst) if engine == "core0.vpu" else Copy(src, dst)
        deps = tuple(sorted(rng.sample(range(i), rng.randint(0, min(i, 2)))))
        commands.append(Command(i, engine, op, deps))
    return Program("races", (), tuple(commands))


def brute_force_races(program: Program) -> set[frozenset[int]]:
    commands = program.commands
    before = {c.id: set(c.deps) for c in commands}
    for a, b in itertools.combinations(commands, 2):
        if a.engine == b.engine:
            before[b.id].add(a.id)
    changed = True
    while changed:
        changed = False
        for c in commands:
            closure = set().union(*(before[d] for d in before[c.id])) | before[c.id]
            if closure != before[c.id]:
                before[c.id], changed = closure, True
    races = set()
    for a, b in itertools.combinations(commands, 2):
        if a.id in before[b.id] or b.id in before[a.id]:
            continue
        if conflicts(a.op, b.op):
            races.add(frozenset((a.id, b.id)))
    return races


def overlap(x: SramRef, y: SramRef) -> bool:
    return x.space == y.space and x.offset < y.end and y.offset < x.end


def conflicts(a: Op, b: Op) -> bool:
    """Do ``a`` and ``b`` touch a common SRAM byte, at least one writing it?"""
    a_writes = any(overlap(x, y) for x in writes(a) for y in reads(b) + writes(b))
    return a_writes or any(overlap(x, y) for x in reads(a) for y in writes(b))


class TestAccessTable:
    def test_accumulate_reads_out(self) -> None:
        a, b, out = (SramRef("sram0", o, (4, 4), DType.f32) for o in (0, 64, 128))
        assert sram_reads(MatMul(a, b, out)) == (("a", a), ("b", b))
        assert sram_reads(MatMul(a, b, out, True)) == (("a", a), ("b", b), ("out", out))
        assert sram_writes(MatMul(a, b, out, True)) == (("out", out),)


class TestSpeed:
    def test_large_program_verifies_quickly(self, tiny: NpuConfig,
                                            make_pipeline_program: Callable[..., Program]
                                            ) -> None:
        program = make_pipeline_program(5000)  # 40k commands
        start = time.process_time()
        verify(program, tiny)
        elapsed = time.process_time() - start
        assert elapsed < 8.0, f"verifying 40k commands took {elapsed:.1f}s of CPU"


INVALID_DIR = Path(__file__).parent / "invalid"
INVALID_FILES = sorted(INVALID_DIR.glob("*.rbln"))


def expected_errors(path: Path) -> list[str]:
    return [line.removeprefix("# error:").strip()
            for line in path.read_text().splitlines() if line.startswith("# error:")]


def test_invalid_folder_is_populated() -> None:
    assert len(INVALID_FILES) >= 15


@pytest.mark.parametrize("path", INVALID_FILES, ids=lambda p: p.stem)
def test_invalid_program(path: Path, tiny: NpuConfig) -> None:
    """Each file fails to parse or verify on ``tiny``, with exactly the problems its
    ``# error:`` lines name (one problem per line, matched as substrings)."""
    expected = expected_errors(path)
    assert expected, f"{path.name} has no '# error:' line"
    try:
        verify(load_program(path), tiny)
    except ParseError as error:
        problems = [str(error)]
    except VerifyError as error:
        problems = list(error.problems)
    else:
        pytest.fail(f"{path.name} parsed and verified without error")
    assert len(problems) == len(expected), problems
    for want, got in zip(expected, problems):
        assert want in got
