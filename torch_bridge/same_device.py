"""Operands of an npu op live on the npu, as torch requires for CUDA.

An op on npu tensors reads its operands from device memory. A CPU tensor among them
would be read where it lies, free of any host-to-device copy, so a program mixing the
devices would time work that real hardware cannot do. Torch refuses such calls for CUDA
("Expected all tensors to be on the same device") and so does the npu, with CUDA's
common exceptions: CPU scalars (0-dim tensors, which TensorIterator takes as numbers),
copies between the devices, and CPU index tensors in advanced indexing. Not exactly
CUDA's per-op rules (which Python cannot read): a 0-dim CPU tensor passes every op here,
where CUDA refuses it in a few (``index_select``, ``embedding``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from archsim.errors import DeviceMismatchError

aten = torch.ops.aten

_ANY = frozenset({"*"})
"""Every argument may be on the CPU (a copy between the devices)."""

CPU_ARGUMENTS: dict[torch._ops.OpOverload, frozenset[str]] = {
    aten.copy_.default: _ANY,
    aten._copy_from.default: _ANY,
    aten._copy_from_and_resize.default: _ANY,
    aten.index.Tensor: frozenset({"indices"}),
    aten._unsafe_index.Tensor: frozenset({"indices"}),
    aten.index_put.default: frozenset({"indices"}),
    aten.index_put_.default: frozenset({"indices"}),
    aten._index_put_impl_.default: frozenset({"indices"}),
    aten._unsafe_index_put.default: frozenset({"indices"}),
}
"""Ops whose named arguments may hold CPU tensors of any shape, as with CUDA."""


def check_same_device(op: torch._ops.OpOverload, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> None:
    """Raise :class:`DeviceMismatchError` when a tensor argument of ``op`` is a CPU
    tensor with dimensions (called for every op dispatched to the npu: the common case,
    no such tensor, is one pass over the arguments without their names)."""
    if not _any_on_cpu(args) and not _any_on_cpu(kwargs.values()):
        return
    allowed = CPU_ARGUMENTS.get(op, frozenset())
    if allowed is _ANY:
        return
    for name, tensor in _tensors(op, args, kwargs):
        if _on_cpu(tensor) and name.split("[")[0] not in allowed:
            raise DeviceMismatchError(
                f"Expected all tensors to be on the same device, but found at least two "
                f"devices, npu:0 and cpu! (aten.{op._opname}.{op._overloadname} got a CPU "
                f"tensor of shape {list(tensor.shape)} as argument {name}; move it with "
                f".to('npu'), or pass a Python number or a 0-dim tensor)")


def _on_cpu(tensor: torch.Tensor) -> bool:
    """A CPU tensor that is not a scalar (``is_cpu``: ``device.type`` costs ~1 us)."""
    return tensor.is_cpu and tensor.dim() > 0


def _any_on_cpu(values: Iterable[Any]) -> bool:
    for value in values:
        if isinstance(value, torch.Tensor):
            if _on_cpu(value):
                return True
        elif isinstance(value, (list, tuple)) and any(
                isinstance(v, torch.Tensor) and _on_cpu(v) for v in value):
            return True
    return False


def _tensors(op: torch._ops.OpOverload, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
    """Each tensor argument with its schema name (``tensors[1]`` inside a list)."""
    names = [a.name for a in op._schema.arguments]
    named = [(names[i] if i < len(names) else str(i), v) for i, v in enumerate(args)]
    for name, value in (*named, *kwargs.items()):
        if isinstance(value, torch.Tensor):
            yield name, value
        elif isinstance(value, (list, tuple)):
            yield from ((f"{name}[{i}]", v) for i, v in enumerate(value)
                        if isinstance(v, torch.Tensor))


__all__ = ["CPU_ARGUMENTS", "check_same_device"]
