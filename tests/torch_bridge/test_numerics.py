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


def test_set_mode_is_what_mode_reports(program_runs):
    numerics.set_mode("simulate")
    assert numerics.mode() == "simulate"
    numerics.set_mode("checked")
    assert numerics.mode() == "checked"


def _judge(got: list[float], want: list[float], truth: list[float],
           dtype: torch.dtype = torch.float32) -> float:
    """:func:`numerics.check_close` of one device output against torch's ``want`` (in
    ``dtype``), with ``truth`` the float64 result."""
    return numerics.check_close((torch.tensor(got, dtype=dtype),),
                                (torch.tensor(want, dtype=dtype),),
                                lambda: (torch.tensor(truth, dtype=torch.float64),))


class TestFloat64Judge:
    """Where a device output is outside :func:`numerics.compare_outputs`' tolerance,
    :func:`numerics.check_close` accepts it when it is within ``ORDER_SLACK`` (16)
    times torch's own error of the float64 result, plus the dtype's tolerance scaled to
    the float64 result's largest finite value. The numbers are powers of two so each
    bound is exact."""

    def test_the_bound_is_sixteen_torch_errors_plus_the_scaled_tolerance(self) -> None:
        """float32 at 1024 (float32's spacing there: 2^-13). torch is 2^-13 off the
        float64 value, so the bound is 16 x 2^-13 + 1.3e-6 x 1024 = 3.284e-3 from it:
        26 x 2^-13 (3.174e-3) below it passes, 27 x 2^-13 (3.296e-3) does not. Both
        are outside compare_outputs' 1.3e-6 x 1024 = 1.331e-3 of torch's."""
        ulp = 2.0 ** -13
        assert numerics.ORDER_SLACK == 16
        assert _judge([1024 - 26 * ulp], [1024 + ulp], [1024.0]) == 27 * ulp
        with pytest.raises(NumericsError, match=r"^output 0: max \|npu - torch cpu\| = "
                                                r"0\.00342, over the torch\.float32 "
                                                r"tolerance 0\.00133"):
            _judge([1024 - 27 * ulp], [1024 + ulp], [1024.0])

    def test_at_the_bound_exactly_passes(self) -> None:
        """float64 outputs take float32's tolerance. torch off by 2^-20 at 0: the
        bound is 16 x 2^-20 + 1e-5 (the absolute floor); a result exactly that far
        from the float64 value passes, the next float64 beyond it does not."""
        bound = 16 * 2.0 ** -20 + 1e-5
        assert _judge([-bound], [2.0 ** -20], [0.0], torch.float64) == bound + 2.0 ** -20
        beyond = float(torch.nextafter(torch.tensor(-bound, dtype=torch.float64),
                                       torch.tensor(-1.0, dtype=torch.float64)))
        with pytest.raises(NumericsError):
            _judge([beyond], [2.0 ** -20], [0.0], torch.float64)

    @pytest.mark.parametrize("special", [float("nan"), float("inf"), float("-inf")])
    def test_bfloat16_and_values_that_are_not_finite(self, special: float) -> None:
        """bfloat16 (rtol 1.6e-2). torch is 2^-10 off at the second element; the
        largest finite |value| is 0.5 (NaN and infinities left out of the scale), so
        the bound is 16 x 2^-10 + 1.6e-2 x 0.5 = 0.023625: 11 x 2^-9 (0.0215) below the
        float64 value passes, 13 x 2^-9 (0.0254) does not. Both are outside
        compare_outputs' 1.6e-2 x 0.5 = 0.008. The non-finite element, the same in
        all three, is no error of anyone's."""
        want, truth = [0.5, 2.0 ** -10, special], [0.5, 0.0, special]
        assert _judge([0.5 - 11 * 2.0 ** -9, 0.0, special], want, truth,
                      torch.bfloat16) == 11 * 2.0 ** -9
        with pytest.raises(NumericsError, match=r"^output 0: .* over the torch\.bfloat16 "
                                                r"tolerance 0\.008 "):
            _judge([0.5 - 13 * 2.0 ** -9, 0.0, special], want, truth, torch.bfloat16)

    def test_without_a_float64_result_the_first_error_stands(self) -> None:
        """The float64 run may be unavailable (None), fail, or return fewer outputs:
        then compare_outputs' error is the answer."""
        got, want = (torch.tensor([1.0 - 2e-4]),), (torch.tensor([1.0 + 2e-4]),)

        def fails() -> tuple[torch.Tensor, ...]:
            raise RuntimeError("no float64 kernel")

        for exact in (lambda: None, fails, lambda: ()):
            with pytest.raises(NumericsError, match=r"^output 0: max \|npu - torch cpu\| "
                                                    r"= 0\.0004, over the torch\.float32 "
                                                    r"tolerance 1e-05"):
                numerics.check_close(got, want, exact)

    def test_integer_outputs_must_equal_torchs_and_empty_ones_pass(self) -> None:
        """Beside a float output within the bound (the first test's 26 x 2^-13), an
        empty float output and an integer output equal to torch's pass; an integer
        output that differs, before or after the float one, is an error (the message is
        compare_outputs' first)."""
        ulp = 2.0 ** -13
        floats = (torch.tensor([1024 - 26 * ulp]), torch.tensor([1024 + ulp]),
                  torch.tensor([1024.0], dtype=torch.float64))
        empty = torch.zeros(0)
        index, other = torch.tensor([3, 1]), torch.tensor([3, 2])

        def judge(got: tuple, want: tuple, truth: tuple) -> float:
            return numerics.check_close(got, want, lambda: truth)

        assert judge((index, empty, floats[0]), (index, empty, floats[1]),
                     (index, empty.double(), floats[2])) == 27 * ulp
        with pytest.raises(NumericsError, match=r"^output 0: max \|npu - torch cpu\|"):
            judge((floats[0], other), (floats[1], index), (floats[2], index))
        with pytest.raises(NumericsError, match=r"^output 0: torch\.int64 values differ"):
            judge((other, floats[0]), (index, floats[1]), (index, floats[2]))
        wrong = torch.tensor([1024 - 27 * ulp])  # outside the bound, after an integer or
        # an empty output
        with pytest.raises(NumericsError, match=r"^output 1: max \|npu - torch cpu\|"):
            judge((index, wrong), (index, floats[1]), (index, floats[2]))
        with pytest.raises(NumericsError, match=r"^output 1: max \|npu - torch cpu\|"):
            judge((empty, wrong), (empty, floats[1]), (empty.double(), floats[2]))  # after


def test_in_float64_converts_floats_inside_containers_and_leaves_the_rest() -> None:
    x, i = torch.ones(2), torch.arange(2)
    out = numerics.in_float64(((x, [i, 1.5]), {"w": x, "n": i, "k": 3}))
    (tx, (ti, scalar)), kwargs = out
    assert (tx.dtype, ti.dtype, scalar) == (torch.float64, torch.int64, 1.5)
    assert {k: getattr(v, "dtype", v) for k, v in kwargs.items()} == {
        "w": torch.float64, "n": torch.int64, "k": 3}
    assert isinstance(out[0][1], list) and torch.equal(kwargs["w"], x.double())
