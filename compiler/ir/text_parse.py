"""Parsing the ``.rbln`` text form, part two (:mod:`compiler.ir.text` gives the
grammar): ops, command lines, the header and tensor lines, and whole programs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from archsim.errors import ParseError
from compiler.ir.operands import ROLES, DramTensor, SramRef
from compiler.ir.ops import (
    Binary,
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
    Op,
    Program,
    Reduce,
    MulAdd,
    Select,
    Store,
    Transpose,
    Unary,
    VCopy,
    VectorMatMul,
)
from compiler.ir.text_lex import (
    _BINARY, _DIRECTIONS, _ENGINE_RE, _HUGE_NUMBER, _INT_RE, _REDUCE, _UNARY, _choices,
)
from compiler.ir.text_line import (
    _Line, _parse_attribute, _parse_dram, _parse_items, _parse_sram, _parse_tensor_list,
    _parse_type, _parse_value,
)

# -- ops ------------------------------------------------------------------------------


def _parse_load(line: _Line) -> Op:
    src = _parse_dram(line, "load source")
    line.expect("->", "after load source")
    return Load(src, _parse_sram(line, "load destination"))


def _parse_store(line: _Line) -> Op:
    src = _parse_sram(line, "store source")
    line.expect("->", "after store source")
    return Store(src, _parse_dram(line, "store destination"))


def _parse_gather(line: _Line) -> Op:
    table = _parse_dram(line, "gather table")
    line.expect("[", "to open the gather indices")
    indices = _parse_sram(line, "gather indices")
    line.expect("]", "to close the gather indices")
    line.expect("->", "after gather indices")
    return Gather(table, indices, _parse_sram(line, "gather destination"))


def _parse_sram_to_sram(make: Callable[..., Op], mnemonic: str, optional: str = ""
                        ) -> Callable[[_Line], Op]:
    """``src -> dst``, then the ``optional`` flag word if the op has one."""
    def parse(line: _Line) -> Op:
        src = _parse_sram(line, f"{mnemonic} source")
        line.expect("->", f"after {mnemonic} source")
        dst = _parse_sram(line, f"{mnemonic} destination")
        return make(src, dst, line.accept(optional)) if optional else make(src, dst)
    return parse


def _parse_two_to_one(line: _Line, first: str, second: str, result: str
                      ) -> tuple[SramRef, SramRef, SramRef]:
    """``sram "," sram "->" sram``, each named in the errors."""
    x = _parse_sram(line, first)
    line.expect(",", f"after {first}")
    y = _parse_sram(line, second)
    line.expect("->", f"after {second}")
    return x, y, _parse_sram(line, result)


def _parse_matmul(line: _Line, cls: type[MatMul] | type[VectorMatMul] = MatMul) -> Op:
    a, b, out = _parse_two_to_one(line, f"{cls.mnemonic} operand a",
                                  f"{cls.mnemonic} operand b", f"{cls.mnemonic} output")
    accumulate = line.accept("acc")
    if not line.accept("dequant"):
        return cls(a, b, out, accumulate)
    scales = _parse_sram(line, "dequant scales")
    return cls(a, b, out, accumulate, scales, _parse_spec(line, f"{cls.mnemonic} dequant"))


def _parse_spec(line: _Line, what: str) -> Dequant:
    """``group=G phase=P halves|pairs|bytes``."""
    values = []
    for key in ("group", "phase"):
        _parse_attribute(line, key, what)
        values.append(line.integer(f"dequant {key}"))
    nibbles = line.choice({"halves": "halves", "pairs": "pairs", "bytes": ""},
                          "dequant layout")
    return Dequant(*values, nibbles)


def _parse_dequantize(line: _Line) -> Op:
    src, scales, dst = _parse_two_to_one(line, "dequantize weights", "dequantize scales",
                                         "dequantize destination")
    return Dequantize(src, scales, dst, _parse_spec(line, "dequantize"))


def _parse_unary(line: _Line) -> Op:
    kind = line.choice(_UNARY, "unary kind")
    src = _parse_sram(line, "unary source")
    line.expect("->", "after unary source")
    return Unary(kind, src, _parse_sram(line, "unary destination"), line.accept("chained"))


def _operands(line: _Line, op: str, fields: tuple[tuple[str, Callable[[_Line, str], Any]], ...]
              ) -> list[Any]:
    """``A, B, ... -> DST``: each field parsed by its parser (errors name ``op`` and the
    field), then the destination."""
    values: list[Any] = []
    for i, (field, parse) in enumerate(fields):
        if i:
            line.expect(",", f"after {op} {fields[i - 1][0]}")
        values.append(parse(line, f"{op} {field}"))
    line.expect("->", f"after {op} {fields[-1][0]}")
    return [*values, _parse_sram(line, f"{op} destination")]


def _parse_binary(line: _Line) -> Op:
    kind = line.choice(_BINARY, "binary kind")
    return Binary(kind, *_operands(line, "binary", (("operand a", _parse_value),
                                                    ("operand b", _parse_value))),
                  line.accept("chained"))


def _parse_muladd(line: _Line) -> Op:
    return MulAdd(*_operands(line, "muladd", (("accumulator", _parse_sram),
                                              ("operand a", _parse_sram),
                                              ("operand b", _parse_value))),
                  line.accept("chained"))


def _parse_select(line: _Line) -> Op:
    return Select(*_operands(line, "select", (("condition", _parse_sram),
                                              ("operand a", _parse_value),
                                              ("operand b", _parse_value))))


def _parse_reduce(line: _Line) -> Op:
    kind = line.choice(_REDUCE, "reduce kind")
    src = _parse_sram(line, "reduce source")
    line.expect("->", "after reduce source")
    dst = _parse_sram(line, "reduce destination")
    _parse_attribute(line, "axis", "reduce")
    axis = line.integer("reduce axis")
    return Reduce(kind, src, dst, axis)


def _parse_transpose(line: _Line) -> Op:
    src = _parse_sram(line, "transpose source")
    line.expect("->", "after transpose source")
    dst = _parse_sram(line, "transpose destination")
    _parse_attribute(line, "perm", "transpose")
    perm = _parse_items(line, "(", ")",
                        lambda: line.integer("an axis in the transpose permutation"),
                        "to open the transpose permutation",
                        "or ')' in the transpose permutation")
    return Transpose(src, dst, perm)


def _parse_host_transfer(line: _Line) -> Op:
    to_device = line.choice(_DIRECTIONS, "host transfer direction")
    return HostTransfer(_parse_dram(line, "host transfer"), bool(to_device))


def _parse_host_op(line: _Line) -> Op:
    name = line.name("host op name")
    inputs = _parse_tensor_list(line, "host op input")
    line.expect("->", "after host op inputs")
    outputs = _parse_tensor_list(line, "host op output")
    _parse_attribute(line, "cycles", "host_op")
    return HostOp(name, inputs, outputs, line.integer("host op cycles"))


_OP_PARSERS: dict[str, Callable[[_Line], Op]] = {
    Load.mnemonic: _parse_load,
    Store.mnemonic: _parse_store,
    Copy.mnemonic: _parse_sram_to_sram(Copy, "copy"),
    Gather.mnemonic: _parse_gather,
    MatMul.mnemonic: _parse_matmul,
    VectorMatMul.mnemonic: lambda line: _parse_matmul(line, VectorMatMul),
    Unary.mnemonic: _parse_unary,
    Binary.mnemonic: _parse_binary,
    MulAdd.mnemonic: _parse_muladd,
    Select.mnemonic: _parse_select,
    Cast.mnemonic: _parse_sram_to_sram(Cast, "cast", optional="chained"),
    Reduce.mnemonic: _parse_reduce,
    Transpose.mnemonic: _parse_transpose,
    VCopy.mnemonic: _parse_sram_to_sram(VCopy, "vcopy"),
    Dequantize.mnemonic: _parse_dequantize,
    HostTransfer.mnemonic: _parse_host_transfer,
    HostOp.mnemonic: _parse_host_op,
}


# -- lines ----------------------------------------------------------------------------


def _parse_header(line: _Line) -> tuple[str, str]:
    """``program NAME [target=NAME]`` -> (name, target)."""
    line.expect("program", "to start the program header")
    name = line.name("program name")
    target = ""
    if line.accept("target"):
        line.expect("=", "after 'target'")
        target = line.name("target name")
    line.expect_end("after the program header")
    return name, target


def _parse_tensor(line: _Line) -> DramTensor:
    line.expect("dram", "to start a DRAM tensor declaration")
    name = line.tensor_name("DRAM tensor name (%name) after 'dram'")
    line.expect(":", "after DRAM tensor name")
    dtype, shape = _parse_type(line, f"%{name}")
    role = line.take() if line.peek() in ROLES else None
    if role is None:
        raise line.fail(f"role of %{name} ({_choices(ROLES)})")
    line.expect_end("after DRAM tensor declaration")
    return DramTensor(name, shape, dtype, role)


def _parse_deps(line: _Line) -> tuple[int, ...]:
    if not line.accept("after"):
        return ()
    deps = [line.integer("command id after 'after'")]
    while line.accept(","):
        deps.append(line.integer("command id after ','"))
    return tuple(deps)


def _parse_source(line: _Line) -> str:
    comment = line.comment
    if not comment:
        return ""
    if not comment.startswith('"'):
        return comment
    try:
        value = json.loads(comment)
    except json.JSONDecodeError as exc:
        raise line.error(f"bad quoted source comment: {exc.msg}", line.count) from None
    if not isinstance(value, str):
        raise line.error("quoted source comment must be a string", line.count)
    return value


def _parse_command(line: _Line) -> Command:
    cid = line.integer("command id")
    line.expect(":", "after command id")
    engine = line.peek()
    if engine.startswith('"') or not _ENGINE_RE.fullmatch(engine):
        raise line.fail("engine (core<N>.dma<M>, core<N>.mxu<M>, core<N>.vpu, "
                        "tdma, hdma or host)")
    line.pos += 1
    parser = _OP_PARSERS.get(line.peek())
    if parser is None:
        raise line.fail(f"op mnemonic ({_choices(list(_OP_PARSERS))})")
    mnemonic = line.take()
    op = parser(line)
    deps = _parse_deps(line)
    if line.pos < line.count:
        raise line.error(f"unexpected {line.got()} after {mnemonic} command "
                         f"(expected 'after', '#' or end of line)")
    return Command(cid, engine, op, deps, _parse_source(line))


class _ProgramParser:
    """Accumulates header, tensors and commands while walking the lines."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.header: tuple[str, str] | None = None
        self.tensors: dict[str, DramTensor] = {}
        self.tensor_lines: dict[str, int] = {}
        self.commands: list[Command] = []

    def parse(self, text: str) -> Program:
        number = 0
        for number, raw in enumerate(text.split("\n"), start=1):
            raw = raw.removesuffix("\r")
            huge = _HUGE_NUMBER.search(raw.split("#", 1)[0])
            if huge:
                raise ParseError(f"number {huge.group()[:12]}... has {len(huge.group())} "
                                 f"digits; sizes, offsets and cycles have at most 18",
                                 number, huge.start() + 1, self.source)
            line = _Line(raw, number, self.source)
            if line.count:
                self._line(line)
        if self.header is None:
            raise ParseError("expected 'program <name>' header, got end of input",
                             max(number, 1), 1, self.source)
        name, target = self.header
        return Program(name, tuple(self.tensors.values()), tuple(self.commands), target)

    def _line(self, line: _Line) -> None:
        if self.header is None:
            self.header = _parse_header(line)
            return
        first = line.tokens[0]
        if first == "dram":
            self._tensor(line)
            return
        if first == "program":
            raise line.error("duplicate 'program' header", 0)
        if not _INT_RE.fullmatch(first):
            raise line.fail("'dram' or a command ('<id>: <engine> <op> ...')")
        self.commands.append(_parse_command(line))

    def _tensor(self, line: _Line) -> None:
        tensor = _parse_tensor(line)
        if tensor.name in self.tensors:
            first = self.tensor_lines[tensor.name]
            raise line.error(f"duplicate DRAM tensor %{tensor.name} "
                             f"(first declared on line {first})", 1)
        self.tensors[tensor.name] = tensor
        self.tensor_lines[tensor.name] = line.number


def parse_program(text: str, source: str = "<program>") -> Program:
    """Parse the text form (see the module docstring for the grammar).

    ``source`` names the text in error messages (a file name, usually).
    """
    return _ProgramParser(source).parse(text)


def load_program(path: str | os.PathLike[str]) -> Program:
    """Parse a ``.rbln`` file; errors name the file, line and column."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ParseError(f"not UTF-8 text (byte 0x{data[exc.start]:02x}); a .rbln program "
                         f"is UTF-8", line, column, str(path)) from None
    return parse_program(text, source=str(path))
