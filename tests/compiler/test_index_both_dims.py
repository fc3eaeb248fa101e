"""``x[i0, i1]`` with index tensors on every dim of a 2-D tensor (a padding mask picked
per batch row and key position, as transformers builds its attention mask): the table
of picks is ``[numel, 1]``; it was the tensor itself, ``[rows, cols]``, so the picks
came back ``cols`` wide and every HF model called with a padding ``attention_mask``
fell back to the host under ``torch.compile`` ("cannot view [2, 8, 8] as [2, 8]")."""

from __future__ import annotations

import pytest
import torch

from compiler_helpers import check_op

aten = torch.ops.aten


@pytest.mark.parametrize(("rows", "cols"), [
    ((2, 1), (1, 8)),              # [arange(B)[:, None], arange(S)[None, :]]
    ((2, 1, 1, 1), (1, 1, 1, 8)),  # transformers' 4-D mask indices
    ((3,), (3,)),                   # a diagonal
])
def test_a_2d_tensor_indexed_on_both_dims_matches_torch(rows, cols) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 8) if rows != (3,) else torch.randn(3, 3)
    i0 = torch.randint(0, x.shape[0], rows)
    i1 = torch.randint(0, x.shape[1], cols)
    compiled, _ = check_op(aten.index.Tensor, (x, [i0, i1]), "tiny")  # vs torch
    assert compiled.fallbacks == ()  # on the device, no host work
