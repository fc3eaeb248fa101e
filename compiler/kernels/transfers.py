"""Moving a box of a value between DRAM and a dense scratchpad buffer: one DMA command
per DRAM piece of the value's view (:meth:`compiler.emit.Emitter.dram_places`), large
pieces split over a core's DMA engines."""

from __future__ import annotations

import math

from compiler.graph import Value
from compiler.ir.operands import DramRef, Slice, SramRef
from compiler.ir.ops import Load, Store
from compiler.kernels.common import Box, Context

SPLIT_BYTES = 64 * 1024
"""Transfers larger than this are split over a core's DMA engines."""

Transfer = tuple[DramRef, int, tuple[int, ...] | None]
"""A DMA command's DRAM box, and where it lies in the buffer of the whole box: element
offset and strides (None: dense)."""


def sub(ref: SramRef, shape: tuple[int, ...], element_offset: int = 0) -> SramRef:
    return SramRef(ref.space, ref.offset + element_offset * ref.dtype.itemsize, tuple(shape),
                   ref.dtype)


def placed(buf: SramRef, ref: DramRef, offset: int, strides: tuple[int, ...] | None
            ) -> SramRef:
    """The part of ``buf`` a transfer of ``ref`` fills or drains."""
    if strides is None:
        return sub(buf, ref.shape, offset)
    return SramRef(buf.space, buf.offset + offset * buf.dtype.itemsize, ref.shape, buf.dtype,
                   strides)


def _split_ref(ref: DramRef, parts: int) -> list[tuple[DramRef, int]]:
    """Cut a box along its first non-unit dim into up to ``parts`` pieces, with each
    piece's element offset in the row-major buffer of the whole box."""
    shape = ref.shape
    dim = next((d for d, n in enumerate(shape) if n > 1), None)
    if dim is None or parts <= 1:
        return [(ref, 0)]
    inner = math.prod(shape[dim + 1:])
    s = ref.slices[dim]
    length = shape[dim]
    chunk = -(-length // min(parts, length))
    out = []
    for lo in range(0, length, chunk):
        hi = min(lo + chunk, length)
        piece = Slice(s.start + lo * s.step, s.start + (hi - 1) * s.step + 1, s.step)
        out.append((DramRef(ref.tensor, ref.slices[:dim] + (piece,) + ref.slices[dim + 1:]),
                    lo * inner))
    return out


def pieces(ctx: Context, nbytes: int, kind: str) -> int:
    """Commands a dense transfer of ``nbytes`` is cut into: one a :data:`SPLIT_BYTES`,
    at most one a load engine (a store keeps to its one engine)."""
    if kind == "store":
        return 1
    engines = ctx.config.core.dma.engines
    usable = engines - 1 if kind == "load" and engines > 1 else engines
    return min(usable, -(-nbytes // SPLIT_BYTES))


def load_dense(ctx: Context, ref: DramRef, buf: SramRef, core: int, source: str) -> None:
    """Load the DRAM box ``ref`` into the dense ``buf`` of its shape: one command, or
    over :data:`SPLIT_BYTES` pieces on the core's load engines (a convolution's weight
    block of 288 KiB on one 256 B/cycle engine took 1,760 cycles)."""
    nbytes = math.prod(ref.shape) * buf.dtype.itemsize
    for piece, offset in _split_ref(ref, pieces(ctx, nbytes, "load")):
        ctx.em.emit(ctx.em.dma(core, "load"), Load(piece, sub(buf, piece.shape, offset)),
                    source)


def dram_transfers(ctx: Context, value: Value, box: Box, kind: str) -> list[Transfer]:
    """The DMA commands moving ``box`` of ``value``, large dense pieces split over the
    engines. Pieces interleaved in the buffer (strided) are left whole: the emitter
    tracks a strided piece of more than ``EXACT_RUNS`` rows by its span, and the spans
    overlap, so on several engines each would wait for the one before (fewer rows are
    tracked exactly and could spread, as a packed int4 tile's commands do,
    :meth:`~compiler.kernels.matmul_dequant.DequantWeights.load_packed`; not measured
    here)."""
    places = ctx.em.dram_places(ctx.view(value), box)
    if any(strides is not None for _, _, strides in places):
        return places
    out: list[Transfer] = []
    for ref, offset, _ in places:
        parts = pieces(ctx, math.prod(ref.shape) * value.dtype.itemsize, kind)
        out += [(piece, offset + extra, None) for piece, extra in _split_ref(ref, parts)]
    return out


def _engines(ctx: Context, core: int, kind: str, transfers: list[Transfer]) -> list[str]:
    """A DMA engine per transfer: round robin, or one engine for all when they
    interleave in the buffer (its queue orders them; on several engines each could
    wait for the previous one's overlapping span, :func:`dram_transfers`)."""
    if any(strides is not None for _, _, strides in transfers):
        return [ctx.em.dma(core, kind)] * len(transfers)
    return [ctx.em.dma(core, kind) for _ in transfers]


def load_box(ctx: Context, value: Value, box: Box, buf: SramRef, core: int, source: str,
             kind: str = "any") -> None:
    transfers = dram_transfers(ctx, value, box, kind)
    engines = _engines(ctx, core, kind, transfers)
    for (ref, offset, strides), engine in zip(transfers, engines):
        ctx.em.emit(engine, Load(ref, placed(buf, ref, offset, strides)), source)


def store_box(ctx: Context, value: Value, box: Box, buf: SramRef, core: int, source: str,
              kind: str = "any") -> None:
    transfers = dram_transfers(ctx, value, box, kind)
    engines = _engines(ctx, core, kind, transfers)
    for (ref, offset, strides), engine in zip(transfers, engines):
        ctx.em.emit(engine, Store(placed(buf, ref, offset, strides), ref), source)
