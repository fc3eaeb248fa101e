"""``torch.compile(backend="archsim")`` across input shapes: once a batch size changes,
dynamo compiles a graph with a symbolic batch (its sizes are inputs, its tensors
``(s0, 16)``). The backend compiles that graph per concrete shape signature, so every
batch runs on the device with its own program; it used to fall back to the host from
the second batch on ("placeholder arg2_1: needs a tensor in meta['val'], got SymInt")."""

from __future__ import annotations

import torch
from torch import nn
from torch.testing import assert_close

import compiler
import torch_bridge  # noqa: F401 - registers the backend
from torch_bridge import runtime

from compile_fixtures import fresh_on_atom  # noqa: F401 - autouse


def _compiled(line: runtime.Timeline) -> list[runtime.Event]:
    return [e for e in line.events if e.op.startswith("compiled ")]


def test_every_batch_size_runs_on_the_device() -> None:
    torch.manual_seed(0)
    model = nn.Linear(16, 16).eval()
    compiled = torch.compile(model, backend="archsim")
    line = runtime.reset_timeline()
    with torch.no_grad():
        for batch in (1, 2, 3):
            x = torch.randn(batch, 16)
            assert_close(compiled(x), model(x))
    events = _compiled(line)
    assert [e.kind for e in events] == ["device"] * 3
    assert all(e.cycles > 0 for e in events)
    # each batch's own program: the f32 weight (16 x 16 x 4 B) and bias (64 B) read,
    # the batch's rows read and written (64 B a row each way)
    assert [e.bytes for e in events] == [1024 + 64 + 128 * b for b in (1, 2, 3)]


def test_every_batch_size_trains_on_the_device() -> None:
    """The training forward returns the batch size for its backward (a ``SymInt``
    output, which failed on its own: "graph output primals_3 is not a tensor")."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16), nn.GELU())
    compiled = torch.compile(model, backend="archsim")
    line = runtime.reset_timeline()
    for batch in (1, 2, 3):
        x = torch.randn(batch, 16)
        got, want = x.clone().requires_grad_(), x.clone().requires_grad_()
        compiled(got).sum().backward()
        model(want).sum().backward()
        assert_close(got.grad, want.grad)
    roles = [(e.op.split()[1], e.kind) for e in _compiled(line)]
    assert roles == [("forward", "device"), ("backward", "device")] * 3


def test_a_shape_seen_before_reuses_its_program(monkeypatch) -> None:
    calls: list[tuple[int, ...]] = []
    real = compiler.compile_graph

    def counting(gm, config, *args, **kwargs):
        calls.append(next(tuple(n.meta["val"].shape) for n in gm.graph.nodes
                          if n.meta.get("archsim_kind") == "user_input"))
        return real(gm, config, *args, **kwargs)

    monkeypatch.setattr(compiler, "compile_graph", counting)
    model = nn.Linear(8, 4).eval()
    compiled = torch.compile(model, backend="archsim")
    with torch.no_grad():
        for batch in (1, 2, 3, 2, 3):
            compiled(torch.randn(batch, 8))
    # batch 1: dynamo's graph for size 1; then its graph with a symbolic batch, compiled
    # once for 2 and once for 3
    assert calls == [(1, 8), (2, 8), (3, 8)]


class Pairs(nn.Module):
    """Size arithmetic on the symbolic batch: each row read as two half rows."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.view(x.shape[0] * 2, -1))


def test_size_arithmetic_runs_on_the_device_for_every_batch() -> None:
    """``s0 * 2`` is a graph node, not a placeholder: specializing must fold it too."""
    torch.manual_seed(0)
    model = Pairs().eval()
    compiled = torch.compile(model, backend="archsim")
    line = runtime.reset_timeline()
    with torch.no_grad():
        for batch in (1, 2, 3, 4):
            x = torch.randn(batch, 16)
            assert_close(compiled(x), model(x))
    assert [e.kind for e in _compiled(line)] == ["device"] * 4


def test_a_number_input_is_part_of_the_signature() -> None:
    """Dynamo makes ``n`` an input once it changes: a program for n=4 must not serve
    n=5."""
    def scaled_sum(x: torch.Tensor, n: int) -> torch.Tensor:
        return (x * n).sum(0)

    compiled = torch.compile(scaled_sum, backend="archsim")
    x = torch.randn(6, 4)
    line = runtime.reset_timeline()
    for n in (3, 4, 5, 4):
        assert_close(compiled(x, n), scaled_sum(x, n))
    assert [e.kind for e in _compiled(line)] == ["device"] * 4
