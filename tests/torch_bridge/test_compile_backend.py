"""``torch.compile(backend="archsim")``: graphs compiled and simulated, on CPU and npu
inputs, forward and backward; a graph that does not compile runs eagerly, visibly."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import compiler
from archsim.errors import LoweringError
import torch_bridge
from reports.critical_path import critical_path
from torch_bridge import compile_backend, runtime

@pytest.fixture(autouse=True)
def _on_atom():
    """The cycles below are derived for atom: pinned, whatever an earlier test left."""
    with runtime.use_config("atom"):
        yield


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))


def compiled_events(line: runtime.Timeline) -> list[runtime.Event]:
    return [e for e in line.events if e.op.startswith("compiled ")]


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    """Dynamo reuses a graph for another instance of the same module class: start clean
    so each test compiles (and so sees its own backend behaviour)."""
    torch._dynamo.reset()


class TestCompileBackend:
    def test_cpu_inputs_give_cpu_outputs(self) -> None:
        model, x = small_model(), torch.randn(5, 8)
        compiled = torch.compile(model, backend="archsim")
        line = runtime.reset_timeline()
        with torch.no_grad(), torch_bridge.profile() as prof:
            got = compiled(x)
            want = model(x)
        assert got.device.type == "cpu"
        assert_close(got, want)
        events = compiled_events(line)
        assert [e.kind for e in events] == ["device"]
        # one graph of Linear, GELU, LayerNorm, Linear on 5 rows: no faster than one
        # load-compute-store chain on atom (64 + 300 in, pipeline 8, 64 + 300 out), and
        # faster than the four ops run eagerly, a chain each; every DRAM transfer on its
        # critical path pays the 64 + 300 before its bytes (but one streamed behind the
        # transfer before it, which counts from that one's end; the hand-offs between
        # kernels go through shared SRAM: copies without the DRAM latency)
        chain = 64 + 300 + 8 + 64 + 300
        assert chain <= events[0].cycles < 4 * chain
        (run,) = prof.result.runs
        transfers = [s for s in critical_path(run).steps  # copies: shared SRAM, no DRAM
                     if ".dma" in s.engine and s.via != "stream" and s.op != "copy"]
        assert transfers and all(s.cycles >= 64 + 300 for s in transfers), transfers

    def test_npu_inputs_give_npu_outputs(self) -> None:
        model, x = small_model(), torch.randn(5, 8)
        compiled = torch.compile(copy.deepcopy(model).npu(), backend="archsim")
        with torch.no_grad():
            xn = x.npu()
            line = runtime.reset_timeline()
            got = compiled(xn)
            kinds = [e.kind for e in line.events]
            want = model(x)
        assert got.device.type == "npu"
        assert_close(got.cpu(), want)
        assert kinds == ["device"]  # one simulated run: no per-op events, no host work

    def test_run_is_recorded_with_its_result_and_ops(self) -> None:
        model, x = small_model(), torch.randn(5, 8)
        compiled = torch.compile(model, backend="archsim")
        seen: list[tuple[runtime.Event, runtime.Run | None]] = []
        listener = lambda event, run: seen.append((event, run))  # noqa: E731
        runtime.add_listener(listener)
        try:
            with torch.no_grad():
                compiled(x)
        finally:
            runtime.remove_listener(listener)
        (event, run), = seen
        assert run is not None and run.result.total_cycles == event.cycles
        assert "aten.addmm" in run.sources.values()
        assert {s.source for s in run.result.by_source} <= {*run.sources, "<unattributed>"}

    def test_training_matches_cpu_step_by_step(self) -> None:
        def losses(device: str, compile_step: bool) -> list[float]:
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            x = torch.randn(10, 8).to(device)
            target = torch.randint(0, 3, (10,)).to(device)

            def step() -> torch.Tensor:
                loss = nn.functional.cross_entropy(model(x), target)
                loss.backward()
                return loss

            run = torch.compile(step, backend="archsim") if compile_step else step
            out = []
            for _ in range(3):
                opt.zero_grad()
                out.append(run().item())
                opt.step()
            return out

        cpu = losses("cpu", False)
        line = runtime.reset_timeline()
        npu = losses("npu", True)
        roles = {e.op.split()[1] for e in compiled_events(line)}
        assert roles == {"forward", "backward"}  # both graphs compiled and simulated
        assert_close(npu, cpu)
        assert npu[2] < npu[0]

    def test_graph_that_does_not_compile_runs_eagerly(self, monkeypatch) -> None:
        def fail(*args, **kwargs):
            raise LoweringError("no kernel (test)")

        monkeypatch.setattr(compiler, "compile_graph", fail, raising=False)
        model, x = small_model(), torch.randn(5, 8)
        line = runtime.reset_timeline()
        with torch.no_grad(), pytest.warns(compile_backend.GraphFallbackWarning,
                                           match="runs eagerly"):
            got_cpu = torch.compile(model, backend="archsim")(x)
            got_npu = torch.compile(copy.deepcopy(model).npu(), backend="archsim")(x.npu())
            want = model(x)
        assert_close(got_cpu, want)
        assert_close(got_npu.cpu(), want)
        cpu_event, npu_event = compiled_events(line)
        assert cpu_event.kind == npu_event.kind == "host"
        assert cpu_event.note == ("compile failed: LoweringError: no kernel (test); "
                                  "ran on CPU")
        # host work: its FLOPs at atom's 100 per cycle, plus the host link's 1000-cycle
        # latency up and down
        assert cpu_event.flops >= 2 * 5 * (8 * 16 + 16 * 4)
        assert cpu_event.cycles >= -(-cpu_event.flops // 100) + 2 * 1000
        assert npu_event.note.endswith("ran op by op")
        after = line.events[line.events.index(npu_event) + 1:]
        assert any(e.op == "aten.addmm" and e.kind == "device" for e in after)


def test_a_compiled_graph_that_disagrees_with_torch_is_an_error(monkeypatch) -> None:
    """Numbers are a contract: the first run of each graph is checked against the graph
    on CPU, and a schedule giving other numbers raises instead of returning them."""
    from archsim.errors import NumericsError
    from compiler.compile import CompiledProgram

    real_run = CompiledProgram.run

    def off_by_one(self, *args, **kwargs):
        outs, result = real_run(self, *args, **kwargs)
        return tuple(o + 1 for o in outs), result

    monkeypatch.setattr(CompiledProgram, "run", off_by_one)
    torch._dynamo.reset()
    f = torch.compile(lambda x: torch.relu(x) * 2, backend="archsim")
    with pytest.raises(NumericsError, match=r"output 0: max \|npu - torch cpu\| = 1, over "
                                            r"the torch.float32 tolerance"):
        f(torch.randn(4, 8))


def test_int64_beyond_2_53_on_a_later_call_is_an_error_not_a_wrong_number() -> None:
    """The simulator's int64 arithmetic is exact up to 2**53: a graph computing int64
    values is checked against torch on CPU again on a call whose int64 values reach it,
    so a second call with larger values raises instead of returning [2**53, 2**53, 2]
    for a + 1."""
    from archsim.errors import NumericsError

    g = torch.compile(lambda a: (a + 1, a * 3, a.cumsum(0), a // 7), backend="archsim")
    g(torch.ones(3, dtype=torch.long))
    with pytest.raises(NumericsError, match=r"output 0: torch\.int64 values differ"):
        g(torch.tensor([2**53 + 1, 2**53 + 1, 1]))
    small = torch.tensor([5, 6, 7])
    for got, want in zip(g(small), (small + 1, small * 3, small.cumsum(0), small // 7)):
        assert torch.equal(got, want)  # the program stays: exact values still run


def _counted_checks(monkeypatch) -> list[int]:
    """A list that grows by one at each numerics check of a compiled graph."""
    checks: list[int] = []
    real = compile_backend.GraphRunner._check_numerics

    def counted(self, *args):
        checks.append(1)
        return real(self, *args)

    monkeypatch.setattr(compile_backend.GraphRunner, "_check_numerics", counted)
    return checks


def test_topk_ties_on_a_later_call_are_not_checked_against_cpus_order(monkeypatch) -> None:
    """A later call of an int64 graph with small values is not run on CPU again: a
    review found topk's indices of tied values raising against CPU's order (both are
    valid), and a language model's graph (int64 position ids) running on CPU twice."""
    checks = _counted_checks(monkeypatch)
    g = torch.compile(lambda x: x.topk(2, -1).indices, backend="archsim")
    g(torch.randn(4, 16))
    tied = torch.zeros(4, 16)
    tied[:, 3] = tied[:, 9] = 1
    assert sorted(g(tied)[0].tolist()) == [3, 9]
    assert len(checks) == 1


def test_a_float_graph_is_checked_on_its_first_call_only(monkeypatch) -> None:
    checks = _counted_checks(monkeypatch)
    f = torch.compile(lambda x: torch.relu(x) * 2, backend="archsim")
    for _ in range(3):
        f(torch.randn(4, 8))
    assert len(checks) == 1


def test_a_compiled_sum_in_another_order_is_not_an_error(monkeypatch) -> None:
    """A schedule whose 4,096-term sum lands 4x the output-scaled tolerance from torch's
    (the terms added smallest first) is as close to the float64 sum as torch's own:
    rounding, returned as computed."""
    from compiler.compile import CompiledProgram

    torch.manual_seed(35)
    x = torch.randn(64, 64)
    other_order = torch.tensor(sorted((x @ x).flatten().tolist(), key=abs)).sum()
    real_run = CompiledProgram.run

    def smallest_first(self, *args, **kwargs):
        outs, result = real_run(self, *args, **kwargs)
        return (other_order.reshape(outs[0].shape),), result

    monkeypatch.setattr(CompiledProgram, "run", smallest_first)
    torch._dynamo.reset()
    out = torch.compile(lambda x: (x @ x).sum(), backend="archsim")(x)
    assert torch.equal(out, other_order)


def test_a_graph_drawing_random_numbers_is_not_checked_against_cpu() -> None:
    torch._dynamo.reset()
    x = torch.ones(64, 64)
    out = torch.compile(lambda x: torch.nn.functional.dropout(x, 0.5, training=True),
                        backend="archsim")(x)
    assert set(out.unique().tolist()) <= {0.0, 2.0}


def test_a_graph_failing_verification_warns_with_the_first_problem() -> None:
    """The warning says what is invalid, not only that the program is (VerifyError's
    problems follow its first line)."""
    f = torch.compile(lambda a: a.sum(0) + 1, backend="archsim")
    with pytest.warns(compile_backend.GraphFallbackWarning,
                      match=r"simulation failed: VerifyError: program '\w+' is invalid "
                            r"\(1 problem\): command \d+ \(.*\): .*out of bounds"):
        out = f(torch.randn(0, 7))
    assert torch.equal(out, torch.ones(7))


def test_a_fallback_reason_is_one_line_cut_at_its_length() -> None:
    from archsim.errors import VerifyError
    from torch_bridge.fallback import REASON_CHARS, reason

    problems = ["command 0: " + "x" * 400, "command 1: never shown"]
    text = reason(VerifyError(problems, "g"))
    assert text.startswith("VerifyError: program 'g' is invalid (2 problems): command 0: x")
    assert "\n" not in text and len(text) == REASON_CHARS and text.endswith("...")
    assert reason(ValueError("first\nsecond")) == "ValueError: first"
