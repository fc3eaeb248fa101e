"""Rotary's rotate-half (:class:`compiler.graph.RotateHalf`) on a tile in the scratchpad.

The tile's last axis is whole (the fusion pass keeps it so); each half of every row is
a strided view of the tile buffer, so the permutation is two vector ops over half the
tile each, with no data through DRAM.
"""

from __future__ import annotations

import math

from archsim.errors import LoweringError
from compiler.emit import Emitter
from compiler.ir.operands import SramRef
from compiler.ir.ops import Unary, UnaryKind, VCopy
from compiler.ir.text import format_type


def halves(ref: SramRef) -> tuple[SramRef, SramRef]:
    """The first and second halves of the last axis of a dense tile ``ref``, each as a
    ``[rows, half]`` view striding over the tile's rows."""
    size = ref.shape[-1]
    rows, half = math.prod(ref.shape[:-1]), size // 2
    item = ref.dtype.itemsize
    return tuple(SramRef(ref.space, ref.offset + start * item, (rows, half), ref.dtype,
                         (size, 1)) for start in (0, half))


def emit_rotate_half(em: Emitter, x: SramRef, out: SramRef, length: int, vpu: str,
                     source: str) -> None:
    """``out[..., :h] = -x[..., h:]`` and ``out[..., h:] = x[..., :h]`` on a tile of a
    value whose last axis is ``length`` long: the high half negated into the low one (an
    elementwise op), the low half copied into the high one (a copy). Together they cost
    what one copy pass over the tile does, as a lane permutation on a vector unit does
    (each element read and written once), plus one more pipeline latency."""
    if x.shape[-1] != length or length % 2:
        raise LoweringError(f"{source}: rotate-half of {format_type(x.dtype, x.shape)} "
                            f"needs its last axis whole and even")
    (x_low, x_high), (out_low, out_high) = halves(x), halves(out)
    em.emit(vpu, Unary(UnaryKind.neg, x_high, out_low), source)
    em.emit(vpu, VCopy(x_low, out_high), source)
