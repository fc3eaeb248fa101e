"""Ops that pick elements by value and return where they came from (``topk``, ``sort``,
``max.dim`` ...) leave the order of equal values free: torch does not fix which of two
tied elements comes first (``sort`` unless ``stable=True``), and its CPU kernel's
choice is not the device's. Their indices are checked for being *an* answer (valid,
distinct, pointing at the values returned) rather than CPU's answer."""

from __future__ import annotations

from typing import Any

import torch

aten = torch.ops.aten


_FREE_ORDER: dict[torch._ops.OpOverload, bool] = {
    aten.topk.default: True,
    aten.sort.default: True,
    aten.sort.stable: True,
    aten.kthvalue.default: False,
    aten.max.dim: False,
    aten.min.dim: False,
}
"""Ops whose ``(values, indices)`` may order ties freely -> whether the indices along
the dimension are distinct (several picked elements) rather than one per slice."""


def with_device_tie_order(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                          device: tuple[torch.Tensor, ...],
                          cpu: tuple[torch.Tensor, ...] | None
                          ) -> tuple[torch.Tensor, ...] | None:
    """``cpu`` (the op's results on CPU) with its indices replaced by the device's when
    those are another valid order of ties: distinct where they must be, and gathering
    the input at them gives the device's values. The values themselves are left to the
    usual comparison with CPU's. Any other case: ``cpu`` unchanged."""
    distinct = _FREE_ORDER.get(op)
    if distinct is None or cpu is None or len(device) != 2 or len(cpu) != 2:
        return cpu
    bound = _bind(op, args, kwargs)
    if op is aten.sort.stable and bound.get("stable"):
        return cpu  # a stable sort fixes the order of ties
    source, (values, indices) = bound["self"], device
    if indices.shape != cpu[1].shape or indices.dtype != cpu[1].dtype or source.dim() == 0:
        return cpu
    dim = bound.get("dim", -1) % source.dim()
    picked = indices if indices.dim() == source.dim() else indices.unsqueeze(dim)
    if picked.numel() and (picked.min() < 0 or picked.max() >= source.shape[dim]):
        return cpu
    if distinct and picked.numel() and picked.shape[dim] > 1 and bool(
            (picked.sort(dim).values.diff(dim=dim) == 0).any()):
        return cpu
    gathered = source.gather(dim, picked).reshape(values.shape)
    same = (gathered == values) | (gathered.isnan() & values.isnan()) \
        if values.is_floating_point() else gathered == values
    return (cpu[0], indices) if bool(same.all()) else cpu


def _bind(op: torch._ops.OpOverload, args: tuple[Any, ...],
          kwargs: dict[str, Any]) -> dict[str, Any]:
    """The op's arguments by schema name, defaults filled in."""
    bound = {a.name: a.default_value for a in op._schema.arguments if a.has_default_value()}
    bound.update({a.name: v for a, v in zip(op._schema.arguments, args)})
    bound.update(kwargs)
    return bound


__all__ = ["with_device_tie_order"]
