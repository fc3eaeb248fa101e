"""An additive attention mask in a 16-bit float is added to the f32 scores after a cast
to f32 (as torch's CPU kernels add it): it used to fail the IR's verification ("vpu
binary: field b: dtype bf16 does not match dst's f32"), so Swin and T5 in bf16 or f16
did not run at all."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler.compile import clear_cache
from compiler_helpers import config


class Masked(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows, mask_shape", [(48, (1, 4, 48, 40)), (48, (1, 1, 1, 40)),
                                              (1, (1, 4, 1, 40))],
                         ids=["full", "keys", "decode"])
@pytest.mark.parametrize("preset", ["tpu-v4", "atom"])
def test_a_16_bit_additive_mask_matches_torch(dtype, rows, mask_shape, preset):
    torch.manual_seed(0)
    q = torch.randn(1, 4, rows, 32, dtype=dtype)
    k, v = (torch.randn(1, 4, 40, 32, dtype=dtype) for _ in range(2))
    mask = torch.randn(mask_shape).to(dtype)
    mask[..., ::7] = float("-inf")  # hidden keys, never a whole row
    clear_cache()
    exported = torch.export.export(Masked(), (q, k, v, mask))
    compiled = compiler.compile_graph(exported, config(preset))
    (out,), _ = compiled.run(q, k, v, mask)
    assert compiled.fallbacks == ()
    torch.testing.assert_close(out, Masked()(q, k, v, mask), rtol=2e-2, atol=2e-2)
