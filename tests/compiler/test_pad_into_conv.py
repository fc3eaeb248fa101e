"""A zero pad that only convolutions read becomes their padding (PadIntoConvPass):
TensorFlow-style "same" padding, an explicit ``F.pad(x, (0, 1, 0, 1))`` before a stride-2
convolution, costs no copy of the image. Every mapping reads the asymmetric border by
addressing; the numbers are torch's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import compiler
import compiler.kernels.conv as conv_kernel
from compiler import CompileOptions
from compiler.compile import clear_cache
from compiler.frontend import build
from compiler.graph import Conv2d, Pad
from compiler.passes import DeadCodePass, PadIntoConvPass
from compiler_helpers import config

CL = torch.channels_last


class PadConv(torch.nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int, groups: int,
                 pad: tuple[int, int, int, int], conv_pad: int, value: float = 0.0) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, k, stride, conv_pad, groups=groups, bias=False)
        self.pad, self.value = pad, value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, self.pad, value=self.value))


def _compiled(model: torch.nn.Module, x: torch.Tensor, mapping: str = "auto"):
    clear_cache()
    exported = torch.export.export(model.eval(), (x,))
    with pytest.MonkeyPatch.context() as patch:
        if mapping in ("packed", "per_tap"):
            patch.setattr(conv_kernel, "choose_conv_tiling", lambda *a, **k: None)
        if mapping in ("implicit", "per_tap"):
            patch.setattr(conv_kernel, "choose_packed_tiling", lambda *a, **k: None)
        compiled = compiler.compile_graph(exported, config("atom"))
    (out,), _ = compiled.run(x)
    clear_cache()
    return compiled, out


CASES = [  # cin, cout, k, stride, groups, F.pad's (left, right, top, bottom), conv padding, hw
    (16, 24, 3, 2, 1, (0, 1, 0, 1), 0, 15),    # TF "same", stride 2, odd image
    (16, 24, 3, 2, 1, (0, 1, 0, 1), 0, 16),    # even image
    (8, 16, 5, 2, 1, (1, 2, 1, 2), 1, 13),     # on top of the convolution's own padding
    (8, 16, 3, 1, 1, (2, 0, 0, 1), 0, 9),      # lopsided: left only, bottom only
]


@pytest.mark.parametrize("mapping", ["implicit", "packed", "per_tap"])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_every_mapping_reads_the_folded_border_by_addressing(case, channels_last, mapping):
    torch.manual_seed(0)
    cin, cout, k, stride, groups, pad, conv_pad, hw = case
    model = PadConv(cin, cout, k, stride, groups, pad, conv_pad)
    x = torch.randn(2, cin, hw, hw)
    if channels_last:
        model, x = model.to(memory_format=CL), x.to(memory_format=CL)
    compiled, out = _compiled(model, x, mapping)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert len(compiled.kernels) == 1  # the convolution's: no pad kernel
    (choice,) = compiled.choices.values()
    assert choice.startswith({"implicit": "implicit GEMM", "packed": "taps packed into K",
                              "per_tap": "one tap at a time"}[mapping])


@pytest.mark.parametrize("channels_last", [False, True])
def test_a_depthwise_convolution_takes_the_fold_too(channels_last):
    # MobileNetV2's stride-2 depthwise 3x3 after transformers' TF-style pad
    torch.manual_seed(0)
    model = PadConv(32, 32, 3, 2, 32, (0, 1, 0, 1), 0)
    x = torch.randn(1, 32, 16, 16)
    if channels_last:
        model, x = model.to(memory_format=CL), x.to(memory_format=CL)
    compiled, out = _compiled(model, x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert len(compiled.kernels) == 1
    (choice,) = compiled.choices.values()
    assert choice.startswith("depthwise on the vector unit")


def _folded(model: torch.nn.Module, x: torch.Tensor):
    graph, _, _ = build(torch.export.export(model.eval(), (x,)), CompileOptions())
    return DeadCodePass().apply(PadIntoConvPass().apply(graph))


def test_the_pass_moves_each_side_of_the_pad_into_the_convolution():
    graph = _folded(PadConv(8, 16, 5, 2, 1, (1, 2, 3, 4), 1), torch.randn(1, 8, 13, 13))
    (conv,) = [n for n in graph.nodes if isinstance(n.spec, Conv2d)]
    # F.pad's (left, right, top, bottom) = (1, 2, 3, 4) on top of padding 1 each side
    assert conv.spec.padding == (1 + 3, 1 + 1) and conv.spec.pads_end == (1 + 4, 1 + 2)
    assert conv.inputs[0] is graph.inputs[-1]
    assert not any(isinstance(n.spec, Pad) for n in graph.nodes)


class PadTwice(torch.nn.Module):
    """The padded image is also read by something else: the pad must stay."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        padded = F.pad(x, (0, 1, 0, 1))
        return self.conv(padded), padded * 2


@pytest.mark.parametrize("model", [
    PadConv(4, 4, 3, 1, 1, (1, 1, 1, 1), 0, value=1.0),   # not zeros
    PadConv(4, 4, 3, 1, 1, (-1, 0, 0, 0), 1),             # a crop
    PadTwice(),
], ids=["value", "crop", "second-reader"])
def test_a_pad_that_is_not_only_a_convolutions_zero_border_stays(model):
    x = torch.randn(1, 4, 8, 8)
    graph = _folded(model, x)
    (conv,) = [n for n in graph.nodes if isinstance(n.spec, Conv2d)]
    assert conv.spec.padding_end is None and conv.inputs[0] is not graph.inputs[-1]
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(model.eval(), (x,)), config("atom"))
    outs, _ = compiled.run(x)
    expected = model(x)
    for got, want in zip(outs, expected if isinstance(expected, tuple) else (expected,)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode, value", [("constant", 0.5), ("reflect", None),
                                         ("replicate", None), ("circular", None)])
def test_f_pad_kept_whole_by_export_runs_on_the_device(mode, value):
    # torch.export without run_decompositions() keeps aten.pad; it ran on the host
    class Pad(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.pad(x, (1, 2, 2, 1), mode=mode, value=value)

    x = torch.randn(1, 3, 6, 7)
    clear_cache()
    compiled = compiler.compile_graph(torch.export.export(Pad(), (x,)), config("atom"))
    (out,), _ = compiled.run(x)
    assert compiled.fallbacks == ()
    torch.testing.assert_close(out, Pad()(x), rtol=0, atol=0)
