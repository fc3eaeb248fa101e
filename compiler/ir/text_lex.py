"""The tokens of the ``.rbln`` text form (:mod:`compiler.ir.text`): the patterns and
name tables its printer and parser share. Internal to the text form (the names stay
private).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

from compiler.ir.dtypes import DType
from compiler.ir.ops import ENGINE_PATTERN, BinaryKind, ReduceKind, UnaryKind

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
