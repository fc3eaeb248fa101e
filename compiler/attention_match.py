"""Written-out attention recognized in an FX graph, so it runs as the flash-attention
kernel.

BERT-era code (and torch.export's decomposition of SDPA) writes attention as
``softmax(q @ k^T * scale [+ mask]) @ v``: two batched matmuls around a softmax. Lowered
op by op, the scores go to DRAM and back three times. :func:`find_attention` finds the
pattern; the frontend lowers its final matmul as ``scaled_dot_product_attention`` on
the same q, k, v (and mask), and the score nodes become dead code. Only a chain none of
whose intermediate values is used elsewhere is matched, so nothing the program reads is
dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import fx

aten = torch.ops.aten

_SAME_DATA = {aten.view.default, aten._unsafe_view.default, aten.reshape.default,
              aten.expand.default, aten.clone.default}
"""Producers that only reshape or copy (expand only when it broadcasts nothing)."""


@dataclass(frozen=True)
class AttentionMatch:
    """``out = softmax(q @ k^T * scale + mask) @ v`` ended by ``node`` (the second
    matmul); q, k, v are ``[..., S, D]`` with the same leading dims."""

    q: fx.Node
    k: fx.Node
    v: fx.Node
    mask: fx.Node | None
    scale: float


def _shape(node: object) -> tuple[int, ...] | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def _source(node: object, chain: list[fx.Node]) -> object:
    """Walk up through reshapes/copies that keep every element; ``chain`` collects them."""
    while isinstance(node, fx.Node) and node.target in _SAME_DATA:
        src = node.args[0]
        before, after = _shape(src), _shape(node)
        if before is None or after is None or math.prod(before) != math.prod(after):
            break
        chain.append(node)
        node = src
    return node


def _scaled(node: object, chain: list[fx.Node]) -> tuple[object, float, object]:
    """(scores before scaling and masking, scale, mask node or None)."""
    mask = None
    if isinstance(node, fx.Node) and node.target == aten.add.Tensor and len(node.args) == 2:
        a, b = node.args
        if isinstance(b, fx.Node):
            chain.append(node)
            node, mask = a, b
    scale = 1.0
    if isinstance(node, fx.Node) and node.target in (aten.div.Tensor, aten.mul.Tensor) \
            and isinstance(node.args[1], (int, float)) and node.args[1] != 0:
        chain.append(node)
        factor = float(node.args[1])
        scale = 1.0 / factor if node.target == aten.div.Tensor else factor
        node = node.args[0]
    return node, scale, mask


def _transposed_last(node: object) -> object:
    """``x`` when ``node`` is ``x`` with its last two dims swapped, else None."""
    if not isinstance(node, fx.Node):
        return None
    if node.target == aten.transpose.int:
        dims = sorted(d % len(_shape(node) or (0, 0)) for d in node.args[1:3])
        rank = len(_shape(node) or ())
        return node.args[0] if dims == [rank - 2, rank - 1] else None
    if node.target == aten.permute.default:
        perm = list(node.args[1])
        rank = len(perm)
        want = list(range(rank - 2)) + [rank - 1, rank - 2]
        return node.args[0] if [p % rank for p in perm] == want else None
    return None


_GUARD_OPS = {aten.eq.Scalar, aten.logical_not.default, aten.any.dim, aten.any.dims}
"""What the safe softmax of SDPA's math path computes its fully-masked-row test with."""


def _unguarded(node: object, chain: list[fx.Node]) -> object:
    """The softmax under SDPA's guard ``where(no key visible, 0, softmax(s))`` (the
    form ``torch.compile`` traces), with the guard's nodes added to ``chain``; else
    ``node``. A fully masked row is left to the kernel, as for SDPA itself."""
    if not (isinstance(node, fx.Node) and node.target == aten.where.self):
        return node
    cond, zero, probs = node.args
    if not (isinstance(probs, fx.Node) and probs.target == aten._softmax.default):
        return node
    if isinstance(zero, fx.Node):
        if zero.target != aten.full_like.default or zero.args[1] != 0:
            return node
        guard = [node, zero]
    elif zero == 0:
        guard = [node]
    else:
        return node
    while isinstance(cond, fx.Node) and cond.target in _GUARD_OPS:
        guard.append(cond)
        cond = cond.args[0]
    if cond is not probs.args[0]:
        return node
    chain.extend(guard)
    return probs


def _unscaled(node: object) -> tuple[object, float]:
    """``x`` and ``c`` when ``node`` is ``x * c`` for a number ``c`` (SDPA's math path
    scales q and k by sqrt(scale) each)."""
    if isinstance(node, fx.Node) and node.target in (aten.mul.Scalar, aten.mul.Tensor) \
            and isinstance(node.args[1], (int, float)) and node.args[1] != 0:
        return node.args[0], float(node.args[1])
    return node, 1.0


def _operand(node: object) -> object:
    """The deepest ``[..., S, D]`` tensor of rank 3 or 4 that ``node`` reshapes: not the
    rank-5 broadcast behind a grouped-query ``repeat_kv`` (whose 4-D view is what the
    heads read)."""
    path: list[fx.Node] = []
    deepest = _source(node, path)
    for candidate in reversed([*path, deepest]):
        if 3 <= len(_shape(candidate) or ()) <= 4:
            return candidate
    return deepest


def _operands(scores: fx.Node) -> tuple[object, object, float]:
    """(q, k, scale folded into them) of ``scores = q' @ k'^T``."""
    q, q_scale = _unscaled(_source(scores.args[0], []))
    k_t, k_scale = _unscaled(_source(scores.args[1], []))
    k = _transposed_last(_source(k_t, []))
    if k is not None:
        k, inner = _unscaled(_operand(k))
        k_scale *= inner
    return _operand(q), (None if k is None else _operand(k)), q_scale * k_scale


def _match(node: fx.Node) -> AttentionMatch | None:
    if node.target != aten.bmm.default:
        return None
    chain: list[fx.Node] = []
    probs = _unguarded(_source(node.args[0], chain), chain)
    if not (isinstance(probs, fx.Node) and probs.target == aten._softmax.default):
        return None
    rank = len(_shape(probs) or ())
    if probs.args[1] % max(rank, 1) != rank - 1 or probs.args[2]:
        return None
    chain.append(probs)
    scores, scale, mask = _scaled(_source(probs.args[0], chain), chain)
    scores = _source(scores, chain)
    if not (isinstance(scores, fx.Node) and scores.target == aten.bmm.default):
        return None
    chain.append(scores)
    q, k, operand_scale = _operands(scores)
    scale *= operand_scale
    v = _operand(node.args[1])
    if any(not all(u is node or u in chain for u in n.users) for n in chain):
        return None  # the scores or probabilities are read elsewhere
    shapes = [_shape(x) for x in (q, k, v)]
    if any(s is None or len(s) < 3 for s in shapes):
        return None
    (qs, ks, vs), out = shapes, _shape(node)
    if not (qs[:-2] == ks[:-2] == vs[:-2] and qs[-1] == ks[-1] and ks[-2] == vs[-2]):
        return None
    if out is None or math.prod(out) != math.prod(qs[:-1]) * vs[-1]:
        return None
    return AttentionMatch(q, k, v, mask, scale)


def find_attention(graph: fx.Graph) -> dict[fx.Node, AttentionMatch]:
    """Every written-out attention in ``graph``, keyed by its final matmul."""
    found = {}
    for node in graph.nodes:
        if node.op == "call_function":
            match = _match(node)
            if match is not None:
                found[node] = match
    return found
