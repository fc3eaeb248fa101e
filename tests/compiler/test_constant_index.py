"""Indexing by index lists written in the model (``x[..., [-2], :]``, Falcon's fused QKV
split) and empty slices (Phi-3's rotary pass-through half when the rotary covers every
dim): lowered on the device, equal to torch, no host work."""

from __future__ import annotations

import pytest
import torch

import compiler
from archsim.config import load_config


class ListIndex(torch.nn.Module):
    def __init__(self, index: list[int]) -> None:
        super().__init__()
        self.index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., self.index, :] * 2


class EmptyHalf(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rot, rest = x[..., :8], x[..., 8:]  # rest is empty
        return torch.cat((rot.sin(), rest), dim=-1)


def _run(model: torch.nn.Module, x: torch.Tensor, preset: str = "tiny"):
    exported = compiler.export_model(model.eval(), (x,))
    compiled = compiler.compile_graph(exported, load_config(preset))
    (out,), result = compiled.run(x)
    return compiled, out, result


@pytest.mark.parametrize("index", [[-2], [1, 2, 3], [4, 0, 5, 5, -1]],
                         ids=["one", "a-run", "scattered"])
def test_a_constant_index_list_is_slices_on_the_device(index: list[int]) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 6, 16)
    compiled, out, result = _run(ListIndex(index), x)
    torch.testing.assert_close(out, ListIndex(index)(x))
    assert compiled.fallbacks == () and result.host_cycles == 0


def test_an_empty_slice_concatenated_emits_nothing_for_it() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 4, 8)
    compiled, out, result = _run(EmptyHalf(), x)
    torch.testing.assert_close(out, EmptyHalf()(x))
    assert compiled.fallbacks == () and result.host_cycles == 0


def test_the_schedule_cache_tells_index_lists_apart() -> None:
    x = torch.randn(1, 2, 6, 4)
    for index in ([0], [5]):  # same graph, different folded constant
        _, out, _ = _run(ListIndex(index), x)
        torch.testing.assert_close(out, ListIndex(index)(x))
