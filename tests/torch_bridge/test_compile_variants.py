"""``torch.compile(backend="archsim")`` keeps a graph's compiled variants per (config,
call signature), at most ``MAX_VARIANTS`` of them: switching presets back and forth
does not recompile, a loop over growing lengths does not keep a program per length,
and each preset's run has that preset's cycles."""

from __future__ import annotations

import torch
from torch import nn

import compiler
import torch_bridge  # noqa: F401 - registers the backend
from torch_bridge import compile_backend, runtime

from compile_fixtures import fresh_on_atom  # noqa: F401 - autouse


def _counting(monkeypatch) -> list[tuple[str, tuple[int, ...]]]:
    """(preset, the user input's shape) per program compiled."""
    calls: list[tuple[str, tuple[int, ...]]] = []
    real = compiler.compile_graph

    def counting(gm, config, *args, **kwargs):
        shape = next(tuple(n.meta["val"].shape) for n in gm.graph.nodes
                     if n.meta.get("archsim_kind") == "user_input"
                     and isinstance(n.meta.get("val"), torch.Tensor))
        calls.append((config.name, shape))
        return real(gm, config, *args, **kwargs)

    monkeypatch.setattr(compiler, "compile_graph", counting)
    return calls


def _cycles(line: runtime.Timeline) -> list[int]:
    return [e.cycles for e in line.events if e.op.startswith("compiled ")]


def test_switching_presets_back_reuses_the_program(monkeypatch) -> None:
    calls = _counting(monkeypatch)
    model = nn.Linear(64, 64).eval()
    compiled = torch.compile(model, backend="archsim")
    x = torch.randn(4, 64)
    cycles: dict[str, list[int]] = {}
    with torch.no_grad():
        for preset in ("atom", "tpu-v4", "atom", "tpu-v4"):
            with runtime.use_config(preset):
                line = runtime.reset_timeline()
                compiled(x)
                cycles.setdefault(preset, []).extend(_cycles(line))
    assert calls == [("atom", (4, 64)), ("tpu-v4", (4, 64))]
    # each preset's own program: the cycles of a graph compiled for that preset alone
    for preset in ("atom", "tpu-v4"):
        torch._dynamo.reset()
        with runtime.use_config(preset), torch.no_grad():
            line = runtime.reset_timeline()
            torch.compile(model, backend="archsim")(x)
        assert cycles[preset] == _cycles(line) * 2
    assert cycles["atom"][0] != cycles["tpu-v4"][0]


def test_a_graph_keeps_at_most_max_variants(monkeypatch) -> None:
    calls = _counting(monkeypatch)
    compiled = torch.compile(lambda x: (x * 2).sum(0), backend="archsim", dynamic=True)
    lengths = range(2, compile_backend.MAX_VARIANTS + 3)  # dynamo keeps length 1 apart
    for length in lengths:
        compiled(torch.randn(length, 4))
    assert [shape for _, shape in calls] == [(n, 4) for n in lengths]
    compiled(torch.randn(lengths[-1], 4))  # kept: no compile
    compiled(torch.randn(2, 4))  # the least recently used, dropped: compiled again
    assert [shape for _, shape in calls[len(lengths):]] == [(2, 4)]
