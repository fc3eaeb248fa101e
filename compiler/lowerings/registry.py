"""The lowering table: aten op overload -> function emitting graph primitives.

Filled by the :func:`lowering` decorator in the family modules; an op missing from the
table becomes a visible host op (see :mod:`compiler.frontend`). Custom ops of other
libraries (``transformers::grouped_mm_fallback``) are keyed by their qualified name in
:data:`NAMED_LOWERINGS` (:func:`lowering_named`), so the compiler need not import the
library that defines them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LoweringFn = Callable[..., Any]

LOWERINGS: dict[Any, LoweringFn] = {}
NAMED_LOWERINGS: dict[str, LoweringFn] = {}
"""Custom op qualified name (``namespace::op``, any overload) -> lowering."""


def lowering(*ops: Any) -> Callable[[LoweringFn], LoweringFn]:
    """Register a lowering for aten op overloads."""
    return _registrar(LOWERINGS, ops)


def lowering_named(*names: str) -> Callable[[LoweringFn], LoweringFn]:
    """Register a lowering for custom ops by qualified name (``"transformers::op"``)."""
    return _registrar(NAMED_LOWERINGS, names)


def _registrar(table: dict[Any, LoweringFn], keys: tuple[Any, ...]
               ) -> Callable[[LoweringFn], LoweringFn]:
    def register(fn: LoweringFn) -> LoweringFn:
        for key in keys:
            table[key] = fn
        return fn
    return register


def lowering_for(target: Any) -> LoweringFn | None:
    """The lowering of an FX call target: by overload, else a custom op by its name."""
    fn = LOWERINGS.get(target)
    if fn is not None:
        return fn
    name = getattr(target, "name", None)
    if callable(name) and hasattr(target, "_schema"):
        return NAMED_LOWERINGS.get(str(name()))
    return None
