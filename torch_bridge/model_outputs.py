"""A user's model as archsim times it: one forward pass returning its tensors.

Hugging Face models return ``ModelOutput`` objects, and decoders (``use_cache=True`` by
default) return a ``DynamicCache`` that ``torch.export`` cannot flatten. :class:`Forward`
wraps a model so that a forward pass runs without a KV cache (``use_cache=False`` when
the model's ``forward`` takes it and the caller did not set it) and returns the tensor
leaves of whatever the model returns, in order. Cached decoding is ``archsim llm``'s job.
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


def tensor_leaves(value: Any) -> tuple[torch.Tensor, ...]:
    """The tensors in ``value`` (tensors, tuples, dicts, ``ModelOutput``), in order;
    anything else (a cache object, None, numbers) is dropped."""
    leaves = torch.utils._pytree.tree_leaves(value)
    return tuple(x for x in leaves if isinstance(x, torch.Tensor))


class Forward(torch.nn.Module):
    """``model(*args, **kwargs)`` with ``use_cache=False`` added where the model takes it,
    returning :func:`tensor_leaves` of the output."""

    def __init__(self, model: torch.nn.Module,
                 kwargs: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.model = model
        self.extra = dict(kwargs or {})
        if "use_cache" not in self.extra and _takes(model, "use_cache"):
            self.extra["use_cache"] = False

    def forward(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
        return tensor_leaves(self.model(*args, **{**self.extra, **kwargs}))


__all__ = ["Forward", "tensor_leaves"]
