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
    # DRAM-bound on atom: 8 cores read 2 rows each and the weight (48 KiB apiece) and
    # write 256 KiB, 640 KiB at 256 B/cycle; no byte moves before a load's 64 setup +
    # 300 DRAM latency. Twice that floor bounds it.
    floor = 64 + 300 + (8 * 48 + 256) * 1024 // 256
    assert floor <= result.total_cycles < 2 * floor
