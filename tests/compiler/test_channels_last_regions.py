"""compiler.layout_regions: activations kept NHWC between convolutions. Which regions
are stored NHWC (the graph after the pass) and that every case computes torch's
numbers, in any memory format of the input."""

from __future__ import annotations

import pytest
import torch

import compiler
from compiler import CompileOptions
from compiler.compile import clear_cache
from compiler.frontend import build
from compiler.graph import Conv2d, Reduce, View
from compiler.layout_regions import ChannelsLastActivationsPass
from compiler.passes import DeadCodePass
from compiler_helpers import config


def _bn(c: int) -> torch.nn.BatchNorm2d:
    norm = torch.nn.BatchNorm2d(c)
    norm.running_mean.uniform_(-1, 1)
    norm.running_var.uniform_(0.5, 2)
    norm.weight.data.uniform_(0.5, 2)
    norm.bias.data.uniform_(-1, 1)
    return norm


class Block(torch.nn.Module):
    """A ResNet basic block; ``down``: its identity is a strided 1x1 convolution."""

    def __init__(self, cin: int, cout: int, down: bool) -> None:
        super().__init__()
        stride = 2 if down else 1
        self.c1, self.b1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False), _bn(cout)
        self.c2, self.b2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False), _bn(cout)
        self.down = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 1, stride, bias=False),
                                        _bn(cout)) if down else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        identity = self.down(x) if self.down is not None else x
        return torch.relu(self.b2(self.c2(y)) + identity)


def _convs(model: torch.nn.Module, x: torch.Tensor):
    """The graph after the pass (its convolutions' layout flags) and the compiled run,
    checked against torch."""
    exported = torch.export.export(model, (x,))
    graph, _, _ = build(exported, CompileOptions())
    graph = DeadCodePass().apply(ChannelsLastActivationsPass().apply(
        DeadCodePass().apply(graph)))
    clear_cache()
    compiled = compiler.compile_graph(exported, config("atom"))
    outs, result = compiled.run(x)
    wants = model(x)
    for out, want in zip(outs, wants if isinstance(wants, tuple) else (wants,)):
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
    flags = [(n.source.split(":")[0], n.spec.channels_last_in, n.spec.channels_last_out)
             for n in graph.nodes if isinstance(n.spec, Conv2d)]
    return graph, flags, compiled, result


def test_inside_a_block_the_first_convolution_hands_nhwc_to_the_second():
    # the block's input comes from outside (NCHW) and its sum with it is returned:
    # only c1 -> batch norm -> ReLU -> c2 is a region
    torch.manual_seed(0)
    graph, flags, _, _ = _convs(Block(8, 8, False).eval(), torch.randn(2, 8, 10, 10))
    assert flags == [("c1", False, True), ("c2", True, False)]
    relu = next(n for n in graph.nodes if n.source.startswith("relu") and
                n.out.shape == (2, 10, 10, 8))
    assert relu.out.name.endswith(".nhwc")


class Net(torch.nn.Module):
    """stem conv -> downsampling block -> block -> global average pool -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.bn = torch.nn.Conv2d(3, 8, 3, 1, 1, bias=False), _bn(8)
        self.a, self.b = Block(8, 16, True), Block(16, 16, False)
        self.fc = torch.nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b(self.a(torch.relu(self.bn(self.stem(x)))))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_a_network_keeps_nhwc_from_its_stem_to_its_pool(memory_format):
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(2, 3, 12, 12).to(memory_format=memory_format)
    graph, flags, compiled, result = _convs(model, x)
    first_in = memory_format == torch.channels_last  # the input itself, as torch holds it
    assert flags == [("stem", False, True), ("a.c1", True, True), ("a.down.0", True, True),
                     ("a.c2", True, True), ("b.c1", True, True), ("b.c2", True, True)]
    # the pool reduces the NHWC axes and is viewed back for the linear layer
    (mean,) = [n for n in graph.nodes if isinstance(n.spec, Reduce)
               and n.out.shape == (2, 1, 1, 16)]
    assert mean.spec.axes == (1, 2)
    assert any(isinstance(n.spec, View) and n.inputs[0] is mean.out for n in graph.nodes)
    # the stem reads the user's input in its own order
    stem = [c for c in compiled.choices.items() if c[0].startswith("stem")][0][1]
    assert stem.endswith("; NHWC in and out" if first_in else "; NHWC out")
    clear_cache()
    nchw = compiler.compile_graph(torch.export.export(model, (x,)), config("atom"),
                                  CompileOptions(channels_last=False))
    (plain,), plain_result = nchw.run(x)
    torch.testing.assert_close(plain, model(x), rtol=1e-4, atol=1e-4)
    assert result.total_cycles < plain_result.total_cycles


class Returned(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(4, 4, 3, 1, 1)
        self.c2 = torch.nn.Conv2d(4, 4, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.c1(x))
        return self.c2(y), y


class Pooled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(4, 4, 3, 1, 1)
        self.c2 = torch.nn.Conv2d(4, 4, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.c1(x))
        return self.c2(y) + torch.nn.functional.max_pool2d(y, 3, 1, 1)


class Excited(torch.nn.Module):
    """A squeeze-and-excitation scale: the mean feeds a 1x1 convolution, which needs
    it stored, not viewed."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(4, 8, 3, 1, 1)
        self.se = torch.nn.Conv2d(8, 8, 1)
        self.c2 = torch.nn.Conv2d(8, 4, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.c1(x))
        scale = torch.sigmoid(self.se(y.mean(dim=(2, 3), keepdim=True)))
        return self.c2(y * scale)


@pytest.mark.parametrize("model", [Returned, Pooled, Excited])
def test_a_region_read_any_other_way_stays_nchw(model):
    # returned, read by a pooling window, or reduced for a convolution: c1's region
    # (its result, the ReLU) keeps NCHW
    torch.manual_seed(0)
    x = torch.randn(1, 4, 9, 9)
    graph, flags, _, _ = _convs(model().eval(), x)
    c1 = next(f for f in flags if f[0] == "c1")
    assert c1 == ("c1", False, False)


class Scaled(torch.nn.Module):
    """An elementwise op on the input before the first convolution (not a region
    value), and a scalar operand inside the region."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(4, 8, 3, 1, 1)
        self.c2 = torch.nn.Conv2d(8, 4, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c2(torch.relu(self.c1(torch.relu(x) * 2.0)) * 0.5 - 1.0)


def test_scalars_and_the_input_s_own_ops_stay_as_they_are():
    torch.manual_seed(0)
    graph, flags, _, _ = _convs(Scaled().eval(), torch.randn(1, 4, 9, 9))
    assert flags == [("c1", False, True), ("c2", True, False)]
    scaled = [n for n in graph.nodes if n.out.name.endswith(".nhwc") and
              any(isinstance(x, float) for x in n.inputs)]
    assert sorted(x for n in scaled for x in n.inputs if isinstance(x, float)) == [0.5, 1.0]


class Rotated(torch.nn.Module):
    """Between the convolutions, an op of the same shape that is not elementwise: the
    halves of the width swapped (the rotary pattern, one kernel of its own)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(4, 4, 3, 1, 1)
        self.c2 = torch.nn.Conv2d(4, 4, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c1(x)
        h = y.shape[-1] // 2
        return self.c2(torch.cat((-y[..., h:], y[..., :h]), dim=-1))


def test_an_op_that_moves_elements_keeps_its_operand_nchw():
    torch.manual_seed(0)
    graph, flags, _, _ = _convs(Rotated().eval(), torch.randn(1, 4, 8, 8))
    assert flags == [("c1", False, False), ("c2", False, False)]
    assert any(type(n.spec).__name__ == "RotateHalf" for n in graph.nodes)
