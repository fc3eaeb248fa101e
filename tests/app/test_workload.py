"""The one Workload type: what the command line's MODEL names, and the options that
cannot apply to it, refused in one line before anything runs."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from archsim.app.workload import Kind, Workload
from archsim.errors import ArchsimError

MODEL_FILE = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU())
example_inputs = (torch.randn(8, 64),)
"""


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.py"
    path.write_text(MODEL_FILE)
    return path


class TestParse:
    def test_kinds(self, model_file: Path, tmp_path: Path) -> None:
        program = tmp_path / "p.rbln"
        program.write_text("")
        assert Workload.parse("gpt2", seq=64).kind is Kind.BUILTIN
        assert Workload.parse("gemm_64x32x16").kind is Kind.SIZED
        assert Workload.parse(str(model_file), dtype="f16").kind is Kind.FILE
        assert Workload.parse(str(program)).kind is Kind.PROGRAM

    @pytest.mark.parametrize("option, message", [
        ({"seq": 512}, "--seq cannot apply to '{f}': a model file's shapes are those of its "
                       "example_inputs"),
        ({"batch": 2, "layers": 3}, "--batch, --layers cannot apply to '{f}': a model "
                                    "file's shapes are those of its example_inputs"),
    ])
    def test_sizes_refused_for_a_model_file(self, model_file: Path, option: dict,
                                            message: str) -> None:
        with pytest.raises(ArchsimError) as error:
            Workload.parse(str(model_file), **option)
        assert str(error.value) == message.format(f=model_file)

    def test_sizes_a_builtin_does_not_take(self) -> None:
        with pytest.raises(ArchsimError, match=r"^--layers cannot apply to 'resnet-18': it "
                                               r"takes --batch$"):
            Workload.parse("resnet-18", layers=2)
        with pytest.raises(ArchsimError, match=r"^--batch cannot apply to 'gemm': it takes "
                                               r"--seq$"):
            Workload.parse("gemm", batch=4)

    def test_sized_names_carry_their_sizes(self) -> None:
        with pytest.raises(ArchsimError, match=r"^--seq cannot apply to 'gemm_8x8x8': its "
                                               r"sizes are in its name$"):
            Workload.parse("gemm_8x8x8", seq=16)

    def test_program_takes_no_options(self, tmp_path: Path) -> None:
        program = tmp_path / "p.rbln"
        program.write_text("")
        with pytest.raises(ArchsimError, match=r"^--dtype cannot apply to '.*p.rbln': a "
                                               r"program's shapes and dtypes"):
            Workload.parse(str(program), dtype="f16")

    def test_missing_files_and_unknown_names(self, tmp_path: Path) -> None:
        with pytest.raises(ArchsimError, match="^no such model file: "):
            Workload.parse(str(tmp_path / "none.py"))
        with pytest.raises(ArchsimError, match="^no such program file: "):
            Workload.parse(str(tmp_path / "none.rbln"))
        with pytest.raises(ArchsimError, match=r"^unknown model 'gpt5': give a built-in "
                                               r"workload \(gpt2, "):
            Workload.parse("gpt5")
        with pytest.raises(ArchsimError, match=r"^unknown dtype 'f8': expected one of f32, "
                                               r"f16, bf16, i8$"):  # i8: built-in gemm
            Workload.parse("gpt2", dtype="f8")
        with pytest.raises(ArchsimError, match=r"^--kwarg applies to a model file \(.py\), "
                                               r"not to 'gpt2'$"):
            Workload.parse("gpt2", kwargs={"use_cache": True})

    def test_pickles_for_sweep_workers(self, model_file: Path) -> None:
        workload = Workload.parse(str(model_file), dtype="bf16", kwargs={"x": 1})
        assert pickle.loads(pickle.dumps(workload)) == workload
        with pytest.raises(ArchsimError, match="a module workload runs in its own process"):
            pickle.dumps(Workload.of_module(object(), ()))


class TestTransformersConfig:
    def test_bundled_names_and_config_files(self, tmp_path: Path) -> None:
        assert Workload.parse("llama-2-7b", seq=64).kind is Kind.TRANSFORMERS
        assert Workload.parse("llama-7b").kind is Kind.BUILTIN  # the built-in wins
        config = tmp_path / "m" / "config.json"
        config.parent.mkdir()
        config.write_text('{"model_type": "llama"}')
        assert Workload.parse(str(config)).kind is Kind.TRANSFORMERS
        assert Workload.parse(str(config.parent)).kind is Kind.TRANSFORMERS

    def test_unreadable_configs_are_refused_before_running(self, tmp_path: Path) -> None:
        with pytest.raises(ArchsimError, match=r"^unknown model '.*none\.json': not a bundled "
                                               r"model \("):
            Workload.parse(str(tmp_path / "none.json"))
        bad = tmp_path / "bad.json"
        bad.write_text("[1, 2]")
        with pytest.raises(ArchsimError, match=r"bad\.json: expected a JSON object \(a "
                                               r"transformers config\), got list$"):
            Workload.parse(str(bad))


@pytest.mark.parametrize("name, message", [
    # gemm_0x64x64 was a ZeroDivisionError traceback in the tiling cost model
    ("gemm_0x64x64", "gemm_0x64x64: M is 0 in gemm_MxKxN; sizes are at least 1"),
    ("conv_1x8x8x4x4x3x0x1", "conv_1x8x8x4x4x3x0x1: STRIDE is 0 in "
                             "conv_BxHxWxCINxCOUTxKxSTRIDExPAD; sizes are at least 1 (the "
                             "padding may be 0)"),
])
def test_a_sized_workload_with_a_zero_size_is_refused_by_name(name: str, message: str) -> None:
    from archsim.app.catalog import WorkloadNameError, build_workload

    with pytest.raises(WorkloadNameError) as early:
        Workload.builtin(name)
    assert str(early.value) == message
    with pytest.raises(WorkloadNameError) as built:  # archsim validate's door
        build_workload(name)
    assert str(built.value) == message
    assert Workload.builtin("conv_1x8x8x4x4x3x1x0").kind is Kind.SIZED  # no padding: fine
