"""A matmul tile's fused epilogue loads its operands (a residual, a norm's per-channel
values) on the core's load engines: the engine kept for stores carries only stores, so
no operand waits out the previous tile's store latency in its queue, and the tiling
estimate's store time is the bytes at the store engine's rate alone."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import compiler
from archsim.config import load_config
from compiler.ir.ops import Load, Store
from compiler.kernels.epilogue import store_cycles


class Residual(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.o = nn.Linear(hidden, hidden, bias=False)

    def forward(self, attn: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x + self.o(attn)


@pytest.mark.parametrize("preset, rows, hidden", [("tiny", 64, 64), ("atom", 1024, 512)])
def test_the_residual_is_loaded_on_the_load_engines_and_only_stores_take_the_last(
        preset: str, rows: int, hidden: int) -> None:
    # several tiles a core, so the residual's loads take several turns of the engines
    torch.manual_seed(0)
    model = Residual(hidden).to(torch.bfloat16).eval()
    attn, x = (torch.randn(rows, hidden).to(torch.bfloat16) for _ in range(2))
    exported = torch.export.export(model, (attn, x)).run_decompositions()
    config = load_config(preset)
    compiled = compiler.compile_graph(exported, config)
    (out,), _ = compiled.run(attn, x)
    # (bf16 sums over 512 inputs: one element of the atom case rounds a unit apart)
    torch.testing.assert_close(out, model(attn, x), rtol=1.6e-2, atol=1e-2)
    assert compiled.kernels == ("o:mm",)  # the add is the projection's epilogue
    store_engines = {f"core{c}.dma{config.core.dma.engines - 1}"
                     for c in range(config.cores)}
    transfers = [(c.engine, type(c.op), c.op.src.tensor if isinstance(c.op, Load) else None)
                 for c in compiled.program.commands if isinstance(c.op, (Load, Store))]
    residual = [engine for engine, kind, src in transfers if src == "x"]
    assert residual and not set(residual) & store_engines
    assert {engine for engine, kind, _ in transfers if engine in store_engines} and \
        all(kind is Store for engine, kind, _ in transfers if engine in store_engines)


def test_a_tiles_store_time_is_its_bytes_at_the_engines_rate_or_its_share_of_dram() -> None:
    tiny = load_config("tiny")  # DMA engines 16 B/cycle; DRAM 16 B/cycle at 85% sustained
    assert store_cycles(tiny, 1024, 1) == pytest.approx(1024 / 13.6)  # DRAM binds
    assert store_cycles(tiny, 1024, 2) == pytest.approx(1024 / 6.8)  # two cores share it
    atom = load_config("atom")  # its DMA engine's rate binds one core's store
    assert store_cycles(atom, 1024, 1) == pytest.approx(
        1024 / atom.core.dma.bandwidth_bytes_per_cycle)
