"""What an eager npu call does, pinned where a mutation run of ``torch_bridge/eager.py``
found nothing checking it (issue 34): the op cache per config, where later calls' numbers
come from, host fallbacks and their recorded reasons, ``out=`` and in-place calls, calls
with zero-element operands, and single-operand copies. Numbers are compared with torch on
CPU; cycles and bytes are derived for `tiny` (DRAM 16 B/cycle, no launch cost)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import compiler
from compiler.compile import CompiledProgram
from torch_bridge import eager, fallback, kernels, numerics, runtime
from torch_bridge.eager_adapted import ADAPTED

aten = torch.ops.aten
ZERO_NOTE = "zero elements: nothing to compute"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """On tiny, with no cached programs, failures or warnings from earlier calls."""
    monkeypatch.setattr(eager, "_failures", {})
    monkeypatch.setattr(fallback, "_warned_ops", set())
    eager.clear_cache()
    with runtime.use_config("tiny"), warnings.catch_warnings():
        warnings.simplefilter("ignore", eager.CompileFallbackWarning)
        yield
    eager.clear_cache()


def work(line: runtime.Timeline) -> list[tuple[str, str, int, int, str]]:
    """The timeline's device and host events (not transfers or launches)."""
    return [(e.op, e.kind, e.cycles, e.bytes, e.note) for e in line.events
            if e.kind in ("device", "host")]


def counting_compiles(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    calls: list[object] = []
    original = compiler.compile_op

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(compiler, "compile_op", counting)
    return calls


def failures() -> list[tuple[str, str, str]]:
    return [(f.op, f.signature, f.reason) for f in eager.compile_failures()]


class TestCache:
    def test_programs_are_kept_per_config(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """An 8x8 @ 8x8 f32 matmul on tiny, then atom, then tiny: each config's own
        cycles (a fresh compile outside the eager cache); the cache is emptied when the
        config changes, so the third call compiles again and the fourth does not."""
        a, b = torch.randn(8, 8), torch.randn(8, 8)
        want = {}
        for name in ("tiny", "atom"):
            with runtime.use_config(name):
                want[name] = compiler.compile_op(aten.mm.default, (a, b), {},
                                                 runtime.get_config()).simulate().total_cycles
        assert want["tiny"] == 259 and want["atom"] != want["tiny"]
        calls = counting_compiles(monkeypatch)
        an, bn = a.npu(), b.npu()
        seen: list[int] = []

        def listener(event: runtime.Event, run: object) -> None:
            if event.op == "aten.mm":
                seen.append(event.cycles)

        runtime.add_listener(listener)
        try:
            an @ bn
            with runtime.use_config("atom"):
                an @ bn
            an @ bn
            an @ bn
        finally:
            runtime.remove_listener(listener)
        assert seen == [want["tiny"], want["atom"], want["tiny"], want["tiny"]]
        assert len(calls) == 3

    def test_keyword_numbers_of_several_ops(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """addmm's beta and alpha, addcmul's and addcdiv's value, add's alpha: two values
        each, every call's numbers from its program ("simulate" mode), on the device."""
        monkeypatch.setattr(numerics, "_mode", "simulate")
        bias, m1, m2 = torch.randn(4), torch.randn(4, 8), torch.randn(8, 4)
        x, y, z = torch.randn(4, 4), torch.randn(4, 4), torch.randn(4, 4).abs() + 1
        line = runtime.reset_timeline()
        for beta, alpha in ((0.5, 2.0), (0.25, 3.0)):
            assert_close(torch.addmm(bias.npu(), m1.npu(), m2.npu(), beta=beta,
                                     alpha=alpha).cpu(),
                         torch.addmm(bias, m1, m2, beta=beta, alpha=alpha))
        for value in (0.5, 2.0):
            assert_close(torch.addcmul(x.npu(), y.npu(), z.npu(), value=value).cpu(),
                         torch.addcmul(x, y, z, value=value))
            assert_close(torch.addcdiv(x.npu(), y.npu(), z.npu(), value=value).cpu(),
                         torch.addcdiv(x, y, z, value=value))
        for alpha in (2, 3):
            assert_close(torch.add(x.npu(), y.npu(), alpha=alpha).cpu(), x + alpha * y)
        assert {kind for _, kind, *_ in work(line)} == {"device"}

    def test_clear_cache_compiles_again(self, monkeypatch: pytest.MonkeyPatch) -> None:
        calls = counting_compiles(monkeypatch)
        x = torch.randn(4, 8)
        xn = x.npu()
        assert_close((xn * 2.0).cpu(), x * 2.0)
        eager.clear_cache()
        assert_close((xn * 3.0).cpu(), x * 3.0)
        assert calls == [aten.mul.Tensor, aten.mul.Tensor]

    def test_keyword_arguments_and_number_types_are_part_of_the_signature(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        """In "simulate" mode every call's numbers come from its cached program, so a
        signature that forgot a keyword or a number's type would give the first
        program's numbers (in "checked" mode they come from CPU and hide it)."""
        monkeypatch.setattr(numerics, "_mode", "simulate")
        i = torch.arange(6)
        # 2 and 2.0 are equal but give an int64 and a float32 power
        for exponent, dtype in ((2, torch.int64), (2.0, torch.float32)):
            got = torch.pow(i.npu(), exponent)
            assert got.dtype == dtype
            assert_close(got.cpu(), torch.pow(i, exponent))
        x = torch.randn(4, 8)
        xn = x.npu()
        assert_close(F.gelu(xn, approximate="tanh").cpu(), F.gelu(x, approximate="tanh"))
        assert_close(F.gelu(xn).cpu(), F.gelu(x))
        # a keyword number is a program constant: alpha 2 and 3 are two programs
        y = torch.randn(4, 8)
        assert_close(torch.sub(xn, y.npu(), alpha=2).cpu(), x - 2 * y)
        assert_close(torch.sub(xn, y.npu(), alpha=3).cpu(), x - 3 * y)


class TestNumbers:
    def test_checked_mode_takes_later_numbers_from_cpu(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The first call runs the program; once it agreed with CPU, later calls of the
        signature compute on CPU and are charged the first call's cycles."""
        runs: list[object] = []
        original = CompiledProgram.run

        def counting(self: CompiledProgram, *tensors: torch.Tensor, **kwargs: object):
            runs.append(kwargs.get("timing", "missing"))
            return original(self, *tensors, **kwargs)

        monkeypatch.setattr(CompiledProgram, "run", counting)
        x = torch.randn(4, 8)
        line = runtime.reset_timeline()
        for scale in (1.0, 2.0, 3.0):
            assert_close((x * scale).npu().exp().cpu(), (x * scale).exp())
        exps = [e.cycles for e in line.events if e.op == "aten.exp"]
        assert len(exps) == 3 and len(set(exps)) == 1
        assert len(runs) == 1 and runs[0] is None

    def test_simulate_mode_replays_the_first_timing(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        runs: list[object] = []
        original = CompiledProgram.run

        def counting(self: CompiledProgram, *tensors: torch.Tensor, **kwargs: object):
            out = original(self, *tensors, **kwargs)
            runs.append((kwargs.get("timing", "missing"), out[1]))
            return out

        monkeypatch.setattr(CompiledProgram, "run", counting)
        monkeypatch.setattr(numerics, "_mode", "simulate")
        x = torch.randn(4, 8)
        for scale in (1.0, 2.0):
            assert_close((x * scale).npu().exp().cpu(), (x * scale).exp())
        (first_timing, first), (second_timing, _) = runs
        assert first_timing is None and second_timing is first

    def test_python_and_cpu_scalars_are_data(self, monkeypatch: pytest.MonkeyPatch) -> None:
        calls = counting_compiles(monkeypatch)
        x = torch.arange(32, dtype=torch.float32).reshape(4, 8)
        xn = x.npu()
        assert_close((xn + True).cpu(), x + 1)
        assert_close((xn * torch.tensor(2.5)).cpu(), x * 2.5)  # a 0-dim CPU tensor
        assert_close((xn * torch.tensor(3.5)).cpu(), x * 3.5)
        assert calls == [aten.add.Tensor, aten.mul.Tensor]

    def test_tensor_lists(self) -> None:
        a, b = torch.randn(2, 8), torch.randn(3, 8)
        line = runtime.reset_timeline()
        assert_close(torch.cat([a.npu(), b.npu()]).cpu(), torch.cat([a, b]))
        index = torch.tensor([2, 0])
        assert_close(b.npu()[index.npu()].cpu(), b[index])
        assert [(op, kind) for op, kind, *_ in work(line)] == [
            ("aten.cat", "device"), ("aten.index.Tensor", "device")]

    def test_device_bytes_are_the_runs_dram_bytes(self) -> None:
        """8x8 @ 8x8 f32: A and B read (256 B each), C written (256 B)."""
        line = runtime.reset_timeline()
        torch.randn(8, 8).npu() @ torch.randn(8, 8).npu()
        assert work(line) == [("aten.mm", "device", 259, 768, "")]


class TestCopies:
    def test_a_single_operand_cat_is_a_device_copy(self) -> None:
        """cat of one 4x8 f32 tensor compiles to no commands: 128 B read and 128 B
        written at 16 B/cycle = 16 cycles."""
        x = torch.randn(4, 8)
        line = runtime.reset_timeline()
        y = torch.cat([x.npu()])
        assert_close(y.cpu(), x)
        assert work(line) == [("aten.cat", "device", 16, 256, "")]

    def test_an_empty_operand_is_dropped_before_cat(self) -> None:
        """cat([empty, x]) is x: 3x8 f32 copied, 96 B each way = 12 cycles."""
        x = torch.randn(1, 3, 8)
        line = runtime.reset_timeline()
        y = torch.cat([torch.empty(1, 0, 8).npu(), x.npu()], 1)
        assert_close(y.cpu(), x)
        assert work(line) == [("aten.cat", "device", 12, 192, "")]


class TestFallbacks:
    @pytest.mark.parametrize(("error", "reason"), [
        (RuntimeError(), "RuntimeError"),
        (RuntimeError("no tile fits for axis X\nsecond line"),
         "RuntimeError: no tile fits for axis X"),
    ])
    def test_a_failed_simulation_runs_on_the_host_from_then_on(
            self, error: Exception, reason: str, monkeypatch: pytest.MonkeyPatch) -> None:
        runs = []

        def fail(self: CompiledProgram, *tensors: torch.Tensor, **kwargs: object):
            runs.append(self)
            raise error

        monkeypatch.setattr(CompiledProgram, "run", fail)
        x, y = torch.randn(4, 8), torch.randn(4, 8)
        line = runtime.reset_timeline()
        for _ in range(2):
            assert_close((x.npu() + y.npu()).cpu(), x + y)
        note = f"simulation failed: {reason}"
        assert [(op, kind, n) for op, kind, _, _, n in work(line)] == [
            ("aten.add.Tensor", "host", note)] * 2
        assert len(runs) == 1
        assert failures() == [("aten.add.Tensor", "(float32[4, 8], float32[4, 8])", note)]

    def test_signatures_of_host_calls(self) -> None:
        x = torch.randn(4, dtype=torch.float64)
        xn = x.npu()
        assert_close(F.gelu(xn, approximate="tanh").cpu(), F.gelu(x, approximate="tanh"))
        assert_close(torch.cat([xn, xn]).cpu(), torch.cat([x, x]))
        assert_close(xn.sum([0]).cpu(), x.sum([0]))
        assert_close((xn * 3).cpu(), x * 3)
        reason = "dtype torch.float64 is not supported by the device"
        assert failures() == [
            ("aten.gelu", "(float64[4], approximate='tanh')", reason),
            ("aten.cat", "([float64[4], float64[4]])", reason),
            ("aten.sum.dim_IntList", "(float64[4], [0])", reason),
            ("aten.mul.Tensor", "(float64[4], int64[])", reason),
        ]

    def test_every_host_node_of_a_call_is_named_in_its_reason(self) -> None:
        """quantile decomposes into a sort and in-place steps of which three have no
        lowering; the call runs on the host and its reason names the three, ", " apart."""
        x = torch.randn(4, 4)
        program = compiler.compile_op(aten.quantile.scalar, (x, 0.3), {},
                                      runtime.get_config())
        assert [name.split(":")[0] for name in program.fallbacks] == \
            ["ceil_", "copy_", "squeeze_"]
        got = eager.CompiledOpKernel(aten.quantile.scalar)(x.npu(), 0.3)
        assert_close(got.cpu(), torch.quantile(x, 0.3))
        reason = f"no device lowering for these arguments ({', '.join(program.fallbacks)})"
        assert failures() == [("aten.quantile.scalar", "(float32[4, 4], 0.3)", reason)]

    def test_an_op_compiled_as_another_runs_on_the_host_as_that_op(self) -> None:
        """conv2d reaches the device as convolution_overrideable (compiled as
        convolution); in float64 it runs on the host as convolution, which CPU has."""
        x = torch.randn(1, 1, 5, 5, dtype=torch.float64)
        w = torch.randn(1, 1, 3, 3, dtype=torch.float64)
        line = runtime.reset_timeline()
        assert_close(F.conv2d(x.npu(), w.npu()).cpu(), F.conv2d(x, w))
        assert [(op, kind) for op, kind, *_ in work(line)] == [
            ("aten.convolution_overrideable", "host")]


class TestInPlace:
    def test_a_broadcast_operand_stays_on_the_device(self) -> None:
        x, row = torch.randn(4, 4), torch.randn(1, 4)
        xn = x.npu()
        line = runtime.reset_timeline()
        assert xn.add_(row.npu()) is xn
        assert_close(xn.cpu(), x + row)
        assert [(op, kind) for op, kind, *_ in work(line)] == [("aten.add_.Tensor", "device")]

    def test_a_result_that_does_not_fit_self_is_refused_with_its_reason(self) -> None:
        x, y = torch.randn(1, 4), torch.randn(4, 4)
        with pytest.raises(RuntimeError, match=r"output with shape \[1, 4\] doesn't match "
                                               r"the broadcast shape \[4, 4\]"):
            x.npu().add_(y.npu())
        assert failures() == [
            ("aten.add_.Tensor", "(float32[1, 4], float32[4, 4])",
             "result [4, 4] f32 cannot be stored in place into [1, 4] torch.float32")]


class TestOut:
    def test_keyword_arguments_reach_the_op(self) -> None:
        a, b = torch.randn(4, 8), torch.randn(4, 8)
        out = torch.empty(4, 8, device="npu")
        torch.sub(a.npu(), b.npu(), alpha=2, out=out)
        assert_close(out.cpu(), a - 2 * b)

    def test_out_gets_the_result(self) -> None:
        a, b = torch.randn(4, 8), torch.randn(4, 8)
        out = torch.empty(4, 8, device="npu")
        line = runtime.reset_timeline()
        assert torch.mul(a.npu(), b.npu(), out=out) is out
        assert_close(out.cpu(), a * b)
        assert [(op, kind) for op, kind, *_ in work(line)] == [("aten.mul.Tensor", "device")]

    def test_an_empty_out_is_resized(self) -> None:
        a, b = torch.randn(4, 8), torch.randn(4, 8)
        out = torch.empty(0, device="npu")
        line = runtime.reset_timeline()
        torch.mul(a.npu(), b.npu(), out=out)
        assert out.shape == (4, 8)
        assert_close(out.cpu(), a * b)
        assert [(op, kind) for op, kind, *_ in work(line)] == [("aten.mul.Tensor", "device")]

    def test_an_out_of_another_shape_is_filled_on_the_host(self) -> None:
        a, b = torch.randn(4, 8), torch.randn(4, 8)
        out = torch.empty(2, 2, device="npu")
        line = runtime.reset_timeline()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch: out resized
            torch.mul(a.npu(), b.npu(), out=out)
        assert out.shape == (4, 8)
        assert_close(out.cpu(), a * b)
        assert [(op, kind, note) for op, kind, _, _, note in work(line)] == [
            ("aten.mul.Tensor", "device", ""),
            ("aten.mul.out", "host", "result does not fit out=")]

    def test_an_out_of_a_narrower_dtype_is_refused_as_torch_does(self) -> None:
        a, b = torch.randn(4, 8), torch.randn(4, 8)
        out = torch.zeros(4, 8, dtype=torch.int64, device="npu")
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the "
                                               "desired output type Long"):
            torch.mul(a.npu(), b.npu(), out=out)
        assert not out.cpu().any()

    def test_two_outs(self) -> None:
        a = torch.randn(4, 8)
        values = torch.empty(4, device="npu")
        indices = torch.empty(4, dtype=torch.int64, device="npu")
        line = runtime.reset_timeline()
        got = torch.max(a.npu(), -1, out=(values, indices))
        assert [(op, kind) for op, kind, *_ in work(line)] == [("aten.max.dim", "device")]
        assert got[0] is values and got[1] is indices
        assert_close(values.cpu(), a.max(-1).values)
        assert torch.equal(indices.cpu(), a.max(-1).indices)


class TestZeroElements:
    def test_an_empty_result_costs_nothing(self) -> None:
        e = torch.randn(2, 0, 3)
        line = runtime.reset_timeline()
        y = e.npu().abs()
        assert (y.device.type, y.shape) == ("npu", (2, 0, 3))
        assert work(line) == [("aten.abs", "device", 0, 0, ZERO_NOTE)]

    def test_keyword_arguments_shape_the_empty_result(self) -> None:
        y = torch.randn(2, 0, 3).npu().sum(-1, dtype=torch.float16)
        assert (y.shape, y.dtype) == ((2, 0), torch.float16)

    def test_an_op_with_two_results(self) -> None:
        values, indices = torch.max(torch.randn(2, 0, 3).npu(), -1)
        assert (values.shape, values.dtype, indices.dtype) == ((2, 0), torch.float32,
                                                               torch.int64)

    def test_in_place_returns_self(self) -> None:
        e, other = torch.randn(2, 0, 3).npu(), torch.randn(2, 0, 3).npu()
        assert e.add_(other) is e
        assert eager.CompiledOpKernel(aten.add_.Tensor)(e, other) is e

    def test_keyword_numbers_stay_numbers(self) -> None:
        e = torch.randn(2, 0, 3).npu()
        line = runtime.reset_timeline()
        assert torch.sub(e, e, alpha=2).shape == (2, 0, 3)
        assert work(line) == [("aten.sub.Tensor", "device", 0, 0, ZERO_NOTE)]

    def test_a_result_of_no_input_data_is_a_fill(self) -> None:
        """mm of 5x0 by 0x4: 5x4 f32 zeros, 80 B written at 16 B/cycle = 5 cycles."""
        line = runtime.reset_timeline()
        y = torch.randn(5, 0).npu() @ torch.randn(0, 4).npu()
        assert_close(y.cpu(), torch.zeros(5, 4))
        assert work(line) == [("aten.mm", "device", 5, 80, "")]

    def test_a_non_empty_result_from_other_data_runs_on_the_host(self) -> None:
        bias = torch.randn(4)
        line = runtime.reset_timeline()
        z = torch.addmm(bias.npu(), torch.randn(5, 0).npu(), torch.randn(0, 4).npu())
        assert_close(z.cpu(), bias.expand(5, 4))
        note = "a zero-element operand with a non-empty result"
        assert [(op, kind, n) for op, kind, _, _, n in work(line)] == [
            ("aten.addmm", "host", note)]
        assert failures() == [
            ("aten.addmm", "(float32[4], float32[5, 0], float32[0, 4])", note)]


class TestKernels:
    """Kernels built inside the test (those installed at import are built once)."""

    def test_a_new_kernel_of_each_kind(self, monkeypatch: pytest.MonkeyPatch) -> None:
        calls = counting_compiles(monkeypatch)
        x, row = torch.randn(4, 8), torch.randn(1, 8)
        mul = eager.CompiledOpKernel(aten.mul.Tensor)
        assert (mul.name, mul.target, mul.host_op, mul.in_place, mul.writes_out,
                mul.adapt) == ("aten.mul.Tensor", aten.mul.Tensor, None, False, False, None)
        assert mul.tensor_positions == frozenset({0, 1})
        xn = x.npu()
        for scale in (2.5, 3.5):  # Python numbers in tensor positions are data
            assert_close(mul(xn, scale).cpu(), x * scale)
        assert calls == [aten.mul.Tensor]
        add_ = eager.CompiledOpKernel(aten.add_.Tensor)
        assert (add_.target, add_.in_place) == (aten.add.Tensor, True)
        assert add_(xn, row.npu()) is xn
        assert_close(xn.cpu(), x + row)
        mul_out = eager.CompiledOpKernel(aten.mul.out)
        assert (mul_out.target, mul_out.writes_out) == (aten.mul.Tensor, True)
        assert mul_out.tensor_positions == frozenset({0, 1, "out"})
        out = torch.empty(4, 8, device="npu")
        assert mul_out(xn, 2.0, out=out) is out
        assert_close(out.cpu(), (x + row) * 2.0)
        conv = eager.CompiledOpKernel(aten.convolution_overrideable.default)
        assert (conv.target, conv.host_op) == (aten.convolution.default,
                                               aten.convolution.default)
        cat = eager.CompiledOpKernel(aten.cat.default)  # drops the empty operand
        line = runtime.reset_timeline()
        assert_close(cat([torch.empty(0, 8).npu(), xn]).cpu(), x + row)
        assert work(line) == [("aten.cat", "device", 16, 256, "")]

    def test_out_kernels_build_their_op_kernel_on_first_use(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(eager, "_installed", {})
        a = torch.randn(4, 8)
        out = torch.empty(4, 8, device="npu")
        torch.mul(a.npu(), 2.0, out=out)
        assert_close(out.cpu(), a * 2.0)
        assert list(eager._installed) == [aten.mul.Tensor]
        assert eager._installed[aten.mul.Tensor].op is aten.mul.Tensor

    def test_install_makes_the_compiler_the_kernel_again(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        installed = dict(eager._installed)
        monkeypatch.setattr(eager, "_installed", {})
        x = torch.randn(4, 8)
        try:
            eager.uninstall([aten.mul.Tensor])
            line = runtime.reset_timeline()
            x.npu() * 2.0
            eager.install([aten.mul.Tensor])
            assert_close((x.npu() * 2.0).cpu(), x * 2.0)
            assert [kind for op, kind, *_ in work(line)] == ["host", "device"]
            assert list(eager._installed) == [aten.mul.Tensor]
            # the adapted ops' kernels come back with the default set only
            kernels.set_default_kernel(aten.arange.start_out, None)
            eager.install()
            line = runtime.reset_timeline()
            assert torch.equal(torch.arange(8, device="npu").cpu(), torch.arange(8))
            assert [(op, kind) for op, kind, *_ in work(line)] == [("aten.arange", "device")]
        finally:  # the kernels installed at import again
            for op, kernel in (*installed.items(), *ADAPTED.items()):
                kernels.set_default_kernel(op, kernel)
