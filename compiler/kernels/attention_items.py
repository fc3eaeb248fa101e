"""Several small attention items (a (batch, head) pair of one query tile and one key
tile, such as Swin's 49x49 windows) held by one step of the flash-attention kernel:
each operand of the whole group moved by one DMA command where the items are one box
in DRAM, instead of a ~3 KB command per item and operand.

A group is a box of the lead dims ``[..., H]`` of consecutive items. Its buffers hold
the box as stored: item-major ``[items, S, D]`` for an input stored ``[B, H, S, D]``,
``[B, S, H, D]`` for one whose heads sit after the sequence, where an item's tile is a
strided view (rows ``H * D`` apart). The score, softmax and output buffers are
item-major ``[items * Sq, ...]``, so the softmax is one vector op over all the group's
rows; each item's two matmuls read their own tiles. A mask is loaded once as the box
of it the group reads and added to the scores viewed ``[..., H, Sq, Sk]``, broadcast
over the items that share it (Swin's position bias over the windows)."""

from __future__ import annotations

import math
from collections.abc import Callable

from archsim.config.model import NpuConfig
from archsim.matrix import back_to_back_saving, matmul_cycles
from compiler.cost import loads_in_flight
from compiler.graph import Value
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.ir.ops import Load
from compiler.kernels.common import Box, Context, unravel
from compiler.kernels.vector import sub

ITEMS_MAX = 8
"""Items a group holds at most: past a few the vector ops of the group are bound by
their elements, not their issue latency, and the DMA commands are no longer small."""

GROUPS_MIN = 3
"""Groups a core gets at least: fewer, bigger groups leave the pipeline's first loads
and last stores longer, with less to overlap them."""


def lead_box(first: int, count: int, batch_shape: tuple[int, ...]) -> Box | None:
    """The box of the lead dims holding flat items ``[first, first + count)``, or None
    when they are not one box (a run that wraps part-way through a dim)."""
    lo, hi = unravel(first, batch_shape), unravel(first + count - 1, batch_shape)
    box = tuple((a, b + 1) for a, b in zip(lo, hi))
    return box if math.prod(b - a for a, b in box) == count else None


def latency_bound(config: NpuConfig, sq: int, sk: int, d: int, dv: int, dtype: DType,
                  loads: int) -> bool:
    """Whether an item's DMA latencies outweigh its matmuls: ``loads`` commands, each
    the engine's setup and the DRAM latency, with as many in flight as a core's load
    engines keep, against the item's Q K^T and P V spread over the arrays (back to
    back where the weights are double-buffered). Only then does a group pay: on arrays
    that are the bound (ATOM's one array) its bigger first loads and last store only
    lengthen the pipeline's ends."""
    matrix, dma = config.core.matrix, config.core.dma
    saving = back_to_back_saving(matrix)
    mxu = (matmul_cycles(sq, d, sk, matrix, dtype) + matmul_cycles(sq, sk, dv, matrix, dtype)
           - 2 * saving) / matrix.arrays
    latency = loads * (dma.setup_latency_cycles + config.dram.latency_cycles) \
        / loads_in_flight(config)
    return latency > mxu


def group_size(batch_shape: tuple[int, ...], cores: int, fits: Callable[[int], bool]) -> int:
    """Items per group: the most (up to :data:`ITEMS_MAX`, a core getting
    :data:`GROUPS_MIN` at least, whose buffers ``fits``) that cut the batch into boxes of
    equal size."""
    batch = math.prod(batch_shape)
    for count in range(min(ITEMS_MAX, batch // (cores * GROUPS_MIN)), 1, -1):
        if batch % count == 0 and fits(count) and all(
                lead_box(g, count, batch_shape) is not None for g in range(0, batch, count)):
            return count
    return 1


def item_tile(buf: SramRef, lead: Box, item: int, rows: int, width: int,
              heads_after_seq: bool) -> SramRef:
    """Item ``item``'s ``[rows, width]`` tile of a group buffer holding box ``lead`` of
    an input as stored (see the module docstring)."""
    heads = lead[-1][1] - lead[-1][0]
    if not heads_after_seq or heads == 1:
        return sub(buf, (rows, width), item * rows * width)
    outer, head = divmod(item, heads)
    offset = (outer * rows * heads + head) * width
    return SramRef(buf.space, buf.offset + offset * buf.dtype.itemsize, (rows, width),
                   buf.dtype, (heads * width, 1))


def transposed_load(ctx: Context, k: Value, box: Box, kt: SramRef, items: int
                    ) -> Load | None:
    """The one DMA command writing ``kt`` ``[items, D, Sk]``, each item's K tile of
    ``box`` (``[..., Sk, D]``, stored ``[B, H, S, D]``) transposed, when K's tensor
    holds the box as one piece of ``[..., Sk, D]`` tiles one after another; else None
    (a K viewed from ``[B * H * S, D]``: the caller loads it as is and transposes it on
    the vector engine)."""
    nk, d = box[-2][1] - box[-2][0], box[-1][1] - box[-1][0]
    places = ctx.em.dram_places(ctx.view(k), box)
    ref = places[0][0]
    if len(places) > 1 or places[0][2] is not None or ref.shape[-2:] != (nk, d) \
            or math.prod(ref.shape[:-2]) != items:
        return None
    shape = ref.shape
    lead_strides = [math.prod(shape[i + 1:-2]) * d * nk for i in range(len(shape) - 2)]
    return Load(ref, SramRef(kt.space, kt.offset, shape, kt.dtype, (*lead_strides, 1, nk)))
