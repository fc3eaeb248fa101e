"""Rotary's rotate-half (:class:`compiler.graph.RotateHalf`) on a tile in the scratchpad.

The tile's last axis is whole (the fusion pass keeps it so); each half of every row is
a strided view of the tile buffer, so the permutation is two vector ops over half the
tile each, with no data through DRAM.
"""

from __future__ import annotations

import math

from compiler.emit import Emitter
from compiler.ir.operands import SramRef
from compiler.ir.ops import Unary, UnaryKind, VCopy


def halves(ref: SramRef) -> tuple[SramRef, SramRef]:
    """The first and second halves of the last axis of a dense tile ``ref``, each as a
    ``[rows, half]`` view striding over the tile's rows."""
    size = ref.shape[-1]
    rows, half = math.prod(ref.shape[:-1]), size // 2
    item = ref.dtype.itemsize
    return tuple(SramRef(ref.space, ref.offset + start * item, (rows, half), ref.dtype,
                         (size, 1)) for start in (0, half))


def emit_rotate_half(em: Emitter, x: SramRef, out: SramRef, vpu: str, source: str) -> None:
    """``out[..., :h] = -x[..., h:]`` and ``out[..., h:] = x[..., :h]``: the high half
    negated into the low one (an elementwise op), the low half copied into the high one
    (a copy). Together they cost what one copy pass over the tile does, as a lane
    permutation on a vector unit does (each element read and written once), plus one
    more pipeline latency."""
    (x_low, x_high), (out_low, out_high) = halves(x), halves(out)
    em.emit(vpu, Unary(UnaryKind.neg, x_high, out_low), source)
    em.emit(vpu, VCopy(x_low, out_high), source)
