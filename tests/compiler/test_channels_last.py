"""Channels-last images (compiler.layout): a user input or graph output torch holds
NHWC is stored NHWC, and a convolution reads and writes it without rearranging it.

Every case runs functionally against torch on CPU (the result must also come back
with torch's channels-last strides); the timing cases use the one-array configuration
of benchmarks/conv_mapping.py, where the array's fold is hand-derivable."""

from __future__ import annotations

import pytest
import torch

import compiler
import compiler.kernels.conv as conv_kernel
from archsim.agreement import ConvLayer, conv_agreement
from archsim.simulator import Simulator
from compiler import CompileOptions
from compiler.compile import clear_cache
from compiler.frontend import build
from compiler.graph import Conv2d
from compiler.layout import ChannelsLastConvPass
from compiler.passes import DeadCodePass
from compiler.ir.ops import Load, MatMul, Store, Transpose
from compiler.kernels.conv_geometry import Geometry
from compiler_helpers import ARRAY, config

CL = torch.channels_last


def _exported(cin: int, cout: int, k: int, stride: int, pad: int, hw: int, batch: int = 2,
              bias: bool = False, seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Conv2d(cin, cout, k, stride, pad, bias=bias).to(memory_format=CL)
    x = torch.randn(batch, cin, hw, hw).to(memory_format=CL)
    return model, x, torch.export.export(model, (x,))


def _run(exported, x, cfg, **options):
    clear_cache()
    compiled = compiler.compile_graph(exported, cfg, CompileOptions(**options))
    (out,), result = compiled.run(x)
    return compiled, out, result


def _ops(compiled, kind):
    return [c.op for c in compiled.program.commands if isinstance(c.op, kind)]


@pytest.mark.parametrize("cin,cout,k,stride,pad,hw", [
    (16, 32, 3, 1, 1, 14),   # stride 1: the window is the one phase
    (16, 24, 3, 2, 1, 15),   # stride 2, 64-byte pixels: phases by strided DMA
    (3, 16, 7, 2, 3, 32),    # a stem's 3 channels: window whole, phases split
    (64, 128, 1, 2, 0, 28),  # ResNet's 1x1 stride-2 shortcut
    (16, 16, 3, 1, 0, 9),    # no padding
])
def test_channels_last_convolution_matches_torch_and_returns_channels_last(
        cin, cout, k, stride, pad, hw):
    model, x, exported = _exported(cin, cout, k, stride, pad, hw)
    before = x.clone()
    compiled, out, _ = _run(exported, x, config("atom"))
    want = model(x)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
    assert out.is_contiguous(memory_format=CL) and not out.is_contiguous()
    assert torch.equal(x, before)
    # one kernel: the convolution, reading and writing NHWC (no permute kernels),
    # which the report's mapping line says
    assert len(compiled.kernels) == 1
    assert list(compiled.choices.values())[0].endswith("; NHWC in and out")
    graph, _, _ = build(exported, CompileOptions())
    graph = DeadCodePass().apply(ChannelsLastConvPass().apply(graph))
    (conv,) = graph.nodes
    assert isinstance(conv.spec, Conv2d)
    assert conv.spec.channels_last_in and conv.spec.channels_last_out
    assert conv.inputs[0] is graph.inputs[-1] and conv.out is graph.outputs[0]
    stores = _ops(compiled, Store)
    assert stores and all(s.dst.tensor == compiled.output_names[0] for s in stores)
    # the output boxes are NHWC boxes covering the output once
    n, c, h, w = want.shape
    assert all(s.dst.shape[1] <= h and s.dst.shape[2] <= w and s.dst.shape[3] <= c
               for s in stores)
    assert sum(s.dst.shape[0] * s.dst.shape[1] * s.dst.shape[2] * s.dst.shape[3]
               for s in stores) == n * h * w * c


def test_the_layout_changes_only_the_schedule_not_the_numbers():
    model, x, exported = _exported(16, 24, 3, 2, 1, 15)
    cfg = config("atom")
    _, nhwc, _ = _run(exported, x, cfg)
    _, nchw, _ = _run(exported, x, cfg, channels_last=False)
    assert torch.equal(nhwc, nchw)
    assert not nchw.is_contiguous(memory_format=CL)  # off: returned in logical order
    torch.testing.assert_close(nchw, model(x), rtol=1e-4, atol=1e-4)


def test_stride_one_reads_the_window_as_stored():
    # NCHW: the window is loaded channels-first and the vector unit rearranges it
    # (a Transpose per step) and transposes the output back; NHWC: neither.
    _, x, exported = _exported(16, 32, 3, 1, 1, 14)
    cfg = config("atom")
    nhwc, _, _ = _run(exported, x, cfg)
    nchw, _, _ = _run(exported, x, cfg, channels_last=False)
    image = nhwc.input_names[-1]
    loads = [op for op in _ops(nhwc, Load) if op.src.tensor == image]
    assert loads and all(op.src.slices[-1].length == 16 for op in loads)  # runs of C
    def rearranged(compiled):  # (window phase splits, output transposes to NCHW)
        ops = _ops(compiled, Transpose)
        return (sum(len(t.src.shape) == 6 for t in ops),
                sum(t.perm in ((0, 2, 1), (1, 0)) for t in ops))

    splits, backs = rearranged(nchw)
    assert splits > 0 and backs > 0
    # left: the weights' rearrangement and the taps packed side by side into K
    assert rearranged(nhwc) == (0, 0)


def test_a_one_by_one_stride_two_convolution_loads_one_phase():
    # Of the window's four stride phases only (0, 0) is read by a 1x1 kernel: only it
    # is loaded, one strided DMA of every other row and column.
    assert Geometry((1, 1), (2, 2), (1, 1), 28, 28, 56, 56).phases_read() == {(0, 0)}
    assert Geometry((3, 3), (2, 2), (1, 1), 28, 28, 58, 58).phases_read() == \
        {(0, 0), (0, 1), (1, 0), (1, 1)}
    _, x, exported = _exported(64, 128, 1, 2, 0, 56, batch=1)
    compiled, _, _ = _run(exported, x, ARRAY)
    image = compiled.input_names[-1]
    (load,) = [op for op in _ops(compiled, Load) if op.src.tensor == image]
    n, rows, cols, chans = load.src.slices
    assert (rows.start, rows.step, rows.length) == (0, 2, 28)
    assert (cols.start, cols.step, cols.length) == (0, 2, 28)
    assert chans.length == 64


def test_resnet_shortcut_on_one_array_within_a_quarter_of_scale_sim():
    # ResNet-18's Conv3_s (1x1, stride 2, 64 -> 128 on 56x56) on one 128x128 array with
    # one weight buffer: the output leaves the array channels last and is stored as it
    # is, so the array's one fold is the critical path: 2R + C - 2 + M cycles for M =
    # 784 streamed pixels (SCALE-Sim's ws fold), between the first load and the store.
    _, x, exported = _exported(64, 128, 1, 2, 0, 56, batch=1)
    clear_cache()
    compiled = compiler.compile_graph(exported, ARRAY)
    result = Simulator(ARRAY).run(compiled.program)
    (matmul,) = _ops(compiled, MatMul)
    assert matmul.a.shape[:-1] == (1, 28, 28) or matmul.a.shape[0] == 784
    assert result.engine_busy_cycles["core0.mxu0"] == 2 * 128 + 128 - 2 + 784
    scalesim = conv_agreement(ConvLayer(56, 56, 1, 1, 64, 128, 2), rows=128, cols=128,
                              dataflow="ws").scalesim_total_cycles
    assert scalesim == 1222
    assert result.total_cycles <= 1.25 * scalesim
    # the same layer channels-first pays the transpose back to NCHW (1.59x)
    clear_cache()
    nchw = compiler.compile_graph(exported, ARRAY, CompileOptions(channels_last=False))
    assert Simulator(ARRAY).run(nchw.program).total_cycles > 1.5 * scalesim


def test_a_convolution_with_bias_writes_nhwc_with_the_bias_as_its_epilogue():
    # permute(conv + b) becomes permute(conv) + b viewed [1, 1, 1, C]: the permute
    # reaches the convolution, which writes NHWC and adds the bias on its tiles
    model, x, exported = _exported(8, 16, 3, 1, 1, 10, bias=True)
    compiled, out, _ = _run(exported, x, config("atom"))
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert out.is_contiguous(memory_format=CL)
    assert len(compiled.kernels) == 1
    assert list(compiled.choices.values())[0].endswith("; NHWC in and out")
    graph, _, _ = build(exported, CompileOptions())
    graph = DeadCodePass().apply(ChannelsLastConvPass().apply(graph))
    conv, view, add = graph.nodes[-3:]  # after the bias's own [C, 1, 1] view
    assert conv.spec.channels_last_out and conv.out.shape == (2, 10, 10, 16)
    assert view.out.shape == (1, 1, 1, 16) and add.inputs == (conv.out, view.out)
    assert add.out is graph.outputs[0]


@pytest.mark.parametrize("mapping", ["auto", "packed", "implicit", "per_tap"])
def test_every_mapping_runs_an_epilogue_on_nhwc_tiles(monkeypatch, mapping):
    # batch norm and ReLU after a stride-2 convolution, channels-last in and out: the
    # implicit GEMM's tiles are channels last already; the packed taps' (pixels
    # streamed as columns) and the per-tap kernel's are transposed once first
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, 2, 1, bias=False),
                                torch.nn.BatchNorm2d(32), torch.nn.ReLU()).eval()
    norm = model[1]
    norm.running_mean.uniform_(-1, 1)
    norm.running_var.uniform_(0.5, 2)
    norm.weight.data.uniform_(0.5, 2)
    norm.bias.data.uniform_(-1, 1)
    model = model.to(memory_format=CL)
    x = torch.randn(2, 16, 17, 17).to(memory_format=CL)
    exported = torch.export.export(model, (x,))
    with monkeypatch.context() as patch:
        if mapping in ("packed", "per_tap"):
            patch.setattr(conv_kernel, "choose_conv_tiling", lambda *a, **k: None)
        if mapping in ("implicit", "per_tap"):
            patch.setattr(conv_kernel, "choose_packed_tiling", lambda *a, **k: None)
        compiled, out, _ = _run(exported, x, config("atom"))
    clear_cache()
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert out.is_contiguous(memory_format=CL)
    choice = [c for s, c in compiled.choices.items() if "conv" in s][0]
    assert choice.startswith({"auto": "implicit GEMM", "implicit": "implicit GEMM",
                              "packed": "taps packed into K",
                              "per_tap": "one tap at a time"}[mapping])
    assert choice.endswith("; NHWC in and out")
    # the convolution's kernel ends with the normalized, rectified NHWC stores
    stores = _ops(compiled, Store)
    assert stores and all(s.dst.tensor == compiled.output_names[0] for s in stores)


def test_layouts_are_part_of_the_schedule_cache_key():
    model = torch.nn.Conv2d(8, 8, 3, 1, 1, bias=False)
    x = torch.randn(1, 8, 12, 12)
    clear_cache()
    plain = compiler.compile_graph(torch.export.export(model, (x,)), config("atom"))
    cl = compiler.compile_graph(
        torch.export.export(model.to(memory_format=CL), (x.to(memory_format=CL),)),
        config("atom"))
    assert plain.inputs[-1].perm is None and cl.inputs[-1].perm == (0, 2, 3, 1)
    assert plain.outputs[0].perm is None and cl.outputs[0].perm == (0, 2, 3, 1)


def test_the_eager_device_keeps_the_logical_order():
    x = torch.randn(1, 8, 6, 6).to(memory_format=CL)
    w = torch.randn(8, 8, 3, 3)
    compiled = compiler.compile_op(torch.ops.aten.convolution.default,
                                   (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
                                   {}, config("atom"))
    assert compiled.options.channels_last is False
    assert all(spec.perm is None for spec in compiled.inputs)
    (out,), _ = compiled.run(x, w)
    torch.testing.assert_close(out, torch.nn.functional.conv2d(x, w, padding=1),
                               rtol=1e-4, atol=1e-4)


def test_only_the_convolutions_at_the_boundary_fold_and_keep_their_source():
    # conv1 reads the channels-last input and feeds a ReLU (its result stays NCHW);
    # conv2 reads that ReLU (not a permute) and writes the channels-last output
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, 1, 1, bias=False),
                                torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 8, 3, 2, 1, bias=False)
                                ).to(memory_format=CL)
    x = torch.randn(2, 8, 12, 12).to(memory_format=CL)
    exported = torch.export.export(model, (x,))
    graph, _, _ = build(exported, CompileOptions())
    graph = DeadCodePass().apply(ChannelsLastConvPass().apply(graph))
    convs = [n for n in graph.nodes if isinstance(n.spec, Conv2d)]
    assert [(c.spec.channels_last_in, c.spec.channels_last_out) for c in convs] == \
        [(True, False), (False, True)]
    assert [c.source for c in convs] == ["0:conv2d", "2:conv2d_1"]
    compiled, out, _ = _run(exported, x, config("atom"))
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert out.is_contiguous(memory_format=CL)
    sources = {c.source for c in compiled.program.commands}
    assert {"0:conv2d", "2:conv2d_1"} <= sources


def test_a_permute_other_than_channels_first_is_not_folded():
    # x.permute(0, 1, 3, 2) (a transpose of H and W) into a convolution: the conv reads
    # the permute's result, computed by a permute kernel, never the input as NHWC
    class Swapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 4, 3, 1, 1, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x.permute(0, 1, 3, 2))

    torch.manual_seed(0)
    model = Swapped()
    x = torch.randn(1, 4, 6, 10)
    exported = torch.export.export(model, (x,))
    graph, _, _ = build(exported, CompileOptions())
    graph = DeadCodePass().apply(ChannelsLastConvPass().apply(graph))
    (conv,) = [n for n in graph.nodes if isinstance(n.spec, Conv2d)]
    assert not conv.spec.channels_last_in and not conv.spec.channels_last_out
    _, out, _ = _run(exported, x, config("atom"))
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
