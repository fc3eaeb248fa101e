"""Where a cached eager op's numbers come from (torch_bridge.numerics): the first call
of a signature runs its program and is compared with CPU; later calls take CPU's numbers
only if it agreed ("checked"), or always run the program ("simulate")."""

from __future__ import annotations

import pytest
import torch

import compiler.compile as compile_module
import torch_bridge  # noqa: F401 - registers the npu device
from archsim.errors import ArchsimError, NumericsError
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


def test_a_first_call_that_disagrees_with_cpu_is_a_numerics_error(program_runs):
    """Numbers are a contract on eager too: a program whose numbers are wrong raises,
    naming the op, instead of handing its numbers back."""
    program_runs["perturb"] = lambda t: t + 1
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    with pytest.raises(NumericsError, match=r"^eager npu op aten\.add\.Tensor: output 0: "
                                            r"max \|npu - torch cpu\| = 1, over the "
                                            r"torch\.float32 tolerance 1e-05"):
        x.npu() + y.npu()


def test_a_first_call_off_by_rounding_keeps_running_its_program(program_runs):
    """Outside :func:`numerics.agrees` (elementwise, a summation order's rounding next
    to zero) but inside the tolerance every door applies (scaled to the output's largest
    value): not an error, and later calls keep the program's own numbers."""
    program_runs["perturb"] = lambda t: t + 2e-5  # allowed: 1.3e-6 x 40; near 0: 1e-5
    x, y = torch.linspace(-40, 40, 128).view(8, 16), torch.zeros(8, 16)
    for expected_runs in (1, 2, 3):
        out = (x.npu() + y.npu()).cpu()
        assert program_runs["n"] == expected_runs
        torch.testing.assert_close(out, x + y + 2e-5, rtol=0, atol=0)


def test_where_torchs_float32_kernel_is_inexact_float64_decides() -> None:
    """torch's float32 trigamma is off by 5e-5 (relative) next to its poles (here
    -6.0138); a device result within float32 rounding of the float64 value is right,
    one that is not is an error."""
    x = torch.tensor([-6.013792991638184, 1.5, -2.5])
    exact = torch.polygamma(1, x.double()).float()
    op, args = aten.polygamma.default, (1, x)
    assert not torch.allclose(torch.polygamma(1, x), exact, rtol=1.3e-6, atol=1e-5)
    assert numerics.check_first_call(op, args, {}, (exact,)) is False
    with pytest.raises(NumericsError, match=r"^eager npu op aten\.polygamma\.default: "
                                            r"output 0: max \|npu - torch cpu\|"):
        numerics.check_first_call(op, args, {}, (exact * 1.001,))
    assert numerics.check_first_call(op, args, {}, (torch.polygamma(1, x),)) is True


def test_a_sum_in_another_order_is_not_an_error() -> None:
    """A 4,096-term sum with cancellation added smallest first lands 4x the output-scaled
    tolerance away from torch's, but no farther from the float64 sum than a small
    multiple of torch's own error: not wrong. Off by the float64 sum's 1%: wrong."""
    torch.manual_seed(35)
    x = torch.randn(64, 64)
    terms = (x @ x).flatten()
    other_order = torch.tensor(sorted(terms.tolist(), key=abs)).sum()
    with pytest.raises(NumericsError):  # the premise: outside the usual tolerance
        numerics.compare_outputs((other_order,), (terms.sum(),))
    op = aten.sum.default
    assert numerics.check_first_call(op, (terms,), {}, (other_order,)) is False
    with pytest.raises(NumericsError, match=r"^eager npu op aten\.sum\.default: output 0"):
        numerics.check_first_call(op, (terms,), {}, (other_order * 1.01,))


def test_eval_batch_norms_empty_statistics_are_not_compared() -> None:
    """Eager computes eval batch norm's output only; torch's two empty saved
    statistics are eager's to make."""
    x, mean, var = torch.randn(2, 3, 4), torch.randn(3), torch.rand(3) + 0.5
    args = (x, None, None, mean, var, 0.1, 1e-5)
    op = aten._native_batch_norm_legit_no_training.default
    out = op(*args)[0]
    assert numerics.check_first_call(op, args, {}, (out,)) is False
    with pytest.raises(NumericsError, match=r"output 0"):
        numerics.check_first_call(op, args, {}, (out + 1,))


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
