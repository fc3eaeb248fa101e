"""compiler.layout's graph pass on its own: which permutes reach a convolution and fold,
and which stay (each case also runs against torch)."""

from __future__ import annotations

import pytest
import torch

import compiler
from compiler import CompileOptions
from compiler.compile import clear_cache
from compiler.frontend import build
from compiler.graph import Conv2d, Permute, View
from compiler.layout import ChannelsLastConvPass, channels_last, per_channel_shape
from compiler.passes import DeadCodePass
from compiler_helpers import config

CL = torch.channels_last


def _passed(model: torch.nn.Module, *inputs: torch.Tensor):
    exported = torch.export.export(model, inputs)
    graph, _, _ = build(exported, CompileOptions())
    graph = DeadCodePass().apply(ChannelsLastConvPass().apply(graph))
    clear_cache()
    compiled = compiler.compile_graph(exported, config("atom"))
    outs, _ = compiled.run(*inputs)
    wants = model(*inputs)
    for got, want in zip(outs, wants if isinstance(wants, tuple) else (wants,)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    return graph


def _kinds(graph) -> list[str]:
    return [type(n.spec).__name__ for n in graph.nodes]


class Twice(torch.nn.Module):
    """A convolution whose result is returned twice: as it is and rectified."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 6, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.conv(x)
        return y, torch.relu(y)


def test_a_result_read_twice_keeps_its_permutes():
    # the bias add's result is a graph output and read by the ReLU: the outgoing
    # permutes cannot move above it, and the convolution writes NCHW
    torch.manual_seed(0)
    model = Twice().to(memory_format=CL)
    graph = _passed(model, torch.randn(1, 4, 6, 6).to(memory_format=CL))
    (conv,) = [n for n in graph.nodes if isinstance(n.spec, Conv2d)]
    assert conv.spec.channels_last_in and not conv.spec.channels_last_out
    assert _kinds(graph).count("Permute") == 2


class Summed(torch.nn.Module):
    """A permute of a sum of two convolutions: the add has two images."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(4, 6, 3, 1, 1, bias=False)
        self.b = torch.nn.Conv2d(4, 6, 1, 1, 0, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) + self.b(x)


def test_an_op_of_two_images_stops_the_permute():
    torch.manual_seed(0)
    graph = _passed(Summed().to(memory_format=CL),
                    torch.randn(1, 4, 6, 6).to(memory_format=CL))
    convs = [n for n in graph.nodes if isinstance(n.spec, Conv2d)]
    assert [c.spec.channels_last_out for c in convs] == [False, False]
    assert all(c.spec.channels_last_in for c in convs)
    (permute,) = [n for n in graph.nodes if isinstance(n.spec, Permute)]
    assert permute.out is graph.outputs[0]


class NotAConv(torch.nn.Module):
    """A channels-last result computed by no convolution: a sigmoid of the input."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 1, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.sigmoid(x) * 2.0, self.conv(x)


def test_a_permute_with_no_convolution_above_stays_where_it_is():
    torch.manual_seed(0)
    graph = _passed(NotAConv().to(memory_format=CL),
                    torch.randn(1, 4, 5, 5).to(memory_format=CL))
    first = graph.outputs[0].producer
    assert isinstance(first.spec, Permute)  # the sigmoid's chain computes NCHW
    (conv,) = [n for n in graph.nodes if isinstance(n.spec, Conv2d)]
    assert conv.spec.channels_last_in and conv.spec.channels_last_out
    assert conv.out is graph.outputs[1]


class Chain(torch.nn.Module):
    """conv -> + bias -> * 2 -> relu, channels last: the whole chain moves."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x) * 2.0)


def test_the_permute_climbs_a_chain_and_names_what_it_adds():
    torch.manual_seed(0)
    graph = _passed(Chain().to(memory_format=CL),
                    torch.randn(2, 4, 9, 9).to(memory_format=CL))
    assert "Permute" not in _kinds(graph)
    conv = next(n for n in graph.nodes if isinstance(n.spec, Conv2d))
    assert conv.spec.channels_last_out and conv.out.shape == (2, 5, 5, 8)
    assert conv.out.name.endswith(".nhwc")
    (bias_view,) = [n for n in graph.nodes if isinstance(n.spec, View)
                    and n.out.shape == (1, 1, 1, 8)]
    assert bias_view.out.name.endswith(".nhwc") and bias_view.source == conv.source
    # the ops keep their own sources
    assert [n.source for n in graph.nodes[-2:]] == ["mul", "relu"]


class SideRead(torch.nn.Module):
    """The conv's result read by the chain and by a second output."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, 1, 1, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.conv(x)
        return torch.relu(y), y.sum(dim=(2, 3))


def test_a_convolution_read_elsewhere_writes_nchw():
    torch.manual_seed(0)
    graph = _passed(SideRead().to(memory_format=CL),
                    torch.randn(1, 4, 6, 6).to(memory_format=CL))
    (conv,) = [n for n in graph.nodes if isinstance(n.spec, Conv2d)]
    assert not conv.spec.channels_last_out
    assert isinstance(graph.outputs[0].producer.spec, Permute)


@pytest.mark.parametrize("shape,channels,nhwc", [
    ((8, 1, 1), 8, (1, 1, 1, 8)),       # a bias or batch norm parameter viewed [C, 1, 1]
    ((1, 8, 1, 1), 8, (1, 1, 1, 8)),
    ((1, 1, 1), 8, (1, 1, 1, 1)),       # broadcast along nothing
    ((), 8, (1, 1, 1, 1)),
    ((1, 1, 1, 1), 8, (1, 1, 1, 1)),
    ((4, 1, 1), 8, None),               # another channel count
    ((2, 1, 1), 8, None),
    ((8, 1, 2), 8, None),               # varies along the width
    ((2, 8, 1, 1), 8, None),            # along the batch
    ((1, 1, 8, 1, 1), 8, None),         # five dims
    ((8,), 8, None),                    # NCHW broadcasting puts it on the width
])
def test_per_channel_operands(shape, channels, nhwc):
    assert per_channel_shape(shape, channels) == nhwc


class Stacked(torch.nn.Module):
    """conv -> conv of the same shape: the outgoing permute must not move above the
    second convolution (it is no elementwise op), which writes NHWC itself."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(6, 6, 3, 1, 1, bias=False)
        self.b = torch.nn.Conv2d(6, 6, 3, 1, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def test_the_permute_stops_at_the_last_convolution():
    torch.manual_seed(0)
    graph = _passed(Stacked().to(memory_format=CL),
                    torch.randn(1, 6, 7, 7).to(memory_format=CL))
    a, b = [n for n in graph.nodes if isinstance(n.spec, Conv2d)]
    assert (a.spec.channels_last_in, a.spec.channels_last_out) == (True, False)
    assert (b.spec.channels_last_in, b.spec.channels_last_out) == (False, True)


class SummedRelu(Summed):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(super().forward(x))


def test_a_chain_through_an_op_of_two_images_does_not_move():
    torch.manual_seed(0)
    graph = _passed(SummedRelu().to(memory_format=CL),
                    torch.randn(1, 4, 6, 6).to(memory_format=CL))
    assert isinstance(graph.outputs[0].producer.spec, Permute)
    assert graph.outputs[0].producer.inputs[0].producer.source == "relu"


class Four(torch.nn.Module):
    """Four channels-last outputs; only the last one's permute can reach a convolution:
    the input returned in another memory format (a permute of a graph input), a
    sigmoid of the input (no convolution above), a convolution plus a tensor varying
    along the width (not per channel), and a biased convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.c = torch.nn.Conv2d(4, 4, 1, bias=False)
        self.d = torch.nn.Conv2d(4, 4, 3, 1, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor, t: torch.Tensor):
        return (x.contiguous(memory_format=CL), torch.sigmoid(y) * 2.0,
                self.c(y) + t, self.d(y))


def test_permutes_that_cannot_move_do_not_stop_the_others():
    torch.manual_seed(0)
    model = Four().to(memory_format=CL)
    x = torch.randn(1, 4, 5, 5)  # contiguous, returned channels-last
    y = torch.randn(1, 4, 5, 5).to(memory_format=CL)
    t = torch.randn(1, 1, 1, 5)
    graph = _passed(model, x, y, t)
    outgoing = [n for n in graph.nodes if isinstance(n.spec, Permute)
                and n.spec.perm == (0, 2, 3, 1)]
    assert [p.out for p in outgoing] == graph.outputs[:3]  # three stay, in order
    c, d = [n for n in graph.nodes if isinstance(n.spec, Conv2d)]
    assert not c.spec.channels_last_out and d.spec.channels_last_out
    assert d.out is not graph.outputs[3] and d.out.shape == (1, 5, 5, 4)


def test_what_counts_as_a_channels_last_image():
    assert channels_last(torch.empty(1, 8, 4, 4).to(memory_format=CL))
    assert not channels_last(torch.empty(1, 8, 4, 4))  # NCHW
    # one channel or a 1x1 image: both orders are the same bytes, nothing to permute
    assert not channels_last(torch.empty(1, 1, 4, 4).to(memory_format=CL))
    assert not channels_last(torch.empty(2, 8, 1, 1).to(memory_format=CL))
    assert not channels_last(torch.empty(2, 3, 4))  # not an image
    assert not channels_last(torch.empty(2, 3, 4, 5).transpose(2, 3))  # strided otherwise
    assert not channels_last(None)
