"""``archsim validate`` and the workloads a measurements file names."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from archsim.cli.main import main
from archsim.config import load_config
from archsim.app.catalog import WorkloadNameError, build_workload
from archsim.app.validate import (ValidationDataError, read_measurements, roofline_cycles,
                                  simulate_workload, validate)

SMALL = {"gemm_128x256x64": 5000.0, "layernorm_64x768": 2000.0, "softmax_64x128": 900.0,
         "attention_2x64x32": 1500.0, "conv_2x8x8x16x32x3x1x1": 4000.0}


@pytest.fixture
def small_csv(tmp_path: Path) -> Path:
    path = tmp_path / "small.csv"
    rows = "".join(f"{name},{cycles}\n" for name, cycles in SMALL.items())
    path.write_text("workload,npu_cycles\n" + rows)
    return path


class TestWorkloads:
    def test_gemm_is_a_matmul_of_the_named_shapes(self) -> None:
        module, (a, b) = build_workload("gemm_3x5x7")
        assert a.shape == (3, 5) and b.shape == (5, 7)
        torch.testing.assert_close(module(a, b), a @ b)

    def test_conv_is_bias_free_and_channels_last(self) -> None:
        module, (x,) = build_workload("conv_2x9x9x4x6x3x2x1")
        assert module.bias is None and (module.stride, module.padding) == ((2, 2), (1, 1))
        assert x.shape == (2, 4, 9, 9) and x.is_contiguous(memory_format=torch.channels_last)
        assert module(x).shape == (2, 6, 5, 5)

    def test_attention_core_is_the_written_out_formula(self) -> None:
        module, (q, k, v) = build_workload("attention_3x16x8")
        expected = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), dim=-1) @ v
        torch.testing.assert_close(module(q, k, v), expected)

    def test_norms_and_softmax(self) -> None:
        ln, (x,) = build_workload("layernorm_4x768")
        torch.testing.assert_close(ln(x), torch.nn.functional.layer_norm(x, (768,)))
        sm, (y,) = build_workload("softmax_4x6")
        torch.testing.assert_close(sm(y), torch.softmax(y, dim=1))

    def test_bert_layer_uses_a_relu_ffn(self) -> None:
        module, (x,) = build_workload("bert_base_s16")
        assert x.shape == (1, 16, 768) and module(x).shape == (1, 16, 768)
        assert module.intermediate.out_features == 3072

    @pytest.mark.parametrize(("name", "hidden", "heads"), [
        ("bert_large_s8", 1024, 16), ("bert_xlarge_s8", 2048, 32)])
    def test_larger_bert_layers(self, name: str, hidden: int, heads: int) -> None:
        # PyTorchSim's public TPU v3 rows: hidden / 64 heads, a 4x ReLU FFN
        module, (x,) = build_workload(name)
        assert x.shape == (1, 8, hidden) and module(x).shape == (1, 8, hidden)
        assert module.attention.heads == heads
        assert module.intermediate.out_features == 4 * hidden

    def test_unknown_names_list_the_accepted_forms(self) -> None:
        with pytest.raises(WorkloadNameError, match=r"unknown workload 'gemm_1x2': expected "
                                                    r"one of the forms gemm_512x512x512, "):
            build_workload("gemm_1x2")


class TestMeasurements:
    def test_reads_rows(self, small_csv: Path) -> None:
        rows = read_measurements(small_csv)
        assert [(r.workload, r.cycles) for r in rows] == list(SMALL.items())

    @pytest.mark.parametrize(("text", "message"), [
        ("name,cycles\ngemm_1x1x1,3\n", r"expected a header with a 'workload' column"),
        ("workload,cycles\ngemm_1x1x1,-3\n", r"line 2: expected a workload name and a "
                                             r"positive cycle count, got 'gemm_1x1x1', '-3'"),
        ("workload,cycles\n", r"no measurement rows after the header"),
    ])
    def test_bad_files_are_named(self, tmp_path: Path, text: str, message: str) -> None:
        path = tmp_path / "bad.csv"
        path.write_text(text)
        with pytest.raises(ValidationDataError, match=message):
            read_measurements(path)


class TestValidate:
    def test_rows_never_beat_their_roofline(self, small_csv: Path) -> None:
        report = validate(small_csv, load_config("tpu-v3"))
        assert [r.workload for r in report.rows] == list(SMALL)
        for row in report.rows:
            assert row.simulated_cycles >= row.roofline_cycles > 0, row
            assert row.error == pytest.approx(row.simulated_cycles / row.measured_cycles - 1)
        assert report.mean_absolute_error == pytest.approx(
            sum(abs(r.error) for r in report.rows) / len(SMALL))

    @pytest.mark.parametrize("precision", ["default", "highest"])
    def test_roofline_is_the_workloads_own_bound(self, precision: str) -> None:
        config = load_config("tpu-v3").with_overrides({"core.matrix.f32_precision": precision})
        passes = {"default": 1, "highest": 6}[precision]
        flops_per_cycle = 2 * 2 * 128 * 128 / passes  # two 128x128 MXUs, bf16 passes
        bytes_per_cycle = 16 * 28.125e9 / 940e6
        for name, (m, k, n) in {"gemm_512x512x512": (512, 512, 512),
                                "gemm_8x4096x8": (8, 4096, 8)}.items():
            module, inputs = build_workload(name)
            want = max(2 * m * k * n / flops_per_cycle, 4 * (m * k + k * n + m * n) /
                       bytes_per_cycle)
            assert roofline_cycles(module, inputs, config) == int(want)

    @pytest.mark.parametrize("preset", ["tiny", "atom", "tpu-v3"])
    def test_roofline_is_a_lower_bound_of_a_small_gemm(self, preset: str) -> None:
        # tiny's arrays take f32 natively: its roofline had divided the peak by the
        # f32_passes of a 16-bit array (3) and stood 2.3x above the simulated time.
        simulated, roofline = simulate_workload("gemm_64x64x64", load_config(preset))
        assert 0 < roofline <= simulated

    def test_roofline_of_an_f32_array_takes_one_pass(self) -> None:
        # tiny: 2 cores x one 4x4 f32 array = 32 MACs = 64 FLOP per cycle, 16 B/cycle
        # DRAM. 2*64^3 / 64 = 8192 cycles of compute over 3*64*64*4 / 16 = 3072 of DRAM.
        module, inputs = build_workload("gemm_64x64x64")
        assert roofline_cycles(module, inputs, load_config("tiny")) == 8192

    def test_precision_policy_changes_the_f32_gemm(self, small_csv: Path) -> None:
        config = load_config("tpu-v3")
        default = validate(small_csv, config, ["gemm_128x256x64"]).rows[0]
        highest = validate(small_csv, config.with_overrides(
            {"core.matrix.f32_precision": "highest"}), ["gemm_128x256x64"]).rows[0]
        assert highest.simulated_cycles > default.simulated_cycles

    def test_cli_prints_the_table_and_writes_json(self, small_csv: Path, tmp_path: Path,
                                                  capsys) -> None:
        out_json = tmp_path / "v.json"
        code = main(["validate", str(small_csv), "-c", "tpu-v3", "-w", "softmax_64x128",
                     "--json", str(out_json)])
        out, _ = capsys.readouterr()
        assert code == 0
        assert "softmax_64x128" in out and "gemm_128x256x64" not in out
        assert "mean absolute error over 1 workloads on tpu-v3" in out
        data = json.loads(out_json.read_text())
        assert data["rows"][0]["measured_cycles"] == SMALL["softmax_64x128"]
        assert data["mean_absolute_error"] == pytest.approx(abs(data["rows"][0]["error"]))

    def test_cli_errors_are_one_line(self, tmp_path: Path, capsys) -> None:
        assert main(["validate", str(tmp_path / "none.csv")]) == 1
        _, err = capsys.readouterr()
        assert err == f"archsim: error: no such measurements file: {tmp_path / 'none.csv'}\n"


HUGE = "gemm_100000x100000x100000"  # 80 GB of inputs; allocating them was a traceback


@pytest.fixture
def no_allocation(monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """The pipeline's builds of sized workloads, refusing any off ``meta``."""
    import archsim.app.pipeline

    made: list[torch.Tensor] = []

    def on_meta_only(name: str, *, meta: bool = False):
        assert meta, f"{name} built with data"
        module, inputs = build_workload(name, meta=True)
        made.extend(inputs)
        return module, inputs

    monkeypatch.setattr(archsim.app.pipeline, "build_workload", on_meta_only)
    return made


class TestTooLargeForTheHost:
    """A sized workload is sized on ``meta`` first, as a built-in model is."""

    def test_performance_only_is_built_from_shapes(self, no_allocation) -> None:
        from archsim.app.pipeline import run
        from archsim.app.workload import Workload
        from archsim.errors import DeviceMemoryError

        with pytest.raises(DeviceMemoryError, match=r"needs 74.51 GiB of DRAM for its "
                                                    r"inputs and weights alone but atom "):
            run(Workload.builtin(HUGE), "atom", mode="performance")
        assert [tuple(t.shape) for t in no_allocation] == [(100000, 100000)] * 2

    def test_functional_is_refused_before_anything_is_allocated(self, no_allocation) -> None:
        from archsim.app.pipeline import run
        from archsim.app.workload import Workload
        from archsim.errors import HostMemoryError

        with pytest.raises(HostMemoryError, match=rf"^{HUGE} cannot run functionally: 0M "
                                                  r"parameters, 74.5 GiB of weights and "
                                                  r"inputs on the host \(functional runs "):
            run(Workload.builtin(HUGE), "atom", mode="functional")

    def test_auto_runs_one_too_large_performance_only_and_says_so(self, no_allocation
                                                                  ) -> None:
        from archsim.app.pipeline import run
        from archsim.app.workload import Workload

        notes = []

        class Notes:
            def step(self, text: str):
                import contextlib
                return contextlib.nullcontext()

            def note(self, text: str) -> None:
                notes.append(text)

        name = "gemm_20000x20000x8"  # 1.5 GiB of inputs, few commands
        result = run(Workload.builtin(name), "atom", progress=Notes())
        assert result.total_cycles > 0
        assert notes[0] == (f"{name}: performance-only, shapes only (> 30M parameters or "
                            f"> 1 GiB of weights and inputs)")

    def test_cli_says_it_in_one_line(self, capsys) -> None:
        assert main(["run", HUGE, "--perf-only", "-q"]) == 1
        _, err = capsys.readouterr()
        assert err.startswith("archsim: error: ") and "74.51 GiB of DRAM" in err
        assert err.count("\n") == 1, err

    def test_a_sweep_says_it_in_its_points_status(self, capsys) -> None:
        # non-zero: no point ran
        assert main(["sweep", HUGE, "-g", "core.matrix.rows=64", "-j", "1", "-q"]) == 1
        out, err = capsys.readouterr()
        assert f"does not fit: {HUGE} needs 74.51 GiB of DRAM" in out
        assert "Traceback" not in out + err

    def test_a_validate_row_says_it_in_one_line(self, tmp_path: Path, capsys) -> None:
        path = tmp_path / "huge.csv"
        path.write_text(f"workload,npu_cycles\n{HUGE},1000\n")
        assert main(["validate", str(path)]) == 1
        _, err = capsys.readouterr()
        assert err.startswith("archsim: error: ") and "74.51 GiB of DRAM" in err
        assert err.count("\n") == 1, err

    @pytest.mark.parametrize(("name", "cycles"), [("gemm_256x128x64", 3960),
                                                  ("conv_1x16x16x8x8x3x1x1", 2162)])
    def test_small_rows_keep_their_cycles(self, name: str, cycles: int) -> None:
        # the numbers before sizing on meta (a workload that fits is still built on the
        # CPU: a channels_last convolution's output is contiguous on meta, 2261 cycles)
        from archsim.app.validate import simulate_workload

        assert simulate_workload(name, load_config("atom"))[0] == cycles


LLM_HEADER = "model,config,chips,tp,pp,batch,prefill,decode,dtype,kv_dtype,metric,measured\n"
SMALL_LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2,
               "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64}


@pytest.fixture
def llm_csv(tmp_path: Path) -> Path:
    model = tmp_path / "small.json"
    model.write_text(json.dumps(SMALL_LLAMA))
    path = tmp_path / "llm.csv"
    path.write_text(LLM_HEADER
                    + f"{model},tiny,2,2,1,1,16,2,f16,f16,ttft_ms,0.5\n"
                    + f"{model},tiny,2,2,1,1,16,2,f16,f16,decode_step_ms,0.1\n"
                    + f"{model},tiny,2,2,1,1,16,2,f16,f16,tokens_per_s,9000\n")
    return path


class TestLlmRows:
    @pytest.mark.parametrize(("row", "message"), [
        ("m,tiny,2,2,1,1,16,2,f16,f16,ttft_ms,-1", r"line 2, column 'measured': expected a "
                                                   r"positive number, got '-1'"),
        ("m,tiny,2,x,1,1,16,2,f16,f16,ttft_ms,1", r"line 2, column 'tp': expected a positive "
                                                  r"integer, got 'x'"),
        ("m,tiny,2,2,1,1,16,2,f8,f16,ttft_ms,1", r"line 2, column 'dtype': expected one of "
                                                 r"bf16, f16, f32, got 'f8'"),
        ("m,tiny,2,2,1,1,16,2,f16,f16,ttft,1", r"line 2, column 'metric': expected one of "
                                               r"ttft_ms, decode_step_ms, tokens_per_s, "
                                               r"got 'ttft'"),
        ("m,tiny,4,2,1,1,16,2,f16,f16,ttft_ms,1", r"line 2, column 'chips': 4 is not tp 2 x "
                                                  r"pp 1"),
        ("m,tiny,2,2,1,1,16,0,f16,f16,decode_step_ms,1", r"line 2, column 'decode': expected "
                                                         r"at least 1 new token"),
        (",tiny,2,2,1,1,16,2,f16,f16,ttft_ms,1", r"line 2, column 'model': expected a name"),
    ])
    def test_parser_errors_name_the_row_and_the_column(self, tmp_path: Path, row: str,
                                                        message: str) -> None:
        from archsim.app.validate import validate_serving

        path = tmp_path / "bad.csv"
        path.write_text(LLM_HEADER + row + "\n")
        with pytest.raises(ValidationDataError, match=message):
            validate_serving(path)

    def test_a_missing_column_is_named(self, tmp_path: Path) -> None:
        from archsim.app.validate import validate_serving

        path = tmp_path / "bad.csv"
        path.write_text(LLM_HEADER.replace("kv_dtype,", "") + "m,tiny,2,2,1,1,16,2,f16,"
                                                              "ttft_ms,1\n")
        with pytest.raises(ValidationDataError, match=r"missing kv_dtype"):
            validate_serving(path)

    def test_a_row_that_cannot_run_names_its_line(self, tmp_path: Path) -> None:
        from archsim.app.validate import validate_serving

        path = tmp_path / "bad.csv"
        path.write_text(LLM_HEADER + "no-such-model,tiny,2,2,1,1,16,2,f16,f16,ttft_ms,1\n")
        with pytest.raises(ValidationDataError, match=r"bad.csv line 2: .*no-such-model"):
            validate_serving(path)

    def test_rows_are_the_serving_runs_figures(self, llm_csv: Path) -> None:
        from archsim.app.validate import validate_serving
        from serving.plan import Parallelism, Request
        from serving.run import serve

        report = validate_serving(llm_csv)
        want = serve(str(llm_csv.parent / "small.json"), load_config("tiny"),
                     Request(1, 16, 2, "f16", "f16"), Parallelism(2))
        ttft, step, rate = report.rows
        assert ttft.simulated == pytest.approx(want.ttft_s * 1e3)
        assert step.simulated == pytest.approx(want.tpot_s * 1e3)
        assert rate.simulated == pytest.approx(want.tokens_per_s)
        assert ttft.error == pytest.approx(ttft.simulated / 0.5 - 1)
        assert rate.error == pytest.approx(9000 / rate.simulated - 1)  # slower is > 0
        for row in (ttft, step):
            assert row.simulated >= row.roofline
        assert rate.simulated <= rate.roofline
        assert report.mean_absolute_error == pytest.approx(
            sum(abs(r.error) for r in report.rows) / 3)

    def test_cli_detects_the_format_and_writes_json(self, llm_csv: Path, tmp_path: Path,
                                                    capsys) -> None:
        out_json = tmp_path / "v.json"
        assert main(["validate", str(llm_csv), "--json", str(out_json)]) == 0
        out, _ = capsys.readouterr()
        assert "small tiny tp2 b1 p16 d2 f16" in out and "decode_step_ms" in out
        assert "mean absolute error over 3 rows" in out
        data = json.loads(out_json.read_text())
        assert [r["metric"] for r in data["rows"]] == ["ttft_ms", "decode_step_ms",
                                                       "tokens_per_s"]
        assert data["rows"][0]["unit"] == "ms"
        assert set(data["mean_absolute_error_by_metric"]) == {"ttft_ms", "decode_step_ms",
                                                              "tokens_per_s"}


def test_help_names_a_measurements_file_that_ships_with_archsim(capsys) -> None:
    # It named ../shared/data/tpuv3-calibration.csv, outside the repository.
    with pytest.raises(SystemExit):
        main(["validate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    example = text.split("measurements, e.g. ")[1].split()[0]
    assert example == "benchmarks/data/tpuv3-calibration.csv"
    assert (Path(__file__).resolve().parents[2] / example).is_file()


def test_an_unknown_workload_row_lists_the_rows_there_are(small_csv: Path) -> None:
    # -w nosuch said "no rows named nosuch" and not which rows the file has.
    with pytest.raises(ValidationDataError) as caught:
        validate(small_csv, load_config("tiny"), ["nosuch", "gemm_128x256x64"])
    assert str(caught.value) == f"{small_csv}: no rows named nosuch (its rows: " \
                                f"{', '.join(SMALL)})"
