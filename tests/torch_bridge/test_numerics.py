"""Where a cached eager op's numbers come from (torch_bridge.numerics): the first call
of a signature runs its program and is compared with CPU; later calls take CPU's numbers
only if it agreed ("checked"), or always run the program ("simulate")."""

from __future__ import annotations

import pytest
import torch

import compiler.compile as compile_module
import torch_bridge  # noqa: F401 - registers the npu device
from archsim.errors import ArchsimError
from torch_bridge import eager, numerics, runtime

aten = torch.ops.aten


@pytest.fixture
def program_runs(monkeypatch):
    """Counts CompiledProgram.run calls; a test may set ``perturb`` to change the
    simulated outputs."""
    calls: dict[str, object] = {"n": 0, "perturb": None}
    real = compile_module.CompiledProgram.run

    def counted(self, *args, **kwargs):
        calls["n"] += 1
        outputs, result = real(self, *args, **kwargs)
        if calls["perturb"] is not None:
            outputs = tuple(calls["perturb"](t) for t in outputs)
        return outputs, result
    monkeypatch.setattr(compile_module.CompiledProgram, "run", counted)
    before = runtime.get_config()
    runtime.set_config("tiny")
    eager.clear_cache()
    yield calls
    numerics.set_mode("checked")
    runtime.set_config(before)
    eager.clear_cache()


def _add_cycles(prof) -> tuple[int, int]:
    add = {op.name: op for op in prof.result.ops}["aten.add.Tensor"]
    return add.calls, add.device_cycles


def test_checked_mode_takes_cpu_numbers_after_a_first_call_that_agreed(program_runs):
    xs = [torch.randn(8, 16) for _ in range(4)]
    with torch_bridge.profile() as first:
        out = (xs[0].npu() + xs[1].npu()).cpu()
    torch.testing.assert_close(out, xs[0] + xs[1], rtol=0, atol=0)
    assert program_runs["n"] == 1
    with torch_bridge.profile() as later:
        out = (xs[2].npu() + xs[3].npu()).cpu()
        again = (xs[1].npu() + xs[3].npu()).cpu()
    assert program_runs["n"] == 1  # no functional run after the checked first call
    torch.testing.assert_close(out, xs[2] + xs[3], rtol=0, atol=0)
    torch.testing.assert_close(again, xs[1] + xs[3], rtol=0, atol=0)
    calls, cycles = _add_cycles(later)
    assert calls == 2 and cycles == 2 * _add_cycles(first)[1]


def test_a_first_call_that_disagreed_with_cpu_keeps_running_its_program(program_runs):
    program_runs["perturb"] = lambda t: t + 1
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    for expected_runs in (1, 2, 3):
        out = (x.npu() + y.npu()).cpu()
        assert program_runs["n"] == expected_runs
        torch.testing.assert_close(out, x + y + 1)  # the program's (perturbed) numbers


def test_simulate_mode_runs_the_program_on_every_call(program_runs):
    numerics.set_mode("simulate")
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    for expected_runs in (1, 2, 3):
        torch.testing.assert_close((x.npu() + y.npu()).cpu(), x + y, rtol=0, atol=0)
        assert program_runs["n"] == expected_runs


def test_unknown_mode_is_a_named_error() -> None:
    with pytest.raises(ArchsimError, match=r"unknown eager numerics mode 'fast'; use one of: "
                                           r"checked, simulate"):
        numerics.set_mode("fast")
    assert numerics.mode() == "checked"


def test_ops_with_side_effects_are_never_rerun_on_cpu() -> None:
    """Training batch norm updates its running statistics (its schema does not say so)
    and dropout draws random numbers: a second CPU run would change state."""
    mean, var = torch.zeros(3), torch.ones(3)
    args = (torch.randn(4, 3), None, None, mean, var, True, 0.1, 1e-5)
    assert numerics.cpu_results(aten.native_batch_norm.default, args, {}) is None
    assert torch.equal(mean, torch.zeros(3))
    assert numerics.cpu_results(aten.native_dropout.default, (torch.ones(4), 0.5, True),
                                {}) is None
    x = torch.randn(4)
    assert numerics.cpu_results(aten.relu_.default, (x,), {}) is None  # writes self
    (alias,) = numerics.cpu_results(aten.alias.default, (x,), {})  # a view: copied
    assert torch.equal(alias, x) and alias.data_ptr() != x.data_ptr()


def test_agreement_is_per_dtype_tolerance_with_exact_integers() -> None:
    x = torch.tensor([1.0, float("nan"), 3.0])
    assert numerics.agrees((x,), (x.clone(),))
    assert numerics.agrees((x * (1 + 1e-7),), (x,))
    assert not numerics.agrees((x + 1e-3,), (x,))
    assert not numerics.agrees((x,), (x.double(),))
    assert not numerics.agrees((x[:2],), (x,))
    i = torch.arange(4)
    assert numerics.agrees((i,), (i.clone(),)) and not numerics.agrees((i + 1,), (i,))
    assert not numerics.agrees((i,), None) and not numerics.agrees((i,), (i, i))
