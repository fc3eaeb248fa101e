"""``python examples/triton/<name>.py`` runs the example on the npu device, checks it
against torch on CPU and prints the profile (each run here in-process, as a script)."""

import runpy

import pytest

from conftest import EXAMPLES


@pytest.mark.parametrize("name,label,outputs", [
    ("vector_add", "vector add", 1),
    ("softmax", "fused softmax", 1),
    ("rmsnorm", "RMSNorm with residual", 2),
    ("matmul", "tiled matmul", 1),
    ("flash_attention", "causal flash attention (prefill)", 1),
])
def test_an_example_run_as_a_script_checks_its_numbers_and_prints_its_time(
        capsys, name, label, outputs):
    runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert f"{label}: matches torch on CPU ({outputs} output(s))" in out
    assert "Profile on atom (1 GHz): 1 events," in out
    assert "(1 simulated runs: 1 eager ops, 0 compiled graphs)" in out


def test_a_result_off_from_torch_stops_the_example():
    import torch

    import vector_add
    from demo import demo

    x = torch.ones(2048)
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        demo("vector add", vector_add.add, lambda a, b: a - b, x, x)
