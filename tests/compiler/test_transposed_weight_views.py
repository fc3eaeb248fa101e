"""A matmul's weight read transposed (``x @ w.t()``) when ``w`` was computed in another
shape and reshaped: the DMA's strided SRAM side must follow the stored tensor's dims,
not assume its last two are the matmul's ``[n, k]``. ``x @ ((w.view(64, 1, 128) * 2)
.view(64, 128)).t()`` came back off by ~100 (the size-1 dim took the ``n`` stride and
``n`` got 0) through ``torch.compile``, while ``x @ (w * 2).t()`` was right."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import compiler
from archsim.config import load_config


@pytest.mark.parametrize("stored", [(64, 1, 128), (64, 2, 64), (2, 32, 128), (8, 8, 2, 64),
                                    (64, 128)])
@pytest.mark.parametrize("preset", ["tiny", "atom"])
def test_a_reshaped_computed_weight_read_transposed(stored: tuple[int, ...],
                                                    preset: str) -> None:
    torch.manual_seed(0)
    x, w = torch.randn(8, 128), torch.randn(64, 128)

    def f(w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (x @ (w.view(stored) * 2.0).view(64, 128).t(),)

    graph = make_fx(f)(w, x)
    program = compiler.compile_graph(graph, load_config(preset))
    (got,), _ = program.run(w, x)
    torch.testing.assert_close(got, f(w, x)[0], rtol=2e-2 if preset == "atom" else 1e-4,
                               atol=2e-2 if preset == "atom" else 1e-4)


def test_through_torch_compile() -> None:
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(64, 128))
    x = torch.randn(8, 128)

    def f(x: torch.Tensor) -> torch.Tensor:
        return x @ ((w.view(64, 1, 128) * 2.0).view(64, 128)).t()

    torch.testing.assert_close(torch.compile(f, backend="archsim")(x), f(x),
                               rtol=2e-2, atol=2e-2)
