"""Vector kernels split their work over cores with a per-tile size target; a row that
must stay whole (a reduction over a long axis) may be larger than that target and
still fit the scratchpad."""

from __future__ import annotations

import torch

from compiler import compile_graph
from compiler_helpers import config
from compiler_models import RMSNorm


def test_a_long_reduced_row_larger_than_the_per_core_target_still_compiles() -> None:
    # Llama-7B's RMSNorm at seq 16 on atom: [1, 16, 4096] spread over 8 cores wants
    # tiles of ~67 KB, but one f32 row with its temporaries needs ~83 KB (atom's
    # scratchpad is 4 MiB). This used to raise CapacityError (in f16 too:
    # `archsim run llama-7b --seq 16`).
    torch.manual_seed(0)
    model = RMSNorm(4096).eval()
    x = torch.randn(1, 16, 4096)
    exported = torch.export.export(model, (x,)).run_decompositions()
    compiled = compile_graph(exported, config("atom"))
    (out,), result = compiled.run(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert result.total_cycles > 0
