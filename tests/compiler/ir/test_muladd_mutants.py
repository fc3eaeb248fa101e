"""The multiply-add's checks and its text's operands, pinned where mutation testing
found them loose (``python benchmarks/mutation.py compiler/ir/verify_ops.py --only
'*_check_muladd*'``, ``compiler/ir/text_parse.py --only '*_operands*'``): each operand's
shape and dtype against the destination's, and each misplaced token named by its
field."""

from __future__ import annotations

import pytest

from archsim.config import NpuConfig
from archsim.errors import ParseError
from compiler.ir.text import parse_program
from compiler.ir.verify import find_problems

HEAD = "program p target=tiny\n0: core0.vpu "
GOOD = "muladd sram0[0x0] f32[4,8], sram0[0x100] f32[4,1], sram0[0x200] f32[8] " \
       "-> sram0[0x300] f32[4,8]"


def _problems(line: str, tiny: NpuConfig) -> list[str]:
    return find_problems(parse_program(HEAD + line + "\n"), tiny)


def test_operands_that_broadcast_pass(tiny: NpuConfig) -> None:
    # acc [4,8], a [4,1] and b [8] all broadcast to [4,8]; a scalar b too
    assert _problems(GOOD, tiny) == []
    assert _problems(GOOD.replace("sram0[0x200] f32[8]", "0.5"), tiny) == []


@pytest.mark.parametrize("old, new, problem", [
    ("sram0[0x0] f32[4,8]", "sram0[0x0] f32[3,8]",
     "field acc: shape f32[3,8] does not broadcast to dst's [4,8]"),
    ("sram0[0x100] f32[4,1]", "sram0[0x100] f32[2,1]",
     "field a: shape f32[2,1] does not broadcast to dst's [4,8]"),
    ("sram0[0x200] f32[8]", "sram0[0x200] f32[5]",
     "field b: shape f32[5] does not broadcast to dst's [4,8]"),
    ("sram0[0x0] f32[4,8]", "sram0[0x0] bf16[4,8]",
     "field acc: dtype bf16 does not match dst's f32"),
    ("sram0[0x100] f32[4,1]", "sram0[0x100] bf16[4,1]",
     "field a: dtype bf16 does not match dst's f32"),
    ("sram0[0x200] f32[8]", "sram0[0x200] bf16[8]",
     "field b: dtype bf16 does not match dst's f32"),
], ids=["acc-shape", "a-shape", "b-shape", "acc-dtype", "a-dtype", "b-dtype"])
def test_each_operand_is_checked_against_the_destination(old: str, new: str, problem: str,
                                                         tiny: NpuConfig) -> None:
    assert _problems(GOOD.replace(old, new), tiny) == [
        f"command 0 (core0.vpu muladd): {problem}"]


@pytest.mark.parametrize("line, message", [
    ("muladd sram0[0x0] f32[4,8] sram0[0x100] f32[4,8], 2.0 -> sram0[0x200] f32[4,8]",
     "2:41: expected ',' after muladd accumulator, got 'sram0'"),
    ("muladd sram0[0x0] f32[4,8], sram0[0x100] f32[4,8] 2.0 -> sram0[0x200] f32[4,8]",
     "2:64: expected ',' after muladd operand a, got '2.0'"),
    ("muladd sram0[0x0] f32[4,8], sram0[0x100] f32[4,8], 2.0 sram0[0x200] f32[4,8]",
     "2:69: expected '->' after muladd operand b, got 'sram0'"),
    ("muladd 1.0, sram0[0x100] f32[4,8], 2.0 -> sram0[0x200] f32[4,8]",
     "2:21: expected SRAM space (sram<N> or shared) for muladd accumulator, got '1.0'"),
    ("muladd sram0[0x0] f32[4,8], 2.0, 2.0 -> sram0[0x200] f32[4,8]",
     "2:42: expected SRAM space (sram<N> or shared) for muladd operand a, got '2.0'"),
    ("muladd sram0[0x0] f32[4,8], sram0[0x100] f32[4,8], 2.0 -> 3.0",
     "2:72: expected SRAM space (sram<N> or shared) for muladd destination, got '3.0'"),
    ("select sram0[0x0] bool[4,8], 1.0 2.0 -> sram0[0x200] f32[4,8]",
     "2:47: expected ',' after select operand a, got '2.0'"),
    ("binary add sram0[0x0] f32[4,8], 1.0 sram0[0x200] f32[4,8]",
     "2:50: expected '->' after binary operand b, got 'sram0'"),
], ids=["after-acc", "after-a", "arrow", "acc-scalar", "a-scalar", "dst-scalar",
        "select", "binary"])
def test_a_misplaced_token_is_named_by_its_field(line: str, message: str) -> None:
    # columns count from 1: "0: core0.vpu " is 13 characters, "muladd " 7 more
    with pytest.raises(ParseError) as error:
        parse_program(HEAD + line + "\n")
    assert str(error.value) == f"<program>:{message}"


def test_a_scalar_b_and_the_chained_flag_parse() -> None:
    (command,) = parse_program(HEAD + GOOD.replace("sram0[0x200] f32[8]", "2.5")
                               + " chained\n").commands
    assert command.op.b.value == 2.5 and command.op.chained
    assert command.op.dst.offset == 0x300 and command.op.a.shape == (4, 1)
