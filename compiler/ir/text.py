"""The text form of scheduled programs (``.rbln``): a printer and a parser.

``parse_program(print_program(p)) == p`` for every program whose engine names are
well formed (see ``ENGINE`` below). The text is line oriented: one header, one line per
DRAM tensor, one line per command, in the order they appear in the :class:`Program`.
Example::

    program mm_128 target=tpu-v3
    dram %A : f32[128,256] in
    dram %C : f32[128,128] out
    0: core0.dma0 load   %A[0:128, 0:128] -> sram0[0x000000] f32[128,128]    # aten.mm
    4: core0.mxu0 matmul sram0[0x000000] f32[128,128], sram0[0x010000] f32[128,128] -> sram0[0x040000] f32[128,128] acc after 0,1
    7: core0.vpu  binary add sram0[0x000000] f32[4,8], 0.5 -> sram0[0x000100] f32[4,8] after 4
    8: host       host_op aten.cumsum.default (%X) -> (%Y) cycles=1200 after 7
    9: hdma       host_transfer to_device %X[0:4, 0:8]

Grammar (``{x}`` repeats zero or more times, ``[x]`` is optional; whitespace between
tokens is free, but a construct never spans lines)::

    file      := { blank | comment } header { tensor | command | blank | comment }
    header    := "program" NAME [ "target" "=" NAME ]
    tensor    := "dram" TENSOR ":" type ROLE                 ROLE := in | out | inout | temp
    command   := INT ":" ENGINE op [ "after" INT { "," INT } ] [ "#" SOURCE ]
    type      := DTYPE "[" [ INT { "," INT } ] "]"             DTYPE := f32 | f16 | bf16 | ...
    sram      := SPACE "[" INT "]" type [ "strides" "=" "(" INT { "," INT } ")" ]
                                                               SPACE := sram<N> | shared
    dram      := TENSOR "[" [ slice { "," slice } ] "]"
    slice     := INT ":" INT [ ":" INT ]                       (step printed only if != 1)
    value     := sram | NUMBER                                 (NUMBER is a Scalar)
    tensors   := "(" [ TENSOR { "," TENSOR } ] ")"
    op := "load" dram "->" sram
        | "store" sram "->" dram
        | "copy" sram "->" sram
        | "gather" dram "[" sram "]" "->" sram               (table rows picked by indices)
        | "matmul" sram "," sram "->" sram [ "acc" ]
        | "unary" UNARY_KIND sram "->" sram
        | "binary" BINARY_KIND value "," value "->" sram
        | "select" sram "," value "," value "->" sram
        | "cast" sram "->" sram
        | "reduce" REDUCE_KIND sram "->" sram "axis" "=" INT
        | "transpose" sram "->" sram "perm" "=" "(" [ INT { "," INT } ] ")"
        | "vcopy" sram "->" sram
        | "host_transfer" ( "to_device" | "to_host" ) dram
        | "host_op" NAME tensors "->" tensors "cycles" "=" INT

Tokens: ``NAME`` is a word (letters, digits, ``_`` and ``.``, with inner ``-``/``+``)
or a double-quoted string with JSON escapes; the printer quotes any name that is not a
plain word. ``TENSOR`` is ``%`` followed by a NAME. ``INT`` is decimal or ``0x`` hex,
optionally signed (SRAM offsets print as hex). ``NUMBER`` is anything Python's
``float`` accepts (``0.5``, ``-1e-05``, ``inf``, ``nan``); scalars print with ``repr``
so they round-trip exactly. ``ENGINE`` is ``core<N>.dma<M>``, ``core<N>.mxu<M>``,
``core<N>.vpu[<M>]``, ``tdma``, ``hdma`` or ``host``; whether the engine exists on a
given NPU is the verifier's business, not the parser's.

Comments: a line whose first non-blank character is ``#`` is ignored, as are blank
lines. A ``#`` comment after a command is that command's ``source`` (surrounding
blanks stripped); a source that would not survive that (edge blanks, control
characters, a leading ``"``) is printed as a quoted string and parsed back from it.
A comment after the header or a tensor line is ignored.

Parse errors raise :class:`~archsim.errors.ParseError` with 1-based line and column
and what was expected, e.g. ``expected '->' after load source, got 'sram0'``.
Duplicate tensor names are parse errors; everything that needs a hardware
configuration (engines, capacities, shapes, ordering) is left to
:mod:`compiler.ir.verify`.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from archsim.errors import ParseError
from compiler.ir.dtypes import DType
from compiler.ir.operands import ROLES, DramRef, DramTensor, Scalar, Shape, Slice, SramRef
from compiler.ir.ops import (
    ENGINE_PATTERN,
    Binary,
    BinaryKind,
    Cast,
    Command,
    Copy,
    Gather,
    HostOp,
    HostTransfer,
    Load,
    MatMul,
    Op,
    Program,
    Reduce,
    ReduceKind,
    Select,
    Store,
    Transpose,
    Unary,
    UnaryKind,
    VCopy,
)

__all__ = [
    "format_dram_ref", "format_shape", "format_sram_ref", "format_type", "load_program",
    "parse_program", "print_program", "save_program",
]

# ---------------------------------------------------------------- lexical structure

_HUGE_NUMBER = re.compile(r"(?<![\w.])(?:0[xX][0-9a-fA-F]{17,}|[0-9]{19,})")
"""A number no program needs (>= 10**18, past the simulator's 2**62-cycle range)."""

_WORD = r"[\w.]+(?:[-+][\w.]+)*"
_STRING = r'"(?:[^"\\]|\\.)*"'
_DTYPE_ALT = "|".join(sorted((d.value for d in DType), key=len, reverse=True))
_DIMS = r"(?:[0-9]+(?:\s*,\s*[0-9]+)*)?"
_SLICE = r"[-+]?[0-9]+:[-+]?[0-9]+(?::[-+]?[0-9]+)?"


def _capture(pattern: str) -> str:
    return f"({pattern})"


def _group(pattern: str) -> str:
    return f"(?:{pattern})"


def _sram_token(group: Callable[[str], str]) -> str:
    """``sram0[0x000100] f32[4,8]``; ``group`` decides whether the parts are captured."""
    return (rf"{group('sram[0-9]+|shared')}\[{group('0x[0-9a-fA-F]+|[0-9]+')}\] ?"
            rf"{group(_DTYPE_ALT)}\[{group(_DIMS)}\]")


def _dram_token(group: Callable[[str], str]) -> str:
    """``%A[0:128, 0:64:2]`` with a bare tensor name."""
    return rf"%{group(_WORD)}\[{group(rf'(?:{_SLICE}(?:, ?{_SLICE})*)?')}\]"


# Compound tokens: a well-formed SRAM region or DRAM box is lexed in one piece, which
# keeps the common path fast. Anything else (extra blanks, quoted tensor names, typos)
# falls through to the small tokens and is parsed piece by piece, with the same
# result or a precise error.
_SRAM_TOKEN_RE = re.compile(_sram_token(_capture))
_DRAM_TOKEN_RE = re.compile(_dram_token(_capture))
# Blanks, then one token (group 1): a compound token, a string, a trailing comment,
# an arrow, a %tensor, a (signed) word, or any other single non-blank character.
# Eating the blanks in the pattern is twice as fast as letting findall skip them.
_TOKEN_RE = re.compile(
    rf"\s*({_sram_token(_group)}|{_dram_token(_group)}"
    rf"|{_STRING}|#.*|->|%(?:{_WORD}|{_STRING})?|[-+]?{_WORD}|[^\s\w])"
)
_NAME_RE = re.compile(_WORD)
_WORD_TOKEN_RE = re.compile(rf"[-+]?{_WORD}")
_INT_RE = re.compile(r"[-+]?(?:0[xX][0-9a-fA-F]+|[0-9]+)")
_ENGINE_RE = ENGINE_PATTERN
_SPACE_RE = re.compile(r"sram[0-9]+|shared")
_HEAD_RE = re.compile(rf"%?{_WORD}|%?{_STRING}|.+")

_T = TypeVar("_T")

_DTYPES: dict[str, DType] = {d.value: d for d in DType}
_UNARY: dict[str, UnaryKind] = {k.value: k for k in UnaryKind}
_BINARY: dict[str, BinaryKind] = {k.value: k for k in BinaryKind}
_REDUCE: dict[str, ReduceKind] = {k.value: k for k in ReduceKind}
_DIRECTIONS: dict[str, bool] = {"to_device": True, "to_host": False}


def _choices(names: Sequence[str]) -> str:
    return ", ".join(names)


# ---------------------------------------------------------------- printing


def _name(text: str) -> str:
    """A name as one token: bare when it is a plain word, else a JSON string."""
    if _NAME_RE.fullmatch(text):
        return text
    return json.dumps(text)


def format_shape(shape: Shape) -> str:
    return "[" + ",".join(str(n) for n in shape) + "]"


def format_type(dtype: DType, shape: Shape) -> str:
    """``f32[128,128]``."""
    return f"{dtype.value}{format_shape(shape)}"


def _format_offset(offset: int) -> str:
    sign = "-" if offset < 0 else ""
    return f"{sign}0x{abs(offset):06x}"


def format_sram_ref(ref: SramRef) -> str:
    """``sram0[0x000100] f32[4,8]``, or ``... f32[4,8] strides=(16,1)`` for a view."""
    text = f"{ref.space}[{_format_offset(ref.offset)}] {format_type(ref.dtype, ref.shape)}"
    if ref.strides is None:
        return text
    return f"{text} strides=({','.join(str(s) for s in ref.strides)})"


def _format_slice(s: Slice) -> str:
    if s.step == 1:
        return f"{s.start}:{s.stop}"
    return f"{s.start}:{s.stop}:{s.step}"


def format_dram_ref(ref: DramRef) -> str:
    """``%A[0:128, 0:256:2]``."""
    return f"%{_name(ref.tensor)}[" + ", ".join(_format_slice(s) for s in ref.slices) + "]"


def _format_value(value: SramRef | Scalar) -> str:
    if isinstance(value, Scalar):
        return repr(float(value.value))
    return format_sram_ref(value)


def _format_tensors(names: Sequence[str]) -> str:
    return "(" + ", ".join(f"%{_name(n)}" for n in names) + ")"


def _operands(op: Op) -> str:
    """The text after the mnemonic."""
    try:
        printer = _PRINTERS[type(op)]
    except KeyError:
        raise TypeError(f"cannot print op class {type(op).__name__}: "
                        f"compiler.ir.text has no printer for it") from None
    return printer(op)


def _chained(op: Unary | Binary | Cast) -> str:
    return " chained" if op.chained else ""


_PRINTERS: dict[type[Op], Callable[[Op], str]] = {
    Load: lambda op: f"{format_dram_ref(op.src)} -> {format_sram_ref(op.dst)}",
    Store: lambda op: f"{format_sram_ref(op.src)} -> {format_dram_ref(op.dst)}",
    Copy: lambda op: f"{format_sram_ref(op.src)} -> {format_sram_ref(op.dst)}",
    Gather: lambda op: (f"{format_dram_ref(op.table)} [{format_sram_ref(op.indices)}] -> "
                        f"{format_sram_ref(op.dst)}"),
    MatMul: lambda op: (f"{format_sram_ref(op.a)}, {format_sram_ref(op.b)} -> "
                        f"{format_sram_ref(op.out)}" + (" acc" if op.accumulate else "")),
    Unary: lambda op: (f"{op.kind.value} {format_sram_ref(op.src)} -> "
                       f"{format_sram_ref(op.dst)}" + _chained(op)),
    Binary: lambda op: (f"{op.kind.value} {_format_value(op.a)}, {_format_value(op.b)} -> "
                        f"{format_sram_ref(op.dst)}" + _chained(op)),
    Select: lambda op: (f"{format_sram_ref(op.cond)}, {_format_value(op.a)}, "
                        f"{_format_value(op.b)} -> {format_sram_ref(op.dst)}"),
    Cast: lambda op: f"{format_sram_ref(op.src)} -> {format_sram_ref(op.dst)}" + _chained(op),
    Reduce: lambda op: (f"{op.kind.value} {format_sram_ref(op.src)} -> "
                        f"{format_sram_ref(op.dst)} axis={op.axis}"),
    Transpose: lambda op: (f"{format_sram_ref(op.src)} -> {format_sram_ref(op.dst)} "
                           f"perm=({','.join(str(p) for p in op.perm)})"),
    VCopy: lambda op: f"{format_sram_ref(op.src)} -> {format_sram_ref(op.dst)}",
    HostTransfer: lambda op: (("to_device " if op.to_device else "to_host ")
                              + format_dram_ref(op.ref)),
    HostOp: lambda op: (f"{_name(op.name)} {_format_tensors(op.inputs)} -> "
                        f"{_format_tensors(op.outputs)} cycles={op.cycles}"),
}


def _format_source(source: str) -> str:
    if source.isprintable() and source == source.strip() and not source.startswith('"'):
        return source
    return json.dumps(source)


def _command_body(cmd: Command, widths: tuple[int, int, int]) -> str:
    id_width, engine_width, mnemonic_width = widths
    engine = _name(cmd.engine)
    mnemonic = type(cmd.op).mnemonic
    body = (f"{cmd.id:>{id_width}}: {engine:<{engine_width}} {mnemonic:<{mnemonic_width}} "
            f"{_operands(cmd.op)}")
    if cmd.deps:
        body += " after " + ",".join(str(d) for d in cmd.deps)
    return body


_COMMENT_COLUMN_MAX = 100
_MNEMONIC_WIDTH_MAX = len("matmul")


def print_program(program: Program) -> str:
    """The text form of ``program``. Ids, engines and mnemonics are padded to
    columns and source comments aligned (at most at column 100, so one long command
    does not push every comment far right)."""
    header = f"program {_name(program.name)}"
    if program.target:
        header += f" target={_name(program.target)}"
    lines = [header]
    for t in program.tensors:
        lines.append(f"dram %{_name(t.name)} : {format_type(t.dtype, t.shape)} {t.role}")
    commands = program.commands
    widths = (max((len(str(c.id)) for c in commands), default=1),
              max((len(_name(c.engine)) for c in commands), default=1),
              min(max((len(type(c.op).mnemonic) for c in commands), default=1),
                  _MNEMONIC_WIDTH_MAX))
    bodies = [_command_body(c, widths) for c in commands]
    column = min(max((len(b) for b in bodies), default=0), _COMMENT_COLUMN_MAX)
    for cmd, body in zip(program.commands, bodies):
        if cmd.source:
            body = f"{body:<{column}}   # {_format_source(cmd.source)}"
        lines.append(body)
    return "\n".join(lines) + "\n"


def save_program(program: Program, path: str | os.PathLike[str]) -> None:
    Path(path).write_text(print_program(program), encoding="utf-8")


# ---------------------------------------------------------------- parsing


class _Line:
    """The tokens of one line and a cursor over them; builds positioned errors.

    ``tokens`` ends with an empty sentinel, so looking at the current token never
    needs a bounds check; ``count`` is the number of real tokens. Token positions are
    only computed when an error is raised, which keeps the common path a single
    ``findall`` per line.
    """

    __slots__ = ("text", "number", "source", "tokens", "count", "pos", "comment")

    def __init__(self, text: str, number: int, source: str) -> None:
        self.text = text
        self.number = number
        self.source = source
        tokens: list[str] = _TOKEN_RE.findall(text)
        self.comment: str | None = None
        if tokens and tokens[-1][0] == "#":
            self.comment = tokens.pop()[1:].strip()
        self.count = len(tokens)
        tokens.append("")
        self.tokens = tokens
        self.pos = 0

    # -- errors -------------------------------------------------------------------
    def column(self, index: int) -> int:
        """1-based column of token ``index``; past the last token, just after it."""
        spans = [m.span(1) for m in _TOKEN_RE.finditer(self.text)]
        if index < len(spans):  # a real token, or the trailing comment
            return spans[index][0] + 1
        if index > 0:
            return spans[index - 1][1] + 1
        return len(self.text) - len(self.text.lstrip()) + 1

    def error(self, message: str, index: int | None = None) -> ParseError:
        where = self.pos if index is None else index
        return ParseError(message, self.number, self.column(where), self.source)

    def got(self) -> str:
        """The current token for messages (only the head of a compound token)."""
        if self.pos >= self.count:
            return "end of line"
        return repr(_HEAD_RE.match(self.tokens[self.pos]).group())  # type: ignore[union-attr]

    def fail(self, expected: str) -> ParseError:
        """``expected <what>, got <token>`` at the current token."""
        return self.error(f"expected {expected}, got {self.got()}")

    # -- cursor -------------------------------------------------------------------
    def peek(self) -> str:
        return self.tokens[self.pos]

    def take(self) -> str:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def accept(self, literal: str) -> bool:
        if self.tokens[self.pos] == literal:
            self.pos += 1
            return True
        return False

    def expect(self, literal: str, context: str) -> None:
        if self.tokens[self.pos] != literal:
            raise self.fail(f"{literal!r} {context}")
        self.pos += 1

    def expect_end(self, context: str) -> None:
        if self.pos < self.count:
            raise self.error(f"unexpected {self.got()} {context}")

    # -- terminals ----------------------------------------------------------------
    def integer(self, what: str) -> int:
        token = self.tokens[self.pos]
        if token.isascii() and token.isdigit():
            self.pos += 1
            return int(token)
        if not _INT_RE.fullmatch(token):
            raise self.fail(what)
        self.pos += 1
        return int(token, 16 if "x" in token or "X" in token else 10)

    def name(self, what: str) -> str:
        token = self.tokens[self.pos]
        if token.startswith('"'):
            self.pos += 1
            return self._string(token, self.pos - 1)
        if not _WORD_TOKEN_RE.fullmatch(token):
            raise self.fail(what)
        self.pos += 1
        return token

    def tensor_name(self, what: str) -> str:
        token = self.tokens[self.pos]
        if not token.startswith("%") or len(token) == 1 or token.endswith("]"):
            raise self.fail(what)
        self.pos += 1
        body = token[1:]
        return self._string(body, self.pos - 1) if body.startswith('"') else body

    def choice(self, table: dict[str, _T], what: str) -> _T:
        token = self.tokens[self.pos]
        if token not in table:
            raise self.fail(f"{what} ({_choices(list(table))})")
        self.pos += 1
        return table[token]

    def _string(self, token: str, index: int) -> str:
        if len(token) < 2 or not token.endswith('"'):
            raise self.error("unterminated string", index)
        try:
            return json.loads(token)
        except json.JSONDecodeError as exc:
            raise self.error(f"bad string escape: {exc.msg}", index) from None


# -- operands -------------------------------------------------------------------------


def _parse_items(line: _Line, opening: str, closing: str, item: Callable[[], _T],
                 to_open: str, between: str) -> tuple[_T, ...]:
    """``opening [item {"," item}] closing``; ``to_open`` and ``between`` finish the
    "expected ..." messages for a missing opening and a missing separator."""
    line.expect(opening, to_open)
    if line.accept(closing):
        return ()
    items: list[_T] = []
    while True:
        items.append(item())
        if line.accept(closing):
            return tuple(items)
        line.expect(",", between)


def _parse_shape(line: _Line, what: str) -> Shape:
    return _parse_items(line, "[", "]",
                        lambda: line.integer(f"a dimension in the shape of {what}"),
                        f"to open the shape of {what}", f"or ']' in the shape of {what}")


def _parse_type(line: _Line, what: str) -> tuple[DType, Shape]:
    token = line.peek()
    dtype = _DTYPES.get(token)
    if dtype is None:
        raise line.error(f"expected dtype of {what} ({_choices(list(_DTYPES))}), "
                         f"got {line.got()}")
    line.pos += 1
    return dtype, _parse_shape(line, what)


def _dims(text: str) -> Shape:
    """``"4, 8"`` -> ``(4, 8)``; the text was validated by the token regex."""
    return tuple(int(d) for d in text.split(",")) if text else ()


@functools.lru_cache(maxsize=1 << 14)
def _sram_from_token(token: str) -> SramRef | None:
    """The region of a compound SRAM token, else None. Cached: schedules reuse a few
    buffers many times, and equal refs may share one immutable object."""
    match = _SRAM_TOKEN_RE.fullmatch(token)
    if match is None:
        return None
    space, offset, dtype, dims = match.groups()
    return SramRef(space, int(offset, 16 if "x" in offset or "X" in offset else 10),
                   _dims(dims), _DTYPES[dtype])


def _parse_sram(line: _Line, what: str) -> SramRef:
    ref = _parse_dense_sram(line, what)
    if line.pos < line.count and line.peek() == "strides":
        _parse_attribute(line, "strides", what)
        strides = _parse_items(line, "(", ")", lambda: line.integer(f"a stride of {what}"),
                               f"to open the strides of {what}",
                               f"or ')' in the strides of {what}")
        ref = SramRef(ref.space, ref.offset, ref.shape, ref.dtype, strides)
    return ref


def _parse_dense_sram(line: _Line, what: str) -> SramRef:
    space = line.peek()
    ref = _sram_from_token(space)
    if ref is not None:
        line.pos += 1
        return ref
    if not _SPACE_RE.fullmatch(space):
        raise line.fail(f"SRAM space (sram<N> or shared) for {what}")
    line.pos += 1
    line.expect("[", f"after SRAM space of {what}")
    offset = line.integer(f"byte offset of {what}")
    line.expect("]", f"after byte offset of {what}")
    dtype, shape = _parse_type(line, what)
    return SramRef(space, offset, shape, dtype)


def _parse_slice(line: _Line, what: str) -> Slice:
    start = line.integer(f"slice start in {what}")
    line.expect(":", f"after slice start in {what}")
    stop = line.integer(f"slice stop in {what}")
    if not line.accept(":"):
        return Slice(start, stop)
    return Slice(start, stop, line.integer(f"slice step in {what}"))


def _slices(text: str) -> tuple[Slice, ...]:
    """``"0:128, 0:64:2"`` -> slices; the text was validated by the token regex."""
    if not text:
        return ()
    return tuple(Slice(*(int(n) for n in part.split(":"))) for part in text.split(","))


@functools.lru_cache(maxsize=1 << 14)
def _dram_from_token(token: str) -> DramRef | None:
    """The box of a compound DRAM token, else None (cached like SRAM regions)."""
    match = _DRAM_TOKEN_RE.fullmatch(token)
    if match is None:
        return None
    return DramRef(match.group(1), _slices(match.group(2)))


def _parse_dram(line: _Line, what: str) -> DramRef:
    ref = _dram_from_token(line.peek())
    if ref is not None:
        line.pos += 1
        return ref
    tensor = line.tensor_name(f"DRAM tensor (%name) for {what}")
    slices = _parse_items(line, "[", "]", lambda: _parse_slice(line, what),
                          f"to open the slices of {what}", f"or ']' after a slice in {what}")
    return DramRef(tensor, slices)


def _parse_value(line: _Line, what: str) -> SramRef | Scalar:
    token = line.peek()
    if _SPACE_RE.match(token):
        return _parse_sram(line, what)
    try:
        value = float(token)
    except ValueError:
        raise line.fail(f"SRAM region or number for {what}") from None
    line.pos += 1
    return Scalar(value)


def _parse_tensor_list(line: _Line, what: str) -> tuple[str, ...]:
    return _parse_items(line, "(", ")",
                        lambda: line.tensor_name(f"DRAM tensor (%name) in the {what} list"),
                        f"to open the {what} list", f"or ')' in the {what} list")


def _parse_attribute(line: _Line, key: str, mnemonic: str) -> None:
    """``key =`` of an attribute such as ``axis=1``."""
    line.expect(key, f"after {mnemonic} operands")
    line.expect("=", f"after {key!r}")


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


def _parse_matmul(line: _Line) -> Op:
    a = _parse_sram(line, "matmul operand a")
    line.expect(",", "after matmul operand a")
    b = _parse_sram(line, "matmul operand b")
    line.expect("->", "after matmul operand b")
    out = _parse_sram(line, "matmul output")
    return MatMul(a, b, out, accumulate=line.accept("acc"))


def _parse_unary(line: _Line) -> Op:
    kind = line.choice(_UNARY, "unary kind")
    src = _parse_sram(line, "unary source")
    line.expect("->", "after unary source")
    return Unary(kind, src, _parse_sram(line, "unary destination"), line.accept("chained"))


def _parse_binary(line: _Line) -> Op:
    kind = line.choice(_BINARY, "binary kind")
    a = _parse_value(line, "binary operand a")
    line.expect(",", "after binary operand a")
    b = _parse_value(line, "binary operand b")
    line.expect("->", "after binary operand b")
    return Binary(kind, a, b, _parse_sram(line, "binary destination"),
                  line.accept("chained"))


def _parse_select(line: _Line) -> Op:
    cond = _parse_sram(line, "select condition")
    line.expect(",", "after select condition")
    a = _parse_value(line, "select operand a")
    line.expect(",", "after select operand a")
    b = _parse_value(line, "select operand b")
    line.expect("->", "after select operand b")
    return Select(cond, a, b, _parse_sram(line, "select destination"))


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
    Unary.mnemonic: _parse_unary,
    Binary.mnemonic: _parse_binary,
    Select.mnemonic: _parse_select,
    Cast.mnemonic: _parse_sram_to_sram(Cast, "cast", optional="chained"),
    Reduce.mnemonic: _parse_reduce,
    Transpose.mnemonic: _parse_transpose,
    VCopy.mnemonic: _parse_sram_to_sram(VCopy, "vcopy"),
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
