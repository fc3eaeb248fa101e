"""The verifier's screen and its edge cases, pinned (survivors of a mutation run of
``compiler/ir/verify.py``, issue 34).

The screen remembers one verdict per key (engine, op class, SRAM regions, DRAM box
tensors and shapes, other fields). Two kinds of test pin it:

- *collisions*: a valid command, then one that differs from it in a single part of
  the key and has a problem. A key that forgets that part reuses the first verdict and
  the problem goes unreported.
- *explanations*: a valid program whose commands repeat a few keys. Each distinct key
  is explained once; a screen that refuses commands it could pass explains more (every
  answer stays right, but the verifier stops being fast on real programs).
"""

from __future__ import annotations

import pytest

from archsim.config import NpuConfig
from compiler.ir import verify as verify_module
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.ir.ops import ALL_OPS, Command, Program, Unary, UnaryKind
from compiler.ir.text import parse_program
from compiler.ir.verify import find_problems

X_Y = "dram %x : f32[8,8] in\ndram %y : f32[8,8] out\n"


@pytest.fixture(autouse=True)
def _fields_built_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build the screen's field table inside each test rather than use the one built
    at import: the same table, but a mutation run (which forks its test runs after the
    module was imported) can then see a broken ``_Fields.of``."""
    monkeypatch.setattr(verify_module, "_FIELDS",
                        {op_type: verify_module._Fields.of(op_type) for op_type in ALL_OPS})


def problems(*lines: str, tensors: str = "", config: NpuConfig) -> list[str]:
    text = "program p target=tiny\n" + tensors + "\n".join(lines) + "\n"
    return find_problems(parse_program(text), config)


class TestCollisions:
    """The second command shares all of the first's key but one part."""

    def test_strides(self, tiny: NpuConfig) -> None:
        # dense: 16 bytes ending at 0x10000 (capacity 65536); strided (8,1): the last
        # element sits at (1*8 + 1) * 4 = 36 bytes in, so it spans 40 bytes, past the end
        # (a bug fixed with this test: strides were not part of the key)
        assert problems(
            "0: core0.vpu unary relu sram0[0xfff0] f32[2,2] -> sram0[0x0] f32[2,2]",
            "1: core0.vpu unary relu sram0[0xfff0] f32[2,2] strides=(8,1) -> sram0[0x0] "
            "f32[2,2] after 0", config=tiny) == [
            "command 1 (core0.vpu unary): field src: region sram0[0x00fff0:0x010018] "
            "(40 bytes) exceeds sram0 capacity of 65536 bytes"]

    def test_sram_offset_of_an_op_with_a_scalar(self, tiny: NpuConfig) -> None:
        # 0xfff8 + 4 x 4 bytes = 0x10008 > 0x10000
        assert problems(
            "0: core0.vpu binary add sram0[0x0] f32[4], 1.0 -> sram0[0x100] f32[4]",
            "1: core0.vpu binary add sram0[0xfff8] f32[4], 1.0 -> sram0[0x100] f32[4] "
            "after 0", config=tiny) == [
            "command 1 (core0.vpu binary): field a: region sram0[0x00fff8:0x010008] "
            "(16 bytes) exceeds sram0 capacity of 65536 bytes"]

    def test_other_field(self, tiny: NpuConfig) -> None:
        assert problems(
            "0: core0.vpu reduce max sram0[0x0] f32[4,4] -> sram0[0x100] f32[4,1] axis=1",
            "1: core0.vpu reduce max sram0[0x0] f32[4,4] -> sram0[0x100] f32[4,1] axis=0 "
            "after 0", config=tiny) == [
            "command 1 (core0.vpu reduce): field dst: shape f32[4,1] should be [1,4] "
            "(src [4,4] reduced along axis 0)"]

    def test_op_class(self, tiny: NpuConfig) -> None:
        # vcopy and copy have the same fields; copy is a DMA op
        assert problems(
            "0: core0.vpu vcopy sram0[0x0] f32[4] -> sram0[0x100] f32[4]",
            "1: core0.vpu copy sram0[0x0] f32[4] -> sram0[0x100] f32[4] after 0",
            config=tiny) == [
            "command 1 (core0.vpu copy): op: copy cannot run on a vpu engine (vpu engines "
            "run unary, binary, muladd, select, cast, reduce, transpose, vcopy, dequantize, vmatmul)"]

    def test_unknown_dep(self, tiny: NpuConfig) -> None:
        assert problems(
            "0: core0.vpu unary relu sram0[0x0] f32[4] -> sram0[0x100] f32[4]",
            "1: core0.vpu unary relu sram0[0x0] f32[4] -> sram0[0x100] f32[4] after 0",
            "2: core0.vpu unary relu sram0[0x0] f32[4] -> sram0[0x100] f32[4] after 7",
            config=tiny) == [
            "command 2 (core0.vpu unary): deps: depends on unknown command 7"]

    @pytest.mark.parametrize(("good", "bad", "expected"), [
        # box rows: good 4, bad 2 (the shape of the box, not only its tensor)
        ("%x[0:4, 0:8] -> sram0[0x0] f32[4,8]", "%x[0:2, 0:8] -> sram0[0x0] f32[4,8]",
         "f32[4,8] has 32 elements but source %x[0:2, 0:8] has 16"),
        # ceil(4/3) = 2 rows, ceil(3/3) = 1 row
        ("%x[0:4:3, 0:8] -> sram0[0x0] f32[2,8]", "%x[0:3:3, 0:8] -> sram0[0x0] f32[2,8]",
         "f32[2,8] has 16 elements but source %x[0:3:3, 0:8] has 8"),
        # 3 - 1 = 2 rows, 4 - 0 = 4 rows (rows are stop - start, not stop + start)
        ("%x[1:3, 0:8] -> sram0[0x0] f32[2,8]", "%x[0:4, 0:8] -> sram0[0x0] f32[2,8]",
         "f32[2,8] has 16 elements but source %x[0:4, 0:8] has 32"),
        # ceil(2/2) = 1 row, ceil(3/2) = 2 rows
        ("%x[0:2:2, 0:8] -> sram0[0x0] f32[1,8]", "%x[0:3:2, 0:8] -> sram0[0x0] f32[1,8]",
         "f32[1,8] has 8 elements but source %x[0:3:2, 0:8] has 16"),
    ])
    def test_dram_box_shape(self, good: str, bad: str, expected: str,
                            tiny: NpuConfig) -> None:
        assert problems(f"0: core0.dma0 load {good}", f"1: core0.dma0 load {bad} after 0",
                        tensors=X_Y, config=tiny) == [
            f"command 1 (core0.dma0 load): field dst: {expected}"]


class TestExplanations:
    def test_each_distinct_key_is_explained_once(self, tiny: NpuConfig,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
        explained: list[int] = []
        explain = verify_module._command_problems

        def counting(cmd: Command, *args: object):  # type: ignore[no-untyped-def]
            explained.append(cmd.id)
            return explain(cmd, *args)

        monkeypatch.setattr(verify_module, "_command_problems", counting)
        assert problems(
            # one key: tensor x, box shape [4,8] (full rows, steps 1 and 2), dst sram0[0]
            "0: core0.dma0 load %x[0:4, 0:8] -> sram0[0x0] f32[4,8]",
            "1: core0.dma0 load %x[4:8, 0:8] -> sram0[0x0] f32[4,8] after 0",
            "2: core0.dma0 load %x[0:8:2, 0:8] -> sram0[0x0] f32[4,8] after 1",
            # one key: an op with a Scalar operand (the slow key)
            "3: core0.vpu binary add sram0[0x0] f32[4,8], 1.0 -> sram0[0x100] f32[4,8] "
            "after 2",
            "4: core0.vpu binary add sram0[0x0] f32[4,8], 1.0 -> sram0[0x100] f32[4,8] "
            "after 3",
            # one key: a plain op
            "5: core0.vpu unary relu sram0[0x100] f32[4,8] -> sram0[0x200] f32[4,8] after 4",
            "6: core0.vpu unary relu sram0[0x100] f32[4,8] -> sram0[0x200] f32[4,8] after 5",
            # one key: a store (written DRAM box) of shape [4,8] into y
            "7: core0.dma1 store sram0[0x200] f32[4,8] -> %y[0:4, 0:8] after 6",
            "8: core0.dma1 store sram0[0x200] f32[4,8] -> %y[4:8, 0:8] after 7",
            # one key: boxes of 2 rows, ceil(3/2) = ceil(4/2) = 2
            "9: core0.dma0 load %x[0:3:2, 0:8] -> sram0[0x300] f32[2,8] after 2",
            "10: core0.dma0 load %x[0:4:2, 0:8] -> sram0[0x300] f32[2,8] after 9",
            # one key: empty boxes (start = stop)
            "11: core0.dma0 load %x[2:2, 0:8] -> sram0[0x400] f32[0,8] after 10",
            "12: core0.dma0 load %x[5:5, 0:8] -> sram0[0x400] f32[0,8] after 11",
            tensors=X_Y, config=tiny) == []
        assert explained == [0, 3, 5, 7, 9, 11]


class TestEdges:
    def test_a_zero_dimension_is_not_negative(self, tiny: NpuConfig) -> None:
        assert problems("0: core0.dma0 load %e[0:0, 0:4] -> sram0[0x0] f32[0,4]",
                        tensors="dram %e : f32[0,4] in\n", config=tiny) == []

    def test_an_empty_slice_is_in_bounds(self, tiny: NpuConfig) -> None:
        assert problems("0: core0.dma0 load %x[8:8, 0:8] -> sram0[0x0] f32[0,8]",
                        tensors=X_Y, config=tiny) == []

    def test_a_zero_stride_is_allowed(self, tiny: NpuConfig) -> None:
        # a broadcast view: every row reads the same 16 bytes
        assert problems("0: core0.vpu unary relu sram0[0x0] f32[4,4] strides=(0,1) -> "
                        "sram0[0x100] f32[4,4]", config=tiny) == []

    def test_a_region_may_end_at_the_capacity(self, tiny: NpuConfig) -> None:
        # 0xfff0 + 16 bytes = 65536, the whole of sram0
        assert problems("0: core0.vpu unary relu sram0[0xfff0] f32[4] -> sram0[0x100] f32[4]",
                        config=tiny) == []
        assert problems("0: core0.vpu unary relu sram0[0xfff4] f32[4] -> sram0[0x100] f32[4]",
                        config=tiny) == [
            "command 0 (core0.vpu unary): field src: region sram0[0x00fff4:0x010004] "
            "(16 bytes) exceeds sram0 capacity of 65536 bytes"]

    def test_a_negative_sram_dimension_is_named_with_its_type(self, tiny: NpuConfig) -> None:
        src = SramRef("sram0", 0, (-1, 4), DType.f32)
        dst = SramRef("sram0", 64, (4, 4), DType.f32)
        program = Program("p", (), (Command(0, "core0.vpu", Unary(UnaryKind.relu, src, dst)),))
        assert find_problems(program, tiny) == [
            "command 0 (core0.vpu unary): field src: negative dimension in shape f32[-1,4]",
            "command 0 (core0.vpu unary): field dst: shape f32[4,4] does not match src's "
            "[-1,4]"]

    def test_an_op_without_a_mnemonic(self, tiny: NpuConfig) -> None:
        program = Program("p", (), (Command(0, "core0.vpu", object()),))  # type: ignore[arg-type]
        assert find_problems(program, tiny) == [
            "command 0 (core0.vpu ?): op: unknown op class object"]


def test_an_operand_of_more_dims_than_dst_does_not_broadcast_to_it(tiny: NpuConfig) -> None:
    # numpy would broadcast [1,4,4] with [4,4] to [1,4,4]: not dst's shape
    assert problems("0: core0.vpu binary add sram0[0] f32[1,4,4], 1.0 -> sram0[64] f32[4,4]",
                    config=tiny) == [
        "command 0 (core0.vpu binary): field a: shape f32[1,4,4] does not broadcast to "
        "dst's [4,4]"]


def test_an_optional_operand_is_part_of_the_screens_key() -> None:
    # the same dequantizing matmul twice, the second's scales past the end of the
    # scratchpad (16 MiB on tpu-v4): its verdict is not the first's
    from archsim.config import load_config

    line = ("{i}: core0.mxu0 matmul sram0[0] bf16[1,128], sram0[0x10000] u8[2,128,32] -> "
            "sram0[0x20000] f32[1,128] dequant sram0[{at}] bf16[1,128,2] group=128 phase=0 "
            "halves")
    text = ("program p target=tpu-v4\n" + line.format(i=0, at="0x30000") + "\n"
            + line.format(i=1, at="0xffff00") + " after 0\n")
    problems = find_problems(parse_program(text), load_config("tpu-v4"))
    assert problems == [
        "command 1 (core0.mxu0 matmul): field scales: region sram0[0xffff00:0x1000100] "
        "(512 bytes) exceeds sram0 capacity of 16777216 bytes"]
