"""The lowering table: aten op overload -> function emitting graph primitives.

Filled by the :func:`lowering` decorator in the family modules; an op missing from the
table becomes a visible host op (see :mod:`compiler.frontend`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LoweringFn = Callable[..., Any]

LOWERINGS: dict[Any, LoweringFn] = {}


def lowering(*ops: Any) -> Callable[[LoweringFn], LoweringFn]:
    def register(fn: LoweringFn) -> LoweringFn:
        for op in ops:
            LOWERINGS[op] = fn
        return fn
    return register
