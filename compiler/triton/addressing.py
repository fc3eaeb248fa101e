"""Pointer blocks to DMA boxes.

A load or store in Triton is a block of absolute addresses and a mask. archsim's DMA
moves boxes: a block that is *affine* (each block axis advances the address by a fixed
number of elements) under a *rectangular* mask (the clipped edge of a tile) is one
:class:`Access`. Any other block is a :class:`Gather`: cut along the block axis that
gives the fewest pieces into runs of slices that are each a box (a page of a paged KV
cache, the rows of a wrapped ``offs % M`` tile, one token picked by ``sorted_token_ids``),
a slice that is no box being cut again along another axis (an x-packed K cache), one
DMA descriptor per run, each paying its own fixed cost. :func:`boxes` turns an
access into DRAM boxes over the tensor's own dimensions, one per piece when a block
axis runs across a dimension's end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from compiler.ir.operands import Slice
from compiler.triton.trace import Pointer

Box = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Access:
    """The part of a block a load or store touches. ``box`` is the kept sub-box of the
    block (per axis ``(lo, hi)``); ``origin`` the element offset, in ``pointer``, of the
    box's first element; ``strides`` the element step of each block axis."""

    pointer: str
    block: tuple[int, ...]
    box: Box
    origin: int
    strides: tuple[int, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(hi - lo for lo, hi in self.box)

    @property
    def full(self) -> bool:
        return self.shape == self.block

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Gather:
    """A block moved as several boxes (``parts``, each an :class:`Access` whose box is
    relative to the whole block): a gather on loads, a scatter on stores."""

    pointer: str
    block: tuple[int, ...]
    parts: tuple[Access, ...]

    @property
    def numel(self) -> int:
        return sum(part.numel for part in self.parts)

    @property
    def full(self) -> bool:
        return self.numel == math.prod(self.block)


class AddressError(ValueError):
    """A block that is not a box (the caller names the kernel and line)."""


class NotABox(AddressError):
    """A block that is not one box (it may still be a :class:`Gather`)."""


def rectangle(mask: np.ndarray) -> Box | None:
    """The sub-box ``mask`` keeps, None if it keeps nothing; AddressError if the kept
    elements are not a box."""
    if not mask.any():
        return None
    box = []
    for axis in range(mask.ndim):
        others = tuple(a for a in range(mask.ndim) if a != axis)
        kept = np.flatnonzero(mask.any(axis=others) if others else mask)
        box.append((int(kept[0]), int(kept[-1]) + 1))
    inside = np.zeros_like(mask)
    inside[tuple(slice(lo, hi) for lo, hi in box)] = True
    if not np.array_equal(inside, mask):
        raise NotABox("the mask does not keep a rectangular part of the block "
                           "(only clipped tile edges are supported)")
    return tuple(box)


def locate(addresses: np.ndarray, mask: np.ndarray, itemsize: int,
           pointers: tuple[Pointer, ...]) -> Access | Gather | None:
    """The access of a block of byte ``addresses`` under ``mask`` (None: nothing kept)."""
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), addresses.shape)
    if addresses.ndim == 0:
        addresses, mask = addresses.reshape(1), mask.reshape(1)
    try:
        return _box(addresses, mask, itemsize, pointers)
    except NotABox:
        gathered = _gather(addresses, mask, itemsize, pointers)
        if gathered is None:
            raise
        return gathered


def _gather(addresses: np.ndarray, mask: np.ndarray, itemsize: int,
            pointers: tuple[Pointer, ...]) -> Gather | None:
    """The block as runs of boxes along the axis that needs the fewest (None: along no
    axis is every slice a box)."""
    best: list[Access] | None = None
    for axis in range(addresses.ndim):
        if addresses.shape[axis] < 2:
            continue
        try:
            parts = _runs(addresses, mask, itemsize, pointers, axis)
        except NotABox:
            continue
        if best is None or len(parts) < len(best):
            best = parts
    if best is None:
        return None
    names = {part.pointer for part in best}
    if len(names) > 1:
        raise AddressError(f"the block touches several tensor arguments "
                           f"({', '.join(sorted(names))})")
    return Gather(best[0].pointer, tuple(addresses.shape), tuple(best))


def _runs(addresses: np.ndarray, mask: np.ndarray, itemsize: int,
          pointers: tuple[Pointer, ...], axis: int) -> list[Access]:
    """Slices along ``axis`` as boxes, consecutive ones merged while the step between
    their first elements stays the same (positive) and the rest of the box agrees."""
    runs: list[Access] = []
    count = 0
    for r in range(addresses.shape[axis]):
        cut = tuple(slice(r, r + 1) if a == axis else slice(None)
                    for a in range(addresses.ndim))
        try:
            one = _box(addresses[cut], mask[cut], itemsize, pointers)
        except NotABox:  # the slice is itself a gather (a page table over an x-packed
            inner = _gather(addresses[cut], mask[cut], itemsize, pointers)  # K layout)
            if inner is None:
                raise
            runs.extend(_shifted(part, axis, r, addresses.shape) for part in inner.parts)
            count = 0
            continue
        if one is None:
            count = 0
            continue
        box = tuple((lo + r, hi + r) if a == axis else (lo, hi)
                    for a, (lo, hi) in enumerate(one.box))
        part = Access(one.pointer, tuple(addresses.shape), box, one.origin, one.strides)
        last = runs[-1] if runs and count else None
        if last is not None and _extends(last, part, axis, count):
            strides = list(last.strides)
            strides[axis] = part.origin - last.origin if count == 1 else strides[axis]
            grown = tuple((lo, hi + 1) if a == axis else (lo, hi)
                          for a, (lo, hi) in enumerate(last.box))
            runs[-1] = Access(last.pointer, last.block, grown, last.origin, tuple(strides))
            count += 1
        else:
            runs.append(part)
            count = 1
    return runs


def _shifted(part: Access, axis: int, r: int, block: tuple[int, ...]) -> Access:
    """A part of slice ``r`` along ``axis`` as a part of the whole block."""
    box = tuple((lo + r, hi + r) if a == axis else (lo, hi) for a, (lo, hi) in enumerate(part.box))
    return Access(part.pointer, tuple(block), box, part.origin, part.strides)


def _extends(run: Access, part: Access, axis: int, count: int) -> bool:
    if run.pointer != part.pointer or run.box[axis][1] != part.box[axis][0]:
        return False
    if any(run.box[a] != part.box[a] or run.strides[a] != part.strides[a]
           for a in range(len(run.box)) if a != axis):
        return False
    if count == 1:  # a 1-D block may repeat an element (``offs // PAGE``): one read
        return part.origin > run.origin or part.origin == run.origin and len(run.box) == 1
    return part.origin == run.origin + count * run.strides[axis]


def _box(addresses: np.ndarray, mask: np.ndarray, itemsize: int,
         pointers: tuple[Pointer, ...]) -> Access | None:
    """The block as one box (NotABox if it is not one)."""
    box = rectangle(mask)
    if box is None:
        return None
    kept = addresses[tuple(slice(lo, hi) for lo, hi in box)].astype(np.int64)
    first = int(kept.reshape(-1)[0])
    pointer = next((p for p in pointers if p.base <= first < p.end), None)
    if pointer is None:
        raise AddressError("the block's first kept address lies in no tensor argument")
    if pointer.dtype.itemsize != itemsize:
        raise AddressError(f"the block reads {itemsize}-byte elements of {pointer.name}, "
                           f"a {pointer.dtype} tensor (pointer casts are not supported)")
    offsets = kept - pointer.base
    if np.any(offsets % itemsize):
        raise AddressError(f"the block is not aligned to {pointer.name}'s elements")
    elements = offsets // itemsize
    origin = int(elements.reshape(-1)[0])
    strides = []
    for axis, n in enumerate(elements.shape):
        if n == 1:
            strides.append(0)
            continue
        step = [0] * elements.ndim
        step[axis] = 1
        strides.append(int(elements[tuple(step)]) - origin)
    grid = np.indices(elements.shape).reshape(elements.ndim, -1)
    expected = origin + np.tensordot(np.array(strides, dtype=np.int64), grid, axes=1)
    if not np.array_equal(expected, elements.reshape(-1)):
        raise NotABox("the block's addresses are not affine in its indices")
    if any(s == 0 and n > 1 for s, n in zip(strides, elements.shape)):
        raise NotABox("the block reads the same element along an axis")
    if any(s < 0 for s in strides):
        raise NotABox("the block walks a tensor backwards")
    if elements.min() < 0 or elements.max() >= pointer.numel:
        raise AddressError(f"the block reaches outside {pointer.name} "
                           f"({pointer.numel} elements)")
    return Access(pointer.name, tuple(addresses.shape), box, origin, tuple(strides))


def padding(access: Access | Gather) -> list[Box] | None:
    """The part of the block a load does not read (to fill with ``other``) as boxes
    of the block, disjoint from what it reads; None when that takes more than the slabs
    around one box (the caller fills the whole tile first)."""
    parts = access.parts if isinstance(access, Gather) else (access,)
    covered = np.zeros(access.block, dtype=bool)
    for part in parts:
        covered[tuple(slice(lo, hi) for lo, hi in part.box)] = True
    if covered.all():
        return []
    try:
        box = rectangle(~covered)
    except NotABox:
        box = None
    if box is not None:
        return [box]
    if len(parts) != 1:
        return None
    inner, shape, slabs = parts[0].box, access.block, []
    for axis, n in enumerate(shape):
        before = list(inner[:axis])
        after = [(0, m) for m in shape[axis + 1:]]
        lo, hi = inner[axis]
        if lo > 0:
            slabs.append(tuple(before + [(0, lo)] + after))
        if hi < n:
            slabs.append(tuple(before + [(hi, n)] + after))
    return slabs


def boxes(access: Access, shape: tuple[int, ...]) -> list[tuple[tuple[Slice, ...],
                                                                 tuple[int, ...], Box]]:
    """DRAM boxes of a tensor of ``shape`` covering ``access``: per piece, the slices
    (in the tensor's dimension order), the tensor dimension each block axis walks
    (-1 for axes of length 1 or stride 0) and the piece's sub-box of the access box
    (relative to the box start)."""
    dense = _dense_strides(shape)
    axes = tuple(_axis_dim(s, n, dense) for s, n in zip(access.strides, access.shape))
    return _pieces(access.origin, access.strides, access.shape, axes, shape, dense,
                   tuple((0, n) for n in access.shape))


def _dense_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def _axis_dim(stride: int, length: int, dense: tuple[int, ...]) -> int:
    """The tensor dimension a block axis walks: the outermost one whose element stride
    divides the axis stride."""
    if length == 1 or stride == 0:
        return -1
    if stride < 0:
        raise AddressError("the block walks a tensor backwards (negative stride)")
    for dim, d in enumerate(dense):
        if stride % d == 0:
            return dim
    return len(dense) - 1


def _pieces(origin: int, strides: tuple[int, ...], lengths: tuple[int, ...],
            axes: tuple[int, ...], shape: tuple[int, ...], dense: tuple[int, ...],
            sub: Box) -> list[tuple[tuple[Slice, ...], tuple[int, ...], Box]]:
    start = _unravel(origin, shape)
    slices = [Slice(i, i + 1) for i in start]
    used: set[int] = set()
    for axis, dim in enumerate(axes):
        if dim < 0:
            if lengths[axis] > 1:
                raise AddressError("the block repeats elements along an axis (stride 0); "
                                   "load once and broadcast instead")
            continue
        step = strides[axis] // dense[dim]
        stop = start[dim] + (lengths[axis] - 1) * step + 1
        if dim in used:
            return _split(origin, strides, lengths, axes, shape, dense, sub, axis)
        if stop > shape[dim]:
            return _wrap(origin, strides, lengths, axes, shape, dense, sub, axis,
                         start[dim], step, shape[dim])
        used.add(dim)
        slices[dim] = Slice(start[dim], stop, step)
    return [(tuple(slices), axes, sub)]


def _split(origin: int, strides: tuple[int, ...], lengths: tuple[int, ...],
           axes: tuple[int, ...], shape: tuple[int, ...], dense: tuple[int, ...],
           sub: Box, axis: int) -> list[tuple[tuple[Slice, ...], tuple[int, ...], Box]]:
    """Cut ``axis`` into single positions (each then a box of the other axes)."""
    out = []
    for i in range(lengths[axis]):
        one = list(lengths)
        one[axis] = 1
        piece_axes = list(axes)
        piece_axes[axis] = -1
        piece_sub = list(sub)
        piece_sub[axis] = (sub[axis][0] + i, sub[axis][0] + i + 1)
        out.extend(_pieces(origin + i * strides[axis], strides, tuple(one), tuple(piece_axes),
                           shape, dense, tuple(piece_sub)))
    return out


def _wrap(origin: int, strides: tuple[int, ...], lengths: tuple[int, ...],
          axes: tuple[int, ...], shape: tuple[int, ...], dense: tuple[int, ...], sub: Box,
          axis: int, first: int, step: int, size: int
          ) -> list[tuple[tuple[Slice, ...], tuple[int, ...], Box]]:
    """Cut ``axis`` where it runs past its tensor dimension's end (consecutive pages of a
    run of tokens): each chunk stays inside the dimension."""
    out = []
    done = 0
    at = first
    while done < lengths[axis]:
        n = min(lengths[axis] - done, (size - 1 - at) // step + 1)
        one = list(lengths)
        one[axis] = n
        piece_sub = list(sub)
        piece_sub[axis] = (sub[axis][0] + done, sub[axis][0] + done + n)
        out.extend(_pieces(origin + done * strides[axis], strides, tuple(one), axes, shape,
                           dense, tuple(piece_sub)))
        done += n
        at = _unravel(origin + done * strides[axis], shape)[axes[axis]] if done < \
            lengths[axis] else at
    return out


def _unravel(index: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for n in reversed(shape):
        out.append(index % n)
        index //= n
    return list(reversed(out))
