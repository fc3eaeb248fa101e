"""An attention mask whose values are the causal triangle runs as causal attention.

Under ``torch.export`` transformers builds its causal mask as a tensor (``arange``
comparisons the frontend folds to a constant) instead of passing ``is_causal=True``,
and written-out attention adds a ``-inf`` triangle. Given the mask, the flash-attention
kernel reads it for every key tile; told the attention is causal, it skips the tiles
the triangle hides and reads no mask. Only a mask whose folded values are known is
checked, element by element: query ``i`` sees key ``j`` exactly when
``j <= i + offset``, for every batch and head the mask broadcasts over. ``offset`` 0 is
SDPA's ``is_causal`` (top-left aligned); ``Sk - Sq`` is queries at the end of a longer
key sequence (a KV cache's chunk); a mask that shows every key is no mask at all. Any
other mask (padding, a sliding window, a row with no visible key) stays the kernel's
input.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from compiler import graph as g
from compiler.graph import Graph, Value
from compiler.kernels.attention import logical_shape


def visible_keys(mask: np.ndarray) -> np.ndarray | None:
    """Which keys a mask lets each query see: a boolean mask as is (True takes part),
    an additive one where it is 0; None when an additive mask holds anything but 0 and
    -inf (it changes the scores, not only which ones count)."""
    if mask.dtype == np.bool_:
        return mask
    if not np.issubdtype(mask.dtype, np.floating):
        return None
    visible = mask == 0
    if not np.all(visible | (mask == -np.inf)):
        return None
    return visible


def causal_offset(mask: np.ndarray, sq: int, sk: int) -> int | None:
    """The ``offset`` for which ``mask`` (broadcast to ``[..., sq, sk]``) lets query
    ``i`` see exactly the keys ``j <= i + offset``, for offsets from 0 (SDPA's
    ``is_causal``) to ``sk - 1`` (every key visible); None for any other mask."""
    visible = visible_keys(mask)
    if visible is None or mask.ndim < 2:
        return None
    try:
        visible = np.broadcast_to(visible, visible.shape[:-2] + (sq, sk))
    except ValueError:
        return None
    first_row = visible[(0,) * (visible.ndim - 2) + (0,)]
    offset = int(np.count_nonzero(first_row)) - 1
    if offset < 0:
        return None  # query 0 sees no key
    offset = min(offset, sk - 1)
    rows = np.arange(sq)[:, None]
    cols = np.arange(sk)[None, :]
    if not np.array_equal(visible, np.broadcast_to(cols <= rows + offset, visible.shape)):
        return None
    return offset


def _folded(value: Value, graph: Graph) -> np.ndarray | None:
    """The values of a compile-time constant (a folded mask), else None."""
    producer = value.producer
    if producer is None or not isinstance(producer.spec, g.Constant):
        return None
    data = graph.constants.get(value.id)
    return None if data is None else np.asarray(data)


@dataclass(frozen=True)
class CausalMaskPass:
    """Attention whose folded mask is a causal triangle (or shows every key) becomes
    causal attention (or unmasked) without the mask; the mask's constant is then dead
    code unless something else reads it."""

    name: str = "causal-mask"

    def apply(self, graph: Graph) -> Graph:
        for node in graph.nodes:
            spec = node.spec
            if not isinstance(spec, g.Attention) or spec.causal:
                continue
            mask = g.attention_mask(node)
            if mask is None:
                continue
            data = _folded(mask, graph) if isinstance(mask, Value) else None
            if data is None:
                continue
            q, k = node.inputs[0], node.inputs[1]
            sq = logical_shape(q, spec.heads_after_seq[0])[-2]
            sk = logical_shape(k, spec.heads_after_seq[1])[-2]
            offset = causal_offset(data.reshape(mask.shape), sq, sk)
            if offset is None:
                continue
            node.inputs = node.inputs[:3] + node.inputs[4:]  # K/V scales stay
            if offset < sk - 1:  # else every key is visible: no mask at all
                node.spec = replace(spec, causal=True, causal_offset=offset)
        return graph
