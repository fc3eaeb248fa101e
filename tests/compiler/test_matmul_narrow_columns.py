"""A matmul whose columns give each array less than its width still spreads over every
core (:func:`compiler.cost.split_sizes`): 768 columns on tpu-v4's 2 cores x 4 arrays
are 96 an array, not one core's four arrays at 192 while the other core idles."""

from __future__ import annotations

import pytest
import torch

from archsim.simulator import Simulator
from compiler import compile_op, cost
from compiler.compile import clear_cache
from compiler.cost import split_sizes, tile_sizes
from compiler.ir.ops import MatMul
from compiler_helpers import check_op, config

aten = torch.ops.aten


def test_shares_narrower_than_an_array_are_offered_unrounded() -> None:
    assert split_sizes(192, 128, 2) == [96, 128, 192]
    # shares of a whole array or more are rounded up to whole arrays, as before
    assert split_sizes(768, 128, 2) == sorted(set(tile_sizes(768, 128)) | {384})
    assert split_sizes(300, 128, 3) == sorted(set(tile_sizes(300, 128)) | {100, 256})


def _projection(cfg):
    a = torch.empty(128, 3072, device="meta", dtype=torch.bfloat16)
    b = torch.empty(3072, 768, device="meta", dtype=torch.bfloat16)
    return compile_op(aten.mm.default, (a, b), {}, cfg)


def test_bert_projection_runs_on_both_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config("tpu-v4")
    compiled = _projection(cfg)
    matmuls = [c for c in compiled.program.commands if isinstance(c.op, MatMul)]
    assert {c.engine for c in matmuls} == {f"core{c}.mxu{a}" for c in (0, 1)
                                           for a in range(4)}
    assert {c.op.b.shape[-1] for c in matmuls} == {96}
    both = Simulator(cfg).run(compiled.program).total_cycles
    # shares rounded up to whole arrays, as before: one core's four arrays at 192
    # columns, its three load engines streaming all 4.5 MiB of weights alone
    monkeypatch.setattr(cost, "split_sizes", lambda size, unit, parts: sorted(
        set(tile_sizes(size, unit)) | {min(size, -(-(-(-size // d)) // unit) * unit)
                                       for d in range(2, parts + 1)}))
    cost.choose_matmul_tiling.cache_clear()
    clear_cache()
    try:
        alone = _projection(cfg)
        assert {c.engine.split(".")[0] for c in alone.program.commands
                if isinstance(c.op, MatMul)} == {"core0"}
        one_core = Simulator(cfg).run(alone.program).total_cycles
    finally:
        cost.choose_matmul_tiling.cache_clear()
        clear_cache()
    assert both < 0.85 * one_core, (both, one_core)


def test_numbers_match_torch() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(128, 768), torch.randn(768, 768) / 768 ** 0.5
    compiled, _ = check_op(aten.mm.default, (a, b), "tpu-v4")
    matmuls = [c for c in compiled.program.commands if isinstance(c.op, MatMul)]
    assert {c.engine.split(".")[0] for c in matmuls} == {"core0", "core1"}
