"""The text form: exact round trips, readable output, positioned parse errors."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from archsim.errors import ParseError
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, DramTensor, Scalar, Slice, SramRef
from compiler.ir.ops import (
    ALL_OPS,
    Binary,
    BinaryKind,
    Cast,
    Command,
    Copy,
    Dequant,
    Dequantize,
    Gather,
    HostOp,
    HostTransfer,
    Load,
    MatMul,
    MulAdd,
    Program,
    Reduce,
    ReduceKind,
    Select,
    Store,
    Transpose,
    Unary,
    UnaryKind,
    VCopy,
    VectorMatMul,
)
from compiler.ir.text import load_program, parse_program, print_program, save_program


def sram(offset: int, shape: tuple[int, ...], dtype: DType = DType.f32,
         space: str = "sram0") -> SramRef:
    return SramRef(space, offset, shape, dtype)


def every_op_program() -> Program:
    x = DramRef("X", (Slice(0, 4), Slice(0, 8)))
    commands = (
        Command(0, "core0.dma0", Load(DramRef("A", (Slice(0, 128), Slice(0, 128, 2))),
                                      sram(0, (128, 64))), (), "aten.mm"),
        Command(1, "core0.dma1", Store(sram(0x40000, (4, 8)), x), (0,)),
        Command(2, "tdma", Copy(sram(0, (4, 8), space="shared"), sram(0x100, (4, 8))), (1,)),
        Command(3, "core0.mxu0", MatMul(sram(0, (128, 128)), sram(0x10000, (128, 128)),
                                        sram(0x40000, (128, 128)), True), (0, 1), "aten.mm"),
        Command(4, "core0.vpu", Unary(UnaryKind.gelu_tanh, sram(0, (4, 8)),
                                      sram(0x100, (4, 8))), (3,)),
        Command(5, "core0.vpu", Binary(BinaryKind.add, sram(0, (4, 8)), Scalar(0.5),
                                       sram(0x100, (4, 8))), (4,)),
        Command(6, "core0.vpu", Binary(BinaryKind.logical_and, Scalar(-1e-05),
                                       sram(0, (4, 8), DType.bool),
                                       sram(0x100, (4, 8), DType.bool))),
        Command(7, "core1.vpu", Select(sram(0, (4, 8), DType.bool, "sram1"),
                                       sram(0x20, (4, 1), space="sram1"), Scalar(float("-inf")),
                                       sram(0x100, (4, 8), space="sram1"))),
        Command(8, "core0.vpu", Cast(sram(0, (4, 8)), sram(0x100, (4, 8), DType.bf16))),
        Command(9, "core0.vpu", Reduce(ReduceKind.mean, sram(0, (4, 8)), sram(0x100, (4, 1)),
                                       1)),
        Command(10, "core0.vpu", Transpose(sram(0, (2, 3, 4)), sram(0x100, (4, 2, 3)),
                                           (2, 0, 1))),
        Command(11, "core0.vpu", VCopy(sram(0, (1, 8), DType.i64), sram(0x100, (4, 8),
                                                                        DType.i64))),
        Command(12, "hdma", HostTransfer(x, True)),
        Command(13, "hdma", HostTransfer(DramRef("Y", (Slice(0, 4, 3),)), False), (12,)),
        Command(14, "host", HostOp("aten.cumsum.default", ("X",), ("Y",), 1200), (7, 13),
                "aten.cumsum"),
        Command(15, "core0.dma0", Gather(DramRef("A", (Slice(0, 128), Slice(0, 256))),
                                         sram(0, (4,), DType.i64), sram(0x100, (4, 256))),
                (), "aten.embedding"),
        Command(16, "core0.vpu", Dequantize(sram(0, (1, 4, 2), DType.u8),
                                            sram(0x100, (1, 4, 2)),
                                            sram(0x200, (4, 4), DType.bf16),
                                            Dequant(4, 0, "pairs")), (15,)),
        Command(17, "core0.vpu", MulAdd(sram(0x300, (4, 8)), sram(0, (4, 8)),
                                        sram(0x100, (4, 1)), sram(0x300, (4, 8)), True), (16,)),
        Command(18, "core0.vpu", VectorMatMul(sram(0, (1, 4), DType.bf16),
                                              sram(0x100, (1, 4, 2), DType.u8),
                                              sram(0x200, (1, 4)), True, sram(0x300, (1, 4, 2)),
                                              Dequant(4, 0, "halves")), (17,), "aten.mm"),
    )
    tensors = (
        DramTensor("A", (128, 256), DType.f32, "in"),
        DramTensor("X", (4, 8), DType.f32, "inout"),
        DramTensor("Y", (4,), DType.i8, "out"),
        DramTensor("T", (), DType.f16, "temp"),
    )
    return Program("every_op", tensors, commands, "tpu-v3")


EVERY_OP_TEXT = """\
program every_op target=tpu-v3
dram %A : f32[128,256] in
dram %X : f32[4,8] inout
dram %Y : i8[4] out
dram %T : f16[] temp
 0: core0.dma0 load   %A[0:128, 0:128:2] -> sram0[0x000000] f32[128,64]                                # aten.mm
 1: core0.dma1 store  sram0[0x040000] f32[4,8] -> %X[0:4, 0:8] after 0
 2: tdma       copy   shared[0x000000] f32[4,8] -> sram0[0x000100] f32[4,8] after 1
 3: core0.mxu0 matmul sram0[0x000000] f32[128,128], sram0[0x010000] f32[128,128] -> sram0[0x040000] f32[128,128] acc after 0,1   # aten.mm
 4: core0.vpu  unary  gelu_tanh sram0[0x000000] f32[4,8] -> sram0[0x000100] f32[4,8] after 3
 5: core0.vpu  binary add sram0[0x000000] f32[4,8], 0.5 -> sram0[0x000100] f32[4,8] after 4
 6: core0.vpu  binary and -1e-05, sram0[0x000000] bool[4,8] -> sram0[0x000100] bool[4,8]
 7: core1.vpu  select sram1[0x000000] bool[4,8], sram1[0x000020] f32[4,1], -inf -> sram1[0x000100] f32[4,8]
 8: core0.vpu  cast   sram0[0x000000] f32[4,8] -> sram0[0x000100] bf16[4,8]
 9: core0.vpu  reduce mean sram0[0x000000] f32[4,8] -> sram0[0x000100] f32[4,1] axis=1
10: core0.vpu  transpose sram0[0x000000] f32[2,3,4] -> sram0[0x000100] f32[4,2,3] perm=(2,0,1)
11: core0.vpu  vcopy  sram0[0x000000] i64[1,8] -> sram0[0x000100] i64[4,8]
12: hdma       host_transfer to_device %X[0:4, 0:8]
13: hdma       host_transfer to_host %Y[0:4:3] after 12
14: host       host_op aten.cumsum.default (%X) -> (%Y) cycles=1200 after 7,13                         # aten.cumsum
15: core0.dma0 gather %A[0:128, 0:256] [sram0[0x000000] i64[4]] -> sram0[0x000100] f32[4,256]          # aten.embedding
16: core0.vpu  dequantize sram0[0x000000] u8[1,4,2], sram0[0x000100] f32[1,4,2] -> sram0[0x000200] bf16[4,4] group=4 phase=0 pairs after 15
17: core0.vpu  muladd sram0[0x000300] f32[4,8], sram0[0x000000] f32[4,8], sram0[0x000100] f32[4,1] -> sram0[0x000300] f32[4,8] chained after 16
18: core0.vpu  vmatmul sram0[0x000000] bf16[1,4], sram0[0x000100] u8[1,4,2] -> sram0[0x000200] f32[1,4] acc dequant sram0[0x000300] f32[1,4,2] group=4 phase=0 halves after 17   # aten.mm
"""


class TestRoundTrip:
    def test_every_op_class_is_covered(self) -> None:
        used = {type(c.op) for c in every_op_program().commands}
        assert used == set(ALL_OPS)

    def test_every_op_prints_readably(self) -> None:
        assert print_program(every_op_program()) == EVERY_OP_TEXT

    def test_every_op_parses_back(self) -> None:
        program = every_op_program()
        assert parse_program(print_program(program)) == program

    @pytest.mark.parametrize("dtype", list(DType))
    def test_every_dtype(self, dtype: DType) -> None:
        program = Program("d", (DramTensor("t", (2, 3), dtype, "in"),), (
            Command(0, "core0.dma0", Load(DramRef("t", (Slice(0, 2), Slice(0, 3))),
                                          sram(0, (6,), dtype))),
        ))
        assert parse_program(print_program(program)) == program

    @pytest.mark.parametrize("seed", range(150))
    def test_generated_programs(self, seed: int,
                                make_random_program: Callable[[int, int], Program]) -> None:
        program = make_random_program(seed, 40)
        assert parse_program(print_program(program)) == program

    def test_printing_is_stable(self, make_random_program: Callable[[int, int], Program]
                                ) -> None:
        text = print_program(make_random_program(7, 40))
        assert print_program(parse_program(text)) == text

    def test_empty_program(self) -> None:
        program = Program("empty", (), ())
        assert print_program(program) == "program empty\n"
        assert parse_program("program empty") == program

    @pytest.mark.parametrize("value", [0.1, -0.0, 1e300, 5e-324, float("inf"), 2.0 / 3])
    def test_scalars_are_exact(self, value: float) -> None:
        op = Binary(BinaryKind.mul, sram(0, (4,)), Scalar(value), sram(16, (4,)))
        program = Program("s", (), (Command(0, "core0.vpu", op),))
        parsed = parse_program(print_program(program))
        parsed_value = parsed.commands[0].op.b.value  # type: ignore[attr-defined]
        assert repr(parsed_value) == repr(value)

    @pytest.mark.parametrize("name", ["plain", "with space", 'qu"ote', "", "ünï", "a-b.c+d"])
    def test_names_are_quoted_when_needed(self, name: str) -> None:
        program = Program(name, (DramTensor(name, (1,), DType.f32, "in"),), (
            Command(0, "host", HostOp(name, (name,), (), 0), (), name),
        ), target=name)
        assert parse_program(print_program(program)) == program

    def test_save_and_load(self, tmp_path: Path) -> None:
        path = tmp_path / "every_op.rbln"
        save_program(every_op_program(), path)
        assert load_program(path) == every_op_program()


class TestLayout:
    """What a person may write differently from the printer."""

    def test_blank_lines_comments_and_spacing(self) -> None:
        text = """
        # a schedule written by hand
        program p   target = tiny

        dram %A:f32[4,8] in   # ignored comment
        0 :core0.dma0 load %A [ 0 : 4 , 0:8:1 ] -> sram0 [ 16 ] f32 [ 4 , 8 ]   #  aten.mm
          # full-line comment between commands
        1: core0.vpu binary add sram0[0x10] f32[4,8],-2 -> sram0[0x100]f32[4,8] after 0 , 0
        """
        program = parse_program(text)
        assert program == Program("p", (DramTensor("A", (4, 8), DType.f32, "in"),), (
            Command(0, "core0.dma0", Load(DramRef("A", (Slice(0, 4), Slice(0, 8))),
                                          sram(16, (4, 8))), (), "aten.mm"),
            Command(1, "core0.vpu", Binary(BinaryKind.add, sram(16, (4, 8)), Scalar(-2.0),
                                           sram(0x100, (4, 8))), (0, 0)),
        ), "tiny")

    def test_crlf_line_endings(self) -> None:
        text = print_program(every_op_program()).replace("\n", "\r\n")
        assert parse_program(text) == every_op_program()

    def test_quoted_source_keeps_blanks_and_newlines(self) -> None:
        op = Unary(UnaryKind.neg, sram(0, (4,)), sram(16, (4,)))
        program = Program("s", (), (Command(0, "core0.vpu", op, (), " two\nlines "),))
        text = print_program(program)
        assert text.endswith('# " two\\nlines "\n')
        assert parse_program(text) == program


# (text, "line:column: message")
PARSE_ERRORS = [
    ("", "1:1: expected 'program <name>' header, got end of input"),
    ("program", "1:8: expected program name, got end of line"),
    ("program p extra", "1:11: unexpected 'extra' after the program header"),
    ("program p\nprogram q", "2:1: duplicate 'program' header"),
    ("program p\ndram A : f32[4] in",
     "2:6: expected DRAM tensor name (%name) after 'dram', got 'A'"),
    ("program p\ndram %A f32[4] in", "2:9: expected ':' after DRAM tensor name, got 'f32'"),
    ("program p\ndram %A : f32[4,] in",
     "2:17: expected a dimension in the shape of %A, got ']'"),
    ("program p\ndram %A : f32[4] in\ndram %A : f32[4] out",
     "3:6: duplicate DRAM tensor %A (first declared on line 2)"),
    ("program p\nload x", "2:1: expected 'dram' or a command ('<id>: <engine> <op> ...'), "
                          "got 'load'"),
    ("program p\n0 core0.dma0", "2:3: expected ':' after command id, got 'core0.dma0'"),
    ("program p\n0: gpu load", "2:4: expected engine (core<N>.dma<M>, core<N>.mxu<M>, "
                               "core<N>.vpu, tdma, hdma or host), got 'gpu'"),
    ("program p\n0: core0.dma0 load %A[0:4] sram0[0x0] f32[4]",
     "2:28: expected '->' after load source, got 'sram0'"),
    ("program p\n0: core0.dma0 load %A[0:4] -> dram[0] f32[4]",
     "2:31: expected SRAM space (sram<N> or shared) for load destination, got 'dram'"),
    ("program p\n0: core0.dma0 load %A[0:4] -> sram0[-] f32[4]",
     "2:37: expected byte offset of load destination, got '-'"),
    ("program p\n0: core0.dma0 load %A[0:4] -> sram0[0x0] f32[4]x",
     "2:48: unexpected 'x' after load command (expected 'after', '#' or end of line)"),
    ("program p\n0: core0.vpu binary add sram0[0] f32[4], two -> sram0[16] f32[4]",
     "2:42: expected SRAM region or number for binary operand b, got 'two'"),
    ("program p\n0: core0.vpu binary plus 1, 2 -> sram0[16] f32[4]",
     "2:21: expected binary kind (add, sub, mul, div, max, min, pow, eq, ne, lt, le, gt, "
     "ge, and, or, atan2, copysign, remainder, fmod, hypot, logaddexp), got 'plus'"),
    ("program p\n0: core0.vpu reduce sum sram0[0] f32[4] -> sram0[16] f32[1] axes=0",
     "2:61: expected 'axis' after reduce operands, got 'axes'"),
    ("program p\n0: core0.vpu transpose sram0[0] f32[4] -> sram0[16] f32[4] perm=(0",
     "2:67: expected ',' or ')' in the transpose permutation, got end of line"),
    ("program p\n0: hdma host_transfer up %A[0:4]",
     "2:23: expected host transfer direction (to_device, to_host), got 'up'"),
    ('program p\n0: host host_op "unterminated (%A) -> () cycles=1',
     "2:17: unterminated string"),
    ("program p\n0: host host_op f (%A) -> (%B) cycles=1 after x",
     "2:47: expected command id after 'after', got 'x'"),
    ('program p\n0: core0.vpu unary neg sram0[0] f32[4] -> sram0[16] f32[4] # "bad\\q"',
     "2:60: bad quoted source comment: Invalid \\escape"),
]


class TestParseErrors:
    @pytest.mark.parametrize(("text", "expected"), PARSE_ERRORS)
    def test_message_names_line_and_column(self, text: str, expected: str) -> None:
        with pytest.raises(ParseError) as info:
            parse_program(text, source="t.rbln")
        assert str(info.value) == f"t.rbln:{expected}"

    def test_error_fields(self) -> None:
        with pytest.raises(ParseError) as info:
            parse_program("program p\n\n  0: core0.dma0 lod", source="x.rbln")
        error = info.value
        assert (error.line, error.column, error.source) == (3, 17, "x.rbln")
        assert error.message.startswith("expected op mnemonic (load, store,")

    def test_load_program_names_the_file(self, tmp_path: Path) -> None:
        path = tmp_path / "bad.rbln"
        path.write_text("program p\ndram %A : f99[1] in\n")
        with pytest.raises(ParseError, match=r"bad\.rbln:2:11: expected dtype of %A"):
            load_program(path)


class TestSpeed:
    def test_large_program_parses_quickly(self, make_pipeline_program: Callable[..., Program]
                                          ) -> None:
        program = make_pipeline_program(5000)  # 40k commands
        text = print_program(program)
        start = time.process_time()
        parsed = parse_program(text)
        elapsed = time.process_time() - start
        assert parsed == program
        assert elapsed < 8.0, f"parsing 40k commands took {elapsed:.1f}s of CPU"


def test_a_number_too_long_for_any_program_is_a_parse_error() -> None:
    """Python refuses to convert 4,301-digit strings; the parser names the line first."""
    text = ("program p\ndram %X : f32[4,8] inout\ndram %Y : f32[4,8] out\n"
            " 0: host host_op aten.neg.default (%X) -> (%Y) cycles=" + "9" * 5000 + "\n")
    with pytest.raises(ParseError) as info:
        parse_program(text, source="big.rbln")
    assert str(info.value) == ("big.rbln:4:55: number 999999999999... has 5000 digits; "
                               "sizes, offsets and cycles have at most 18")


def test_a_file_that_is_not_utf8_is_a_parse_error(tmp_path: Path) -> None:
    path = tmp_path / "p.rbln"
    path.write_bytes(b"program p\ndram %X : f32[4] in\n\xc3\x28\n")
    with pytest.raises(ParseError, match=r"p.rbln:3:1: not UTF-8 text \(byte 0xc3\)"):
        load_program(path)
