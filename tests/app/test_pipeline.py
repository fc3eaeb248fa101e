"""The one pipeline: modes, dtype conversion said aloud, and numbers as a contract."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from archsim.app.numerics import check_numerics
from archsim.app.pipeline import run
from archsim.app.workload import Workload
from archsim.errors import ArchsimError, NumericsError


class Notes:
    """A progress that records what the pipeline says."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.steps: list[str] = []

    def step(self, text: str):
        import contextlib

        self.steps.append(text)
        return contextlib.nullcontext()

    def note(self, text: str) -> None:
        self.notes.append(text)


def _mlp(dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 32)).to(dtype)


class TestModes:
    def test_unknown_mode(self) -> None:
        with pytest.raises(ArchsimError, match=r"^unknown mode 'fast': expected one of auto, "
                                               r"functional, performance$"):
            run(Workload.builtin("gemm", seq=8), "tiny", mode="fast")

    def test_options_of_another_type_are_refused_by_type(self) -> None:
        # archsim.estimate(m, x, options=5) was an AttributeError ('int' object has no
        # attribute 'attention_fusion') from inside the compiler
        import archsim

        with pytest.raises(TypeError, match=r"^options must be a compiler.CompileOptions "
                                            r"\(or None\), got int 5$"):
            archsim.estimate(_mlp(torch.float32), torch.randn(4, 64), "tiny", options=5)
        with pytest.raises(TypeError, match=r"got dict \{'fusion': False\}$"):
            run(Workload.builtin("gemm", seq=8), "tiny", options={"fusion": False})

    def test_functional_needs_data(self) -> None:
        workload = Workload.of_module(_mlp(torch.float32), torch.empty(4, 64, device="meta"))
        with pytest.raises(ArchsimError, match="^a functional run needs data: the inputs "
                                               "are on the meta device$"):
            run(workload, "tiny", mode="functional")

    def test_functional_refused_for_a_model_too_large_for_the_host(self) -> None:
        with pytest.raises(ArchsimError, match=r"^llama-7b cannot run functionally: "):
            run(Workload.builtin("llama-7b", layers=4), "tiny", mode="functional")

    def test_functional_run_checks_and_says_its_numbers(self) -> None:
        notes = Notes()
        x = torch.randn(4, 64)
        run(Workload.of_module(_mlp(torch.float32), x, name="mlp"), "tiny", mode="functional",
            progress=notes)
        assert notes.notes[-1].startswith("numerics: max |npu - torch cpu| = ")
        assert notes.notes[-1].endswith(" over 1 output(s)")

    @pytest.mark.parametrize(("layer", "op"), [
        (torch.nn.Dropout(0.5), "aten.native_dropout"), (lambda x: x + torch.rand_like(x),
                                                         "aten.rand_like")])
    def test_a_model_drawing_random_numbers_says_it_was_not_compared(self, layer,
                                                                     op: str) -> None:
        # its outputs used to pass the check by the float64 reference's own noise
        # ("numerics: max |npu - torch cpu| = 2", exit 0): nothing was compared
        class Model(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return layer(x * 2)

        notes = Notes()
        run(Workload.of_module(Model().train(), torch.randn(4, 8), name="random"), "tiny",
            mode="functional", progress=notes)
        assert notes.notes[-1] == (
            f"numerics: not compared with torch: the model draws random numbers or reads "
            f"uninitialized memory ({op}), so another run gets other numbers")


class TestDtype:
    def test_a_file_model_is_converted_and_says_so(self, tmp_path: Path) -> None:
        path = tmp_path / "mlp.py"
        path.write_text("import torch\ntorch.manual_seed(0)\n"
                        "model = torch.nn.Sequential(torch.nn.Linear(64, 128), "
                        "torch.nn.ReLU(), torch.nn.Linear(128, 32))\n"
                        "example_inputs = (torch.randn(256, 64),)\n")
        notes = Notes()
        converted = run(Workload.file(path, dtype="f16"), "tiny", mode="performance",
                        progress=notes)
        as_f32 = run(Workload.file(path), "tiny", mode="performance")
        native = run(Workload.of_module(_mlp(torch.float16),
                                        torch.randn(256, 64, dtype=torch.float16)),
                     "tiny", mode="performance")
        assert converted.total_cycles == native.total_cycles
        assert converted.dram_bytes == native.dram_bytes
        assert as_f32.dram_bytes > converted.dram_bytes  # the flag was not ignored
        assert "mlp: converted to f16 (float32 input, float32 weights)" in notes.notes
        assert converted.program.name == "mlp (f16 weights)"

    def test_the_callers_model_is_untouched(self) -> None:
        model = _mlp(torch.float32)
        run(Workload.of_module(model, torch.randn(4, 64), dtype="bf16"), "tiny",
            mode="performance")
        assert {p.dtype for p in model.parameters()} == {torch.float32}


class _Total(torch.nn.Module):
    """(x @ x).sum() times a parameter of 1."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x @ x).sum() * self.scale


class TestNumerics:
    def test_agreeing_outputs_pass_with_their_worst_difference(self) -> None:
        model, x = _mlp(torch.float32), torch.randn(4, 64)
        expected = model(x).detach()
        worst = check_numerics(model, (x,), (expected + 2e-6,), Notes())
        assert worst == pytest.approx(2e-6, rel=0.1)

    def test_a_wrong_number_is_an_error(self) -> None:
        model, x = _mlp(torch.float32), torch.randn(4, 64)
        wrong = model(x).detach().clone()
        wrong[1, 3] += 0.5
        with pytest.raises(NumericsError, match=r"^output 0: max \|npu - torch cpu\| = 0\.5, "
                                                r"over the torch.float32 tolerance "):
            check_numerics(model, (x,), (wrong,), Notes())

    def test_a_sum_in_another_order_passes_against_float64(self) -> None:
        """A model summing 4,096 terms with cancellation: the same terms added smallest
        first are 4x the output-scaled tolerance from torch's float32 sum but as close
        to the float64 sum as torch is (within ORDER_SLACK): rounding, not a wrong
        number; 1% off is still an error. The model's parameters stay float32."""
        torch.manual_seed(35)
        x = torch.randn(64, 64)
        model = _Total()
        other_order = torch.tensor(sorted((x @ x).flatten().tolist(), key=abs)).sum()
        assert check_numerics(model, (x,), (other_order,), Notes()) > 1.73e-5
        with pytest.raises(NumericsError, match=r"^output 0: max \|npu - torch cpu\|"):
            check_numerics(model, (x,), (other_order * 1.01,), Notes())
        assert model.scale.dtype == torch.float32

    def test_nan_and_shape_mismatches_are_errors(self) -> None:
        model, x = _mlp(torch.float32), torch.randn(4, 64)
        expected = model(x).detach()
        nan = expected.clone()
        nan[0, 0] = float("nan")
        with pytest.raises(NumericsError, match="^output 0: NaN where torch on CPU has none"):
            check_numerics(model, (x,), (nan,), Notes())
        with pytest.raises(NumericsError, match=r"^output 0: shape \(4, 31\), torch on CPU "
                                                r"\(4, 32\)$"):
            check_numerics(model, (x,), (expected[:, :31],), Notes())


def test_unrepeatable_ops_are_the_random_draws_that_draw() -> None:
    """SDPA carries the random tag for its dropout: at dropout_p 0 (every inference
    graph with attention) it draws nothing and its graph is compared."""
    import torch.nn.functional as F

    from torch_bridge.numerics import unrepeatable_ops

    class Model(torch.nn.Module):
        def forward(self, q, k, v):
            return (F.scaled_dot_product_attention(q, k, v), F.dropout(q, 0.3, False),
                    F.dropout(k, 0.0, True), torch.empty_like(v), F.dropout(v, 0.3, True))

    graph = torch.export.export(Model(), tuple(torch.randn(1, 2, 4, 8) for _ in range(3))).graph
    assert unrepeatable_ops(graph) == ("aten.empty_like", "aten.dropout")


def test_a_fully_padded_item_is_compared_with_the_path_torch_export_traced() -> None:
    """Under no_grad in eval mode nn.TransformerEncoderLayer takes torch's native fast
    path, which gives a fully padded item NaN; the exported (math) path the device runs
    gives it zeros, as the reference now does (a review's finding: the run failed)."""
    torch.manual_seed(0)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0,
                                                          batch_first=True)

        def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
            return self.layer(x, src_key_padding_mask=pad)

    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1] = True
    notes = Notes()
    run(Workload.of_module(Model().eval(), (torch.randn(2, 6, 16), pad), name="padded"),
        "tiny", mode="functional", progress=notes)
    assert notes.notes[-1].startswith("numerics: max |npu - torch cpu| = ")
    assert torch.backends.mha.get_fastpath_enabled()  # restored
