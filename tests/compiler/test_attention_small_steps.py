"""A flash-attention step splits its query rows over the core's arrays only while each
part keeps an array's height of rows: a 49-row Swin window split four ways paid the
weight load, fill and drain four times for 13 rows each (510 cycles apiece on tpu-v4).
Steps too small to split take one array each, the next step the next array."""

from __future__ import annotations

from collections import Counter

import torch
import torch.nn.functional as F

import compiler
from compiler.compile import clear_cache
from compiler.ir.ops import MatMul
from compiler_helpers import config


class Attention(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def test_window_attention_steps_take_one_array_each_in_turn():
    torch.manual_seed(0)
    q, k, v = (torch.randn(8, 3, 49, 32, dtype=torch.bfloat16) for _ in range(3))
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(Attention(), (q, k, v)),
                                      config("tpu-v4"))
    (out,), _ = compiled.run(q, k, v)
    torch.testing.assert_close(out, Attention()(q, k, v), rtol=2e-2, atol=2e-2)
    per_engine = Counter(c.engine for c in compiled.program.commands
                         if isinstance(c.op, MatMul))
    # 24 (window, head) items, 12 per core, one key tile each: Q K^T and P V on one
    # array per item (not 4), the items of a core going round its 4 arrays: 3 apiece
    assert sum(per_engine.values()) == 24 * 2
    assert per_engine == {f"core{c}.mxu{a}": 6 for c in range(2) for a in range(4)}
    assert all(c.op.a.shape[0] == 49 for c in compiled.program.commands
               if isinstance(c.op, MatMul) and c.op.a.shape[1] == 32)
