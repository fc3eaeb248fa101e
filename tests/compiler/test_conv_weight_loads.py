"""A convolution's weight block over 64 KiB loads in pieces on the core's load engines
(:func:`compiler.kernels.transfers.load_dense`), not as one command on one engine."""

from __future__ import annotations

import torch

from archsim.simulator import Simulator
from compiler import compile_op
from compiler.ir.ops import Load, MatMul
from compiler.kernels.transfers import SPLIT_BYTES
from compiler_helpers import config

aten = torch.ops.aten


def _compile(cin: int, cout: int, size: int):
    x = torch.empty(1, cin, size, size, device="meta", dtype=torch.bfloat16)
    w = torch.empty(cout, cin, 3, 3, device="meta", dtype=torch.bfloat16)
    cfg = config("tpu-v4")
    return cfg, compile_op(aten.convolution.default,
                           (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), {}, cfg)


def test_a_large_block_loads_once_in_pieces_on_the_load_engines() -> None:
    cfg, compiled = _compile(512, 512, 7)
    weights = [c for c in compiled.program.commands
               if isinstance(c.op, Load) and c.op.src.tensor == "arg1"]
    # every output channel's weights loaded exactly once
    channels = sorted(o for c in weights for o in range(c.op.src.slices[0].start,
                                                         c.op.src.slices[0].stop))
    assert channels == list(range(512))
    for core in (0, 1):
        mine = [c for c in weights if c.engine.startswith(f"core{core}.")]
        # three load engines (the fourth stores), pieces of one block on distinct ones
        assert {c.engine for c in mine} == {f"core{core}.dma{i}" for i in range(3)}
        assert all(c.op.src.slices[1:] == weights[0].op.src.slices[1:] for c in mine)
    assert max(c.op.dst.shape[0] for c in weights) * 512 * 9 * 2 < 128 * 512 * 9 * 2


def test_the_arrays_start_before_one_engine_could_have_loaded_the_block() -> None:
    cfg, compiled = _compile(512, 512, 7)
    result = Simulator(cfg).run(compiled.program)
    dma = cfg.core.dma
    block = 128 * 512 * 9 * 2  # the first tile's 128 output channels
    one_engine = dma.setup_latency_cycles + cfg.dram.latency_cycles + \
        block / dma.bandwidth_bytes_per_cycle
    matmuls = {c.id for c in compiled.program.commands if isinstance(c.op, MatMul)}
    first = min(e.start for e in result.trace if e.command in matmuls)
    # one engine alone: 5,208 cycles before the block is whole, the arrays wait for it
    assert first < one_engine, (first, one_engine)


def test_a_small_block_is_one_command() -> None:
    _, compiled = _compile(32, 64, 7)
    weights = [c for c in compiled.program.commands
               if isinstance(c.op, Load) and c.op.src.tensor == "arg1"]
    assert 64 * 32 * 9 * 2 < SPLIT_BYTES
    assert len(weights) == len({(c.op.src.slices[0].start, c.op.src.slices[1].start)
                                for c in weights})
    assert all(c.op.src.slices[0].stop - c.op.src.slices[0].start == 64 for c in weights)
