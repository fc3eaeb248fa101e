"""Parsing the ``.rbln`` text form, part one (:mod:`compiler.ir.text` gives the
grammar): a line's tokens with a cursor that builds positioned errors, and the
operands (types, SRAM and DRAM refs, values, tensor lists). Internal to the text form.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

from archsim.errors import ParseError
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, Scalar, Shape, Slice, SramRef
from compiler.ir.text_lex import (
    _DRAM_TOKEN_RE, _DTYPES, _HEAD_RE, _INT_RE, _SPACE_RE, _SRAM_TOKEN_RE, _T, _TOKEN_RE,
    _WORD_TOKEN_RE, _choices,
)

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
