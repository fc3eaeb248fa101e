"""Compulsory DRAM traffic per source op: what the op must move at the very least.

An op's *compulsory* bytes are, for each distinct DRAM tensor its commands read, the
bytes of the union of the boxes they read (each element read once), plus for each
tensor they write the bytes of the union of the boxes written (each element written
once). A gather (an embedding lookup) reads the rows its indices pick, not its whole
table box: its compulsory bytes are the rows it gathers, each read once, as if the
indices were distinct (their values are not known to a performance-only run), capped at
the table. The op table's ``DRAM/min`` column divides the DRAM bytes the op's commands
charged by this figure: 1.0 means no element was moved twice; above 1, a tiling that
re-reads (a GEMM's A panel once per column of output tiles) or DRAM bursts wider than
the data.

These are the bytes of the DRAM tensors of the program as given: a tensor the compiler
kept in shared SRAM (:mod:`compiler.residency`) is no DRAM tensor of its program and
counts nowhere. :func:`compulsory_tensor_bytes` gives the same figure per tensor.

The union of boxes is exact: each dimension is cut at every slice boundary (and, for a
strided slice, around every element it picks), so the cells of the grid are either
wholly inside or wholly outside every box; the covered cells' sizes are summed. A
grid too large to mark (more than :data:`GRID_CELLS` cells) falls back to the sum of
the distinct boxes, capped at the tensor's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from math import prod
from types import MappingProxyType

import numpy as np

from compiler.ir.access import dram_refs
from compiler.ir.operands import Slice
from compiler.ir.ops import Gather, HostTransfer, Program

GRID_CELLS = 20_000_000
"""Largest grid of cells one tensor's union is marked on (bytes of memory)."""


def compulsory_bytes(program: Program) -> Mapping[str, int]:
    """Per command source (``""`` for untagged commands), its compulsory DRAM bytes
    (every source of the program, 0 for those that touch no DRAM)."""
    return MappingProxyType({source: sum(per_tensor.values()) for source, per_tensor
                             in compulsory_tensor_bytes(program).items()})


def compulsory_tensor_bytes(program: Program) -> Mapping[str, Mapping[str, int]]:
    """Per command source (``""`` for untagged commands), per DRAM tensor it touches,
    the compulsory bytes of it (the union of the boxes it reads plus the union of the
    boxes it writes; a gather's rows, see the module doc)."""
    boxes: dict[str, dict[tuple[str, bool], set[tuple[Slice, ...]]]] = {}
    gathered: dict[str, dict[str, int]] = {}
    for command in program.commands:
        per_source = boxes.setdefault(command.source, {})
        op = command.op
        if isinstance(op, Gather):
            rows = gathered.setdefault(command.source, {})
            elements = op.indices.shape[0] * prod(s.length for s in op.table.slices[1:])
            rows[op.table.tensor] = rows.get(op.table.tensor, 0) + elements
            continue
        for _, ref, is_write in dram_refs(op):
            written = op.to_device if isinstance(op, HostTransfer) else is_write
            per_source.setdefault((ref.tensor, written), set()).add(ref.slices)
    tensors = program.tensor_map
    result = {}
    for source, groups in boxes.items():
        per_tensor: dict[str, int] = {}
        for (name, _), slices in groups.items():
            tensor = tensors[name]
            per_tensor[name] = (per_tensor.get(name, 0)
                                + union_elements(tensor.shape, slices) * tensor.dtype.itemsize)
        for name, elements in gathered.get(source, {}).items():
            tensor = tensors[name]
            per_tensor[name] = (per_tensor.get(name, 0)
                                + min(elements, prod(tensor.shape)) * tensor.dtype.itemsize)
        result[source] = MappingProxyType(per_tensor)
    return MappingProxyType(result)


def union_elements(shape: tuple[int, ...], boxes: Iterable[tuple[Slice, ...]]) -> int:
    """Elements of a tensor of ``shape`` covered by at least one of ``boxes``."""
    boxes = [b for b in set(boxes) if all(s.length for s in b)]
    if not boxes:
        return 0
    if len(boxes) == 1:
        return prod(s.length for s in boxes[0])
    cuts = [_cuts(dim, [b[dim] for b in boxes]) for dim in range(len(shape))]
    cells = prod(len(c) - 1 for c in cuts)
    if cells > GRID_CELLS:
        return min(prod(shape), sum(prod(s.length for s in b) for b in boxes))
    covered = np.zeros(tuple(len(c) - 1 for c in cuts), dtype=bool)
    for box in boxes:
        covered[np.ix_(*(_cells(s, c) for s, c in zip(box, cuts)))] = True
    widths = [np.diff(np.asarray(c, dtype=np.int64)) for c in cuts]
    return _weighted_sum(covered, widths)


def _weighted_sum(covered: np.ndarray, widths: list[np.ndarray]) -> int:
    """Sum of the covered cells' volumes (product of their widths along each dim)."""
    total = covered.astype(np.int64)
    for width in reversed(widths):
        total = total @ width  # contracts the last remaining dimension
    return int(total)


def _cuts(dim: int, slices: list[Slice]) -> list[int]:
    """Sorted boundaries along one dimension so every slice covers whole cells."""
    points: set[int] = set()
    for s in set(slices):
        if s.step == 1:
            points.update((s.start, s.stop))
        else:
            for i in range(s.start, s.stop, s.step):
                points.update((i, i + 1))
    return sorted(points)


def _cells(s: Slice, cuts: list[int]) -> np.ndarray:
    """Indices of the cells along one dimension that slice ``s`` covers."""
    lo = np.searchsorted(cuts, s.start)
    if s.step == 1:
        return np.arange(lo, np.searchsorted(cuts, s.stop))
    starts = np.searchsorted(cuts, np.arange(s.start, s.stop, s.step))
    return starts if len(starts) else np.arange(lo, lo)


def ratio(dram_bytes: int, compulsory: int) -> float | None:
    """DRAM bytes over compulsory bytes (None when the op must move nothing)."""
    return dram_bytes / compulsory if compulsory else None


__all__ = ["GRID_CELLS", "compulsory_bytes", "compulsory_tensor_bytes", "ratio",
           "union_elements"]
