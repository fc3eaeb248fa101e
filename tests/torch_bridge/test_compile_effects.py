"""``torch.compile(backend="archsim")`` on graphs with effectful ops: ``torch.linalg.inv``
checks its result with ``aten._linalg_check_errors``, which aot_autograd wraps in the
``with_effects`` higher-order op (an effect token threaded in and out of the graph)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import compiler
import torch_bridge  # noqa: F401 - registers the backend
from archsim.errors import LoweringError
from torch_bridge import compile_backend, runtime


class Inverse(torch.nn.Module):
    """The user's report: an inverse of a well-conditioned matrix."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.inv(x @ x.T + torch.eye(32))


@pytest.fixture(autouse=True)
def _fresh() -> None:
    torch._dynamo.reset()
    with runtime.use_config("atom"):
        yield


def _host_events(line: runtime.Timeline) -> list[runtime.Event]:
    return [e for e in line.events if e.op.startswith("compiled ") and e.kind == "host"]


class TestFallback:
    def test_a_graph_with_effects_that_does_not_compile_runs_on_cpu(self, monkeypatch
                                                                     ) -> None:
        """The eager fallback counts FLOPs with torch's FlopCounterMode, which declines
        ``with_effects`` (it returned NotImplemented, and the graph crashed indexing it)."""
        def fail(*args, **kwargs):
            raise LoweringError("no kernel (test)")

        monkeypatch.setattr(compiler, "compile_graph", fail, raising=False)
        torch.manual_seed(0)
        x = torch.randn(32, 32)
        line = runtime.reset_timeline()
        with pytest.warns(compile_backend.GraphFallbackWarning, match="runs eagerly"):
            got = torch.compile(Inverse(), backend="archsim")(x)
        assert_close(got, Inverse()(x))
        (event,) = _host_events(line)
        # at least the matmul's 2 * 32^3 FLOPs, counted around the effectful op
        assert event.flops >= 2 * 32 ** 3
