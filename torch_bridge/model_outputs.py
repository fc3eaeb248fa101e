"""A user's model as archsim times it: one forward pass returning its tensors.

Hugging Face models return ``ModelOutput`` objects, and decoders (``use_cache=True`` by
default) return a ``DynamicCache`` that ``torch.export`` cannot flatten. :class:`Forward`
wraps a model so that a forward pass runs without a KV cache (``use_cache=False`` when
the model's ``forward`` takes it and the caller did not set it) and returns the tensor
leaves of whatever the model returns, in order. With ``use_cache=True`` set by the caller
(``--kwarg use_cache=true``) the cache's key/value tensors are outputs too. Cached
decoding is ``archsim llm``'s job.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch


def _takes(module: torch.nn.Module, name: str) -> bool:
    try:
        parameters = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters


_CACHE_PARTS = ("self_attention_cache", "cross_attention_cache")
"""Sub-caches of an encoder-decoder cache, in order."""


def _cache_tensors(cache: Any) -> list[torch.Tensor]:
    """The key and value tensors of a Hugging Face cache object (``DynamicCache``,
    ``StaticCache``: ``cache.layers[i].keys/values``; an ``EncoderDecoderCache``: its
    two sub-caches), layer by layer; [] for anything else."""
    tensors: list[torch.Tensor] = []
    for part in _CACHE_PARTS:
        if hasattr(cache, part):
            tensors += _cache_tensors(getattr(cache, part))
    for layer in getattr(cache, "layers", None) or ():
        tensors += [t for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                    if isinstance(t, torch.Tensor)]
    return tensors


def tensor_leaves(value: Any) -> tuple[torch.Tensor, ...]:
    """The tensors in ``value`` (tensors, tuples, dicts, ``ModelOutput``), in order; a
    KV cache object contributes its key and value tensors (so with ``use_cache=True``
    the cache a forward pass writes is an output, timed as writes); anything else
    (None, numbers) is dropped."""
    leaves: list[torch.Tensor] = []
    for leaf in torch.utils._pytree.tree_leaves(value):
        leaves += [leaf] if isinstance(leaf, torch.Tensor) else _cache_tensors(leaf)
    return tuple(leaves)


class Forward(torch.nn.Module):
    """``model(*args, **kwargs)`` with ``use_cache=False`` added where the model takes it,
    returning :func:`tensor_leaves` of the output. ``bound`` holds positional arguments
    that are not tensors (``None`` for a skipped ``attention_mask``), by position: the
    forward pass takes only the tensors and puts them back in between."""

    def __init__(self, model: torch.nn.Module, kwargs: Mapping[str, Any] | None = None,
                 bound: Mapping[int, Any] | None = None) -> None:
        super().__init__()
        self.model = model
        self.extra = dict(kwargs or {})
        self.bound = dict(bound or {})
        if "use_cache" not in self.extra and _takes(model, "use_cache"):
            self.extra["use_cache"] = False

    def forward(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
        given = iter(args)
        count = len(args) + len(self.bound)
        full = [self.bound[i] if i in self.bound else next(given) for i in range(count)]
        return tensor_leaves(self.model(*full, **{**self.extra, **kwargs}))


def bind_arguments(model: torch.nn.Module, args: tuple[Any, ...],
                   kwargs: Mapping[str, Any] | None = None
                   ) -> tuple[Forward, tuple[torch.Tensor, ...]]:
    """``model(*args, **kwargs)`` as a :class:`Forward` taking only the tensors of
    ``args``, and those tensors: positional arguments that are not tensors (``(ids, None,
    decoder_ids)`` for an encoder-decoder whose mask is skipped) are bound into the
    wrapper, so the exported graph's inputs are all tensors."""
    bound = {i: a for i, a in enumerate(args) if not isinstance(a, torch.Tensor)}
    tensors = tuple(a for a in args if isinstance(a, torch.Tensor))
    return Forward(model, kwargs, bound), tensors


__all__ = ["Forward", "bind_arguments", "tensor_leaves"]
