"""cross_entropy's pieces on the device: gather along the last dim with one index per
row, scatter of a value at one index per row, and nll_loss forward/backward through
torch's decompositions (which use exactly those two)."""

from __future__ import annotations

import pytest
import torch

from compiler_helpers import check_op

aten = torch.ops.aten


def _log_probs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.log_softmax(torch.randn(6, 10), -1), torch.tensor([3, 7, 0, 9, -100, 2])


@pytest.mark.parametrize("preset", ["tiny", "atom"])
def test_gather_one_index_per_row_along_the_last_dim(preset: str) -> None:
    x, target = _log_probs()
    compiled, _ = check_op(aten.gather.default, (x, 1, target.clamp(min=0)[:, None]), preset)
    assert not compiled.fallbacks


@pytest.mark.parametrize("preset", ["tiny", "atom"])
def test_scatter_a_value_at_one_index_per_row(preset: str) -> None:
    x, target = _log_probs()
    compiled, _ = check_op(aten.scatter.value, (x, 1, target.clamp(min=0)[:, None], -1.5),
                           preset)
    assert not compiled.fallbacks


@pytest.mark.parametrize("preset", ["tiny", "atom"])
def test_nll_loss_forward_and_backward_with_an_ignored_target(preset: str) -> None:
    x, target = _log_probs()
    forward, _ = check_op(aten.nll_loss_forward.default, (x, target, None, 1, -100), preset)
    backward, _ = check_op(aten.nll_loss_backward.default,
                           (torch.tensor(1.0), x, target, None, 1, -100, torch.tensor(5.0)),
                           preset)
    assert not forward.fallbacks and not backward.fallbacks


def test_gather_of_several_indices_per_row_along_the_last_dim_runs_on_the_device() -> None:
    """rows x picks x columns masked sums (BERT's token types picked by position)."""
    x, target = _log_probs()
    index = torch.stack([target.clamp(min=0), (target + 3).clamp(0, 9), target * 0], dim=1)
    compiled, _ = check_op(aten.gather.default, (x, 1, index), "tiny")
    assert not compiled.fallbacks


def test_a_gather_too_wide_for_masked_sums_is_host_work() -> None:
    x = torch.randn(64, 4096)
    index = torch.randint(0, 4096, (64, 32))  # 64 x 32 x 4096 > 2**22 masked elements
    compiled, _ = check_op(aten.gather.default, (x, 1, index), "tiny")
    assert compiled.fallbacks == ("gather_default: aten.gather.default",)


def test_scatter_along_the_first_dim_is_masked_vector_work() -> None:
    """(Once host work.) Positions x indices compared per column, the last write kept."""
    x, _ = _log_probs()
    compiled, _ = check_op(aten.scatter.value, (x, 0, torch.zeros(1, 10, dtype=torch.long),
                                                2.0), "tiny")
    assert not compiled.fallbacks

