"""Inference batch norm is ``x * scale + shift`` per channel, as torch's CPU kernel
computes it, with ``scale`` and ``shift`` made from the parameters in one small kernel
ahead of the network (nodes that read only weights join each other's kernel,
``plan.Group.weights_only``) and two ops left in the convolution's epilogue. Before,
each parameter's cast was a kernel of its own, a DRAM round trip each on the critical
path: MobileNetV2's batch norms were 39% of its time on tpu-v4."""

from __future__ import annotations

import pytest
import torch

import compiler
from compiler import CompileOptions
from compiler.compile import clear_cache
from compiler.frontend import build
from compiler.passes import HoistWeightPrepPass
from compiler.plan import FusionPass
from compiler_helpers import config


def _conv_bn(cin: int, cout: int) -> torch.nn.Sequential:
    model = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 3, 1, 1, bias=False),
                                torch.nn.BatchNorm2d(cout), torch.nn.ReLU6())
    norm = model[1]
    with torch.no_grad():
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2)
        norm.weight.uniform_(0.5, 2)
        norm.bias.uniform_(-1, 1)
    return model.eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_parameters_are_prepared_in_one_kernel_and_the_epilogue_scales_and_shifts(dtype):
    torch.manual_seed(0)
    model = _conv_bn(8, 16).to(dtype)
    x = torch.randn(1, 8, 12, 12, dtype=dtype)
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(model, (x,)).run_decompositions(),
                                      config("atom"))
    (out,), _ = compiled.run(x)
    # torch computes x * alpha + beta too: equal in f32 to rounding, in bf16 to one ulp
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else \
        {"rtol": 8e-3, "atol": 8e-3}
    torch.testing.assert_close(out, model(x), **tol)
    assert len(compiled.kernels) == 2 and compiled.kernels[1] == "0:convolution"
    graph, _, _ = build(torch.export.export(model, (x,)).run_decompositions(),
                        CompileOptions())
    kernels = FusionPass().apply(HoistWeightPrepPass().apply(graph), CompileOptions())
    prep, conv = kernels
    assert prep.group.weights_only and prep.anchor is None
    # rsqrt(var + eps) * weight, mean * scale, bias - that; in bf16 four casts before
    assert len(prep.group.nodes) == 5 + 4 * (dtype == torch.bfloat16)
    # the epilogue: x * scale + shift, then ReLU6 (casts aside)
    kinds = [n.spec.kind.value for n in conv.group.nodes if hasattr(n.spec, "kind")]
    assert kinds == ["mul", "add", "max", "min"]


def test_two_batch_norms_of_the_same_width_share_the_prep_kernel():
    torch.manual_seed(0)
    model = torch.nn.Sequential(_conv_bn(8, 16), _conv_bn(16, 16)).to(torch.bfloat16)
    x = torch.randn(1, 8, 12, 12, dtype=torch.bfloat16)
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(model, (x,)).run_decompositions(),
                                      config("atom"))
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, model(x), rtol=2e-2, atol=2e-2)
    # one kernel prepares both norms' scales and shifts, then the two convolutions
    assert len(compiled.kernels) == 3


def test_a_weight_prep_kernel_leaves_the_first_tiles_buffers_free():
    # LayerNorm's weight and bias cast to f32 run ahead of the norm; their buffers sit at
    # the top of the scratchpad, so the norm's first input load (at byte 0) starts at
    # once instead of waiting for the casts' copies out (770 cycles on tpu-v4)
    from compiler.ir.ops import Load

    model = torch.nn.LayerNorm(768).to(torch.bfloat16)
    x = torch.randn(1, 128, 768, dtype=torch.bfloat16)
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(model, (x,)).run_decompositions(),
                                      config("tpu-v4"))
    (out,), result = compiled.run(x)
    torch.testing.assert_close(out, model(x), rtol=2e-2, atol=2e-2)
    prep, norm = compiled.kernels  # the weight casts, then the norm
    assert prep == norm == "native_layer_norm"
    first: dict[str, int] = {}  # per core, its first load of the input
    for i, c in enumerate(compiled.program.commands):
        if isinstance(c.op, Load) and c.op.src.tensor == compiled.input_names[-1]:
            core = c.engine.split(".")[0]
            first[core] = min(first.get(core, 1 << 40), int(result.starts[i]))
    assert len(first) > 1 and set(first.values()) == {0}
