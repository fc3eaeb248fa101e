"""Padding and rearrangements built from copies: reflection and replication padding
(each padded dim re-read at compile-time positions: slices or an indexed gather),
constant padding of any dims (negative amounts crop), channel shuffle (a transpose of
channel groups) and im2col (one strided slice of the padded input per kernel tap)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from compiler import graph as g
from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.lowerings.movement import lower_constant_pad as _two_dims
from compiler.lowerings.registry import lowering
from compiler.lowerings.windows import pad_trailing, strided_tap, take

aten = torch.ops.aten


def _pairs(pad: Any) -> list[tuple[int, int]]:
    """torch's flat pad list (last dim first) as (before, after) per trailing dim, in dim
    order."""
    pad = [int(p) for p in pad]
    return [(pad[i], pad[i + 1]) for i in range(0, len(pad), 2)][::-1]


def _reflect(size: int, lo: int, hi: int) -> np.ndarray:
    pos = np.arange(-lo, size + hi)
    pos = np.abs(pos)
    return np.where(pos >= size, 2 * (size - 1) - pos, pos)


def _replicate(size: int, lo: int, hi: int) -> np.ndarray:
    return np.clip(np.arange(-lo, size + hi), 0, size - 1)


def _repad(b: GraphBuilder, x: Value, pad: Any, rule: Any) -> Value:
    """Each padded dim read back at the positions ``rule`` gives (in order)."""
    pairs = _pairs(pad)
    rank = len(x.shape)
    for i, (lo, hi) in enumerate(pairs):
        if lo or hi:
            dim = rank - len(pairs) + i
            x = take(b, x, dim, rule(x.shape[dim], lo, hi))
    return x


def _register_repad(rule: Any, *ops: Any) -> None:
    def lower(b: GraphBuilder, x: Value, padding: Any) -> Value:
        return _repad(b, x, padding, rule)
    lowering(*ops)(lower)


_register_repad(_reflect, aten.reflection_pad1d.default, aten.reflection_pad2d.default,
                aten.reflection_pad3d.default)
_register_repad(_replicate, aten.replication_pad1d.default, aten.replication_pad2d.default,
                aten.replication_pad3d.default)


@lowering(aten.constant_pad_nd.default)
def lower_constant_pad_nd(b: GraphBuilder, x: Value, pad: list[int],
                          value: float = 0.0) -> Value:
    """The last two dims by the DMA's pad as before; further dims and crops by
    concatenation and slices."""
    try:
        return _two_dims(b, x, pad, value)
    except NotImplementedError:
        pass
    return pad_trailing(b, x, _pairs(pad), value)


def _circular(size: int, lo: int, hi: int) -> np.ndarray:
    return np.arange(-lo, size + hi) % size


_RULES = {"reflect": _reflect, "replicate": _replicate, "circular": _circular}
"""``F.pad``'s modes but ``constant``, as the positions each padded dim reads back."""


@lowering(aten.pad.default)
def lower_pad(b: GraphBuilder, x: Value, pad: list[int], mode: str = "constant",
              value: float | None = None) -> Value:
    """``F.pad`` as torch.export keeps it when decompositions are not run (it used to
    run on the host)."""
    if mode == "constant":
        return lower_constant_pad_nd(b, x, pad, 0.0 if value is None else value)
    if mode not in _RULES:
        raise NotImplementedError(f"pad mode {mode!r}")
    return _repad(b, x, pad, _RULES[mode])


@lowering(aten.channel_shuffle.default, aten.native_channel_shuffle.default)
def lower_channel_shuffle(b: GraphBuilder, x: Value, groups: int) -> Value:
    """[N, g, C/g, ...] -> [N, C/g, g, ...]: a transpose."""
    n, c = x.shape[:2]
    rest = x.shape[2:]
    split = b.view(x, (n, groups, c // groups) + rest)
    perm = (0, 2, 1) + tuple(range(3, 3 + len(rest)))
    return b.view(b.permute(split, perm), x.shape)


@lowering(aten.im2col.default)
def lower_im2col(b: GraphBuilder, x: Value, kernel_size: Any, dilation: Any, padding: Any,
                 stride: Any) -> Value:
    """Each kernel tap's strided window of the zero-padded input, stacked after the
    channels: [N, C * kh * kw, windows]."""
    kh, kw = (int(v) for v in kernel_size)
    dh, dw = (int(v) for v in dilation)
    ph, pw = (int(v) for v in padding)
    sh, sw = (int(v) for v in stride)
    lead, (h, w) = x.shape[:-3], x.shape[-2:]
    c = x.shape[-3]
    padded = pad_trailing(b, x, [(ph, ph), (pw, pw)], 0.0)
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    rank = len(x.shape)
    taps = []
    for i in range(kh):
        rows = strided_tap(b, padded, rank - 2, i, oh, sh, dh)
        for j in range(kw):
            tap = strided_tap(b, rows, rank - 1, j, ow, sw, dw)
            taps.append(b.view(tap, lead + (c, 1, oh * ow)))
    shape = lead + (c, kh * kw, oh * ow)
    stacked = taps[0] if len(taps) == 1 else b.add(g.Cat(len(lead) + 1), taps, shape,
                                                   x.dtype, "cat")
    return b.view(stacked, lead + (c * kh * kw, oh * ow))
