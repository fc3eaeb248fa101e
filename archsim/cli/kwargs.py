"""Typed ``--kwarg NAME=VALUE`` values for a user's model file: the keyword arguments
of the model's forward call (``archsim run my_model.py --kwarg use_cache=false``).

A value is read as ``true``/``false`` (bool, any case), ``none``/``null`` (None), an
integer, a float, JSON (a list, an object or a quoted string), else the text as given.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

_WORDS: dict[str, Any] = {"true": True, "false": False, "none": None, "null": None}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


def parse_value(text: str) -> Any:
    """``text`` as a bool, None, int, float, JSON value or string (in that order)."""
    word = _WORDS.get(text.strip().lower(), text)
    if word is not text:
        return word
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text.strip()[:1] in ("[", "{", '"'):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not valid JSON ({exc.msg})") from None
    return text


def kwarg(text: str) -> tuple[str, Any]:
    """An argparse ``type``: ``NAME=VALUE`` -> (name, typed value)."""
    name, eq, value = text.partition("=")
    if not eq or not _NAME.match(name.strip()):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected NAME=VALUE with NAME a Python identifier, e.g. "
            f"use_cache=false, output_attentions=true, num_logits_to_keep=1")
    return name.strip(), parse_value(value)


__all__ = ["kwarg", "parse_value"]
