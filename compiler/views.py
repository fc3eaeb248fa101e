"""Mapping boxes of a view onto the storage it aliases.

A view reshapes its base without moving data, so a box (per-dim ``(start, stop)``) in
the view is one box in the base only when the element set stays rectangular. We refine
both shapes into common "atoms" and check that per dimension. When a box does not map,
:func:`place_box` cuts it into pieces that do, at the digit boundaries of the dims it
cuts, each with its place (offset and strides) in the box's dense buffer.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

Box = tuple[tuple[int, int], ...]
Shape = tuple[int, ...]


def unit_dims_only(view: Shape, base: Shape) -> bool:
    """Whether a view shaped ``view`` of ``base`` only adds or drops unit dims (a 1-D
    convolution's ``[n, c, L]`` read as ``[n, c, 1, L]``): every box of it is one box
    of the base, with the same slices on the other dims."""
    return [n for n in view if n != 1] == [n for n in base if n != 1]


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


@dataclass(frozen=True)
class Piece:
    """A part of a view box that is one box of the base, and where its elements lie in
    the dense row-major buffer of the whole view box: from element ``offset``, dense
    (``strides`` None) or ``strides`` elements apart per dim of ``base_box``."""

    base_box: Box
    offset: int
    strides: Shape | None = None


def place_box(view: Shape, base: Shape, box: Box) -> list[Piece]:
    """The fewest base boxes covering ``box`` of the view (in buffer order), each with
    its place in the box's dense buffer.

    A range of a merged dim is cut at its digit boundaries, not row by row: columns
    0:64 of ``[256, 144]`` viewed from ``[256, 4, 36]`` are two boxes, ``[:, 0, 0:36]``
    and ``[:, 1, 0:28]``, each spanning all 256 rows (strided in the buffer, rows 64
    apart); rows of a box are cut apart only where the base cannot hold them in one box
    (a base dim merging a dim the box cuts with one it does not)."""
    if view == base:
        return [Piece(box, 0)]
    if any(hi <= lo for lo, hi in box):
        return []
    atoms = _atoms(view, base)
    vgroups = None if atoms is None else _groups(view, atoms)
    bgroups = None if atoms is None else _groups(base, atoms)
    if atoms is None or vgroups is None or bgroups is None:
        return _element_pieces(view, base, box)
    extents = [hi - lo for lo, hi in box]
    weight = [0] * len(atoms)  # an atom's digit, in elements of the box's buffer
    origin = 0
    for d, group in enumerate(vgroups):
        row = math.prod(extents[d + 1:])
        origin += box[d][0] * row
        w = row
        for i in reversed(group):
            weight[i] = w
            w *= atoms[i]
    per_dim = [_digit_ranges(lo, hi, [atoms[i] for i in group])
               for group, (lo, hi) in zip(vgroups, box)]
    pieces = []
    for combo in itertools.product(*per_dim):
        ranges = [(0, 1)] * len(atoms)
        for group, parts in zip(vgroups, combo):
            for i, r in zip(group, parts):
                ranges[i] = r
        for part in _linear_parts(ranges, atoms, bgroups, weight):
            pieces.append(_piece(part, atoms, bgroups, weight, origin))
    return sorted(pieces, key=lambda p: p.offset)


def _digit_ranges(lo: int, hi: int, sizes: list[int]) -> list[list[tuple[int, int]]]:
    """A range of a mixed-radix index as rectangular per-digit ranges, in order: a
    partial first block of the outer digit, the whole blocks, a partial last block
    (each partial block cut the same way inside)."""
    if not sizes:
        return [[]]
    rest = math.prod(sizes[1:])
    first, last = lo // rest, (hi - 1) // rest
    if first == last:
        return [[(first, first + 1)] + inner
                for inner in _digit_ranges(lo - first * rest, hi - first * rest, sizes[1:])]
    whole_lo, whole_hi = -(-lo // rest), hi // rest
    out = []
    if lo % rest:
        out += [[(first, first + 1)] + inner
                for inner in _digit_ranges(lo - first * rest, rest, sizes[1:])]
    if whole_hi > whole_lo:
        out.append([(whole_lo, whole_hi)] + [(0, n) for n in sizes[1:]])
    if hi % rest:
        out += [[(last, last + 1)] + inner
                for inner in _digit_ranges(0, hi - last * rest, sizes[1:])]
    return out


def _linear_parts(ranges: list[tuple[int, int]], atoms: list[int],
                  bgroups: list[list[int]], weight: list[int]) -> list[list[tuple[int, int]]]:
    """``ranges`` (per atom) as parts that are each one base box at one stride per base
    dim: a base dim whose digits the part does not take as a partial outer one and
    whole inner ones, or whose digits lie at other distances in the buffer than in the
    base, has its outermost ranging digit cut into single values."""
    for group in bgroups:
        wide = [i for i in group if ranges[i][1] - ranges[i][0] > 1]
        if not wide:
            continue
        first = wide[0]
        inner = group[group.index(first) + 1:]
        ok = all(ranges[i] == (0, atoms[i]) for i in inner)
        span = 1
        for i in reversed(group):
            if ok and i in wide and weight[i] != weight[group[-1]] * span:
                ok = False
            span *= atoms[i]
        if not ok:
            parts = []
            for digit in range(*ranges[first]):
                cut = list(ranges)
                cut[first] = (digit, digit + 1)
                parts += _linear_parts(cut, atoms, bgroups, weight)
            return parts
    return [ranges]


def _piece(ranges: list[tuple[int, int]], atoms: list[int], bgroups: list[list[int]],
           weight: list[int], origin: int) -> Piece:
    base_box, strides = [], []
    for group in bgroups:
        joined = _join_ranges([ranges[i] for i in group], [atoms[i] for i in group])
        assert joined is not None  # _linear_parts made every base dim one range
        base_box.append(joined)
        strides.append(weight[group[-1]] if joined[1] - joined[0] > 1 else 0)
    offset = sum(lo * w for (lo, _), w in zip(ranges, weight)) - origin
    shape = [hi - lo for lo, hi in base_box]
    dense = all(n == 1 or s == math.prod(shape[d + 1:])
                for d, (n, s) in enumerate(zip(shape, strides)))
    return Piece(tuple(base_box), offset, None if dense else tuple(strides))


def _element_pieces(view: Shape, base: Shape, box: Box) -> list[Piece]:
    """Pieces of a view with no common refinement with its base ([2, 3] of [3, 2]):
    whatever :func:`map_box` takes whole, else per row, down to single elements."""
    pieces, offset = [], 0
    for sub, base_box in _split_rows(view, base, box):
        pieces.append(Piece(base_box, offset))
        offset += math.prod(hi - lo for lo, hi in sub)
    return pieces


def _split_rows(view: Shape, base: Shape, box: Box) -> list[tuple[Box, Box]]:
    """``[(view sub-box, base box), ...]`` covering ``box`` in row-major order."""
    mapped = map_box(view, base, box)
    if mapped is not None:
        return [(box, mapped)]
    dim = next((d for d, (lo, hi) in enumerate(box) if hi - lo > 1), None)
    if dim is None:
        raise ValueError(f"box {box} of view {view} cannot map onto base {base}")
    return [piece for row in range(*box[dim])
            for piece in _split_rows(view, base,
                                     box[:dim] + ((row, row + 1),) + box[dim + 1:])]


def dense_parts(piece: Piece) -> list[tuple[Box, int]]:
    """``piece`` as base boxes each dense in the buffer, with their element offsets: its
    dims from the first one that is not laid out densely inwards, one value at a time."""
    shape = [hi - lo for lo, hi in piece.base_box]
    if piece.strides is None:
        return [(piece.base_box, piece.offset)]
    run, split = 1, len(shape)
    for d in range(len(shape) - 1, -1, -1):
        if shape[d] > 1 and piece.strides[d] != run:
            break
        run *= shape[d]
        split = d
    outer = [range(lo, hi) for lo, hi in piece.base_box[:split]]
    parts = []
    for index in itertools.product(*outer):
        at = piece.offset + sum((i - lo) * s for i, (lo, _), s in
                                zip(index, piece.base_box, piece.strides))
        parts.append((tuple((i, i + 1) for i in index) + piece.base_box[split:], at))
    return parts


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
