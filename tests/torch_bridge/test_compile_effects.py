"""``torch.compile(backend="archsim")`` on graphs with effectful ops: ``torch.linalg.inv``
checks its result with ``aten._linalg_check_errors``, which aot_autograd wraps in the
``with_effects`` higher-order op (an effect token threaded in and out of the graph)."""

from __future__ import annotations

import warnings

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


class TestCompiled:
    def test_an_inverse_compiles_with_its_check_on_the_host(self) -> None:
        torch.manual_seed(0)
        x = torch.randn(32, 32)
        line = runtime.reset_timeline()
        with warnings.catch_warnings():
            warnings.simplefilter("error", compile_backend.GraphFallbackWarning)
            got = torch.compile(Inverse(), backend="archsim")(x)
        assert_close(got, Inverse()(x))
        (event,) = [e for e in line.events if e.op.startswith("compiled ")]
        assert (event.kind, event.note) == ("device", "2 ops on the host")
        assert event.cycles > 0

    def test_an_inverse_trains(self) -> None:
        """Forward and backward graphs both simulated; the gradient is torch's."""
        torch.manual_seed(0)
        x = torch.randn(32, 32)
        compiled_x, eager_x = x.clone().requires_grad_(), x.clone().requires_grad_()
        line = runtime.reset_timeline()
        with warnings.catch_warnings():
            warnings.simplefilter("error", compile_backend.GraphFallbackWarning)
            torch.compile(Inverse(), backend="archsim")(compiled_x).sum().backward()
        Inverse()(eager_x).sum().backward()
        assert_close(compiled_x.grad, eager_x.grad, rtol=1e-3, atol=1e-4)
        kinds = [(e.op.split()[1], e.kind) for e in line.events if e.op.startswith("compiled ")]
        assert kinds == [("forward", "device"), ("backward", "device")]

    def test_a_singular_input_raises_torchs_error_and_keeps_the_program(self) -> None:
        """The inverse's check raises on the user's data: that is torch's LinAlgError, not
        a failed simulation; the program stays, so the next good input runs on the device."""
        def double_inverse(x: torch.Tensor) -> torch.Tensor:
            return torch.linalg.inv(x) * 2

        torch.manual_seed(0)
        good = torch.randn(8, 8) + 8 * torch.eye(8)
        compiled = torch.compile(double_inverse, backend="archsim")
        with warnings.catch_warnings():
            warnings.simplefilter("error", compile_backend.GraphFallbackWarning)
            compiled(good)
            with pytest.raises(torch.linalg.LinAlgError, match="singular"):
                compiled(torch.zeros(8, 8))
            line = runtime.reset_timeline()
            got = compiled(good)
        assert_close(got, double_inverse(good))
        (event,) = [e for e in line.events if e.op.startswith("compiled ")]
        assert (event.kind, event.note) == ("device", "2 ops on the host")
