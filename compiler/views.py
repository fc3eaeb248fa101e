"""Mapping boxes of a view onto the storage it aliases.

A view reshapes its base without moving data, so a box (per-dim ``(start, stop)``) in
the view is one box in the base only when the element set stays rectangular. We refine
both shapes into common "atoms" and check that per dimension. When a box does not map,
:func:`split_box` cuts it along its outermost dims into pieces that do; the pieces are
consecutive in row-major order, so they land in consecutive SRAM.
"""

from __future__ import annotations

import math

Box = tuple[tuple[int, int], ...]
Shape = tuple[int, ...]


def _atoms(view: Shape, base: Shape) -> list[int] | None:
    """Sizes of the common refinement (left to right), or None when there is none."""
    total = math.prod(view)
    if total != math.prod(base):
        return None
    bounds = {1, total}
    for shape in (view, base):
        acc = 1
        for n in reversed(shape):
            acc *= n
            bounds.add(acc)
    ordered = sorted(bounds)
    for lo, hi in zip(ordered, ordered[1:]):
        if hi % lo:
            return None
    return [ordered[i + 1] // ordered[i] for i in range(len(ordered) - 2, -1, -1)]


def _groups(shape: Shape, atoms: list[int]) -> list[list[int]] | None:
    """For each dim of ``shape``, the atom indices it spans (size-1 dims span none)."""
    out: list[list[int]] = []
    i = 0
    for n in shape:
        group: list[int] = []
        acc = 1
        while acc < n and i < len(atoms):
            acc *= atoms[i]
            group.append(i)
            i += 1
        if acc != n:
            return None
        out.append(group)
    return out


def _split_range(start: int, stop: int, sizes: list[int]) -> list[tuple[int, int]] | None:
    """A range of a mixed-radix index as per-digit ranges, if rectangular."""
    if not sizes:
        return []
    rest = math.prod(sizes[1:])
    first, last = start // rest, (stop - 1) // rest
    if first == last:
        inner = _split_range(start - first * rest, stop - first * rest, sizes[1:])
        return None if inner is None else [(first, first + 1)] + inner
    if start % rest or stop % rest:
        return None
    return [(first, last + 1)] + [(0, n) for n in sizes[1:]]


def _join_ranges(ranges: list[tuple[int, int]], sizes: list[int]) -> tuple[int, int] | None:
    """Per-digit ranges -> one range of the combined index, if contiguous."""
    start, length, seen_wide = 0, 1, False
    for (lo, hi), n in zip(ranges, sizes):
        if seen_wide and (lo, hi) != (0, n):
            return None
        start = start * n + lo
        length = length * n if seen_wide else (hi - lo)
        if hi - lo > 1:
            seen_wide = True
    if not seen_wide:
        length = 1
    return start, start + length


def map_box(view: Shape, base: Shape, box: Box) -> Box | None:
    """The base box holding exactly the elements of ``box`` of the view, or None."""
    if view == base:
        return box
    if any(hi <= lo for lo, hi in box):
        return None
    atoms = _atoms(view, base)
    if atoms is None:
        return _single_element(view, base, box)
    vgroups, bgroups = _groups(view, atoms), _groups(base, atoms)
    if vgroups is None or bgroups is None:
        return None
    atom_ranges: list[tuple[int, int]] = [(0, 1)] * len(atoms)
    for group, (lo, hi) in zip(vgroups, box):
        parts = _split_range(lo, hi, [atoms[i] for i in group])
        if parts is None:
            return None
        for i, r in zip(group, parts):
            atom_ranges[i] = r
    out = []
    for group in bgroups:
        joined = _join_ranges([atom_ranges[i] for i in group], [atoms[i] for i in group])
        if joined is None:
            return None
        out.append(joined)
    return tuple(out)


def _single_element(view: Shape, base: Shape, box: Box) -> Box | None:
    if any(hi - lo != 1 for lo, hi in box):
        return None
    flat = 0
    for (lo, _), n in zip(box, view):
        flat = flat * n + lo
    out = []
    for n in reversed(base):
        out.append((flat % n, flat % n + 1))
        flat //= n
    return tuple(reversed(out))


def split_box(view: Shape, base: Shape, box: Box) -> list[tuple[Box, Box]]:
    """``[(view sub-box, base box), ...]`` covering ``box`` in row-major order."""
    mapped = map_box(view, base, box)
    if mapped is not None:
        return [(box, mapped)]
    dim = next((d for d, (lo, hi) in enumerate(box) if hi - lo > 1), None)
    if dim is None:
        raise ValueError(f"box {box} of view {view} cannot map onto base {base}")
    lo, hi = box[dim]
    pieces: list[tuple[Box, Box]] = []
    start = lo
    while start < hi:
        length = 1 << (hi - start).bit_length()
        while length > 1:
            length //= 2
            sub = box[:dim] + ((start, min(start + length, hi)),) + box[dim + 1:]
            mapped = map_box(view, base, sub)
            if mapped is not None:
                pieces.append((sub, mapped))
                start = min(start + length, hi)
                break
        else:
            sub = box[:dim] + ((start, start + 1),) + box[dim + 1:]
            pieces += split_box(view, base, sub)
            start += 1
    return pieces


def tiles_whole(view: Shape, base: Shape, dim: int, length: int) -> bool:
    """Whether tiles of ``length`` along ``dim`` of the view, each starting at a multiple
    of ``length``, can each map onto one box of the base, as far as ``dim`` itself goes:
    every digit of the dim's mixed radix over the base that a tile crosses it must cross
    whole. (Whether they do also depends on the other dims' extents: see
    :func:`map_box`.)"""
    if view == base or length <= 1:
        return True
    atoms = _atoms(view, base)
    groups = None if atoms is None else _groups(view, atoms)
    if atoms is None or groups is None:
        return False
    sizes = [atoms[i] for i in groups[dim]]
    while len(sizes) > 1:
        rest = math.prod(sizes[1:])
        if length % rest == 0:
            return True
        if rest % length:
            return False
        sizes = sizes[1:]
    return True


def flat_boxes(shape: Shape, lo: int, hi: int) -> list[Box]:
    """Boxes of ``shape`` covering its row-major elements ``lo..hi`` (a contiguous run of
    storage) in order, as few as rows allow: the rest of a first partial row, the whole
    rows, the start of a last partial one (each partial row split the same way)."""
    if hi <= lo:
        return []
    if len(shape) == 1:
        return [((lo, hi),)]
    inner = math.prod(shape[1:])
    (r0, o0), (r1, o1) = divmod(lo, inner), divmod(hi, inner)
    if r0 == r1:
        return [((r0, r0 + 1),) + box for box in flat_boxes(shape[1:], o0, o1)]
    boxes: list[Box] = []
    if o0:
        boxes += [((r0, r0 + 1),) + box for box in flat_boxes(shape[1:], o0, inner)]
        r0 += 1
    if r1 > r0:
        boxes.append(((r0, r1),) + tuple((0, n) for n in shape[1:]))
    boxes += [((r1, r1 + 1),) + box for box in flat_boxes(shape[1:], 0, o1)]
    return boxes
