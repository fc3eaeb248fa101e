"""The compile cache shares schedules, never weights or folded constants."""

from __future__ import annotations

import torch

from archsim.config import load_config
from compiler.compile import compile_graph

TINY = load_config("tiny")


def _exported(seed: int) -> tuple[torch.nn.Module, torch.export.ExportedProgram, torch.Tensor]:
    torch.manual_seed(seed)
    model = torch.nn.Linear(6, 5).eval()
    x = torch.randn(3, 6)
    return model, torch.export.export(model, (x,)).run_decompositions(), x


def test_same_shapes_different_weights_give_each_models_numbers() -> None:
    first, first_ep, x = _exported(0)
    second, second_ep, _ = _exported(1)
    compiled_first = compile_graph(first_ep, TINY)
    compiled_second = compile_graph(second_ep, TINY)
    assert compiled_second.program is compiled_first.program  # the schedule is shared
    (out_first,), _ = compiled_first.run(x)
    (out_second,), _ = compiled_second.run(x)
    torch.testing.assert_close(out_first, first(x).detach())
    torch.testing.assert_close(out_second, second(x).detach())


def test_meta_export_does_not_poison_a_real_one() -> None:
    model, real_ep, x = _exported(2)
    with torch.device("meta"):
        meta_model = torch.nn.Linear(6, 5).eval()
    meta_ep = torch.export.export(meta_model, (torch.empty(3, 6, device="meta"),))
    compile_graph(meta_ep.run_decompositions(), TINY)
    (out,), _ = compile_graph(real_ep, TINY).run(x)
    torch.testing.assert_close(out, model(x).detach())
