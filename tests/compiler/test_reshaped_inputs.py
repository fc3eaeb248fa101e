"""Kernels that address their input by its own dims (a convolution's windows, a strided
slice) get a stored tensor when the graph hands them a reshape of another value (Swin's
patch merging, SegFormer's and MobileViT's reshaped feature maps, Funnel's ceil-mode
pooling of ``x[:, None]``): the reshape is copied first, and no graph pass moves a
reshape below the op that computes their input (Wav2Vec2's group-normed features and
weight-normed convolution weights). Also writes into slices (BART's shifted decoder ids) and 0-dim constants.
Each compiles with no host node and matches torch on CPU."""

from __future__ import annotations

import torch
from torch import nn

import compiler
from archsim.config import load_config


def _run(module: nn.Module, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    compiled = compiler.compile_graph(compiler.export_model(module.eval(), inputs),
                                      load_config("tiny"))
    assert compiled.fallbacks == ()
    outputs, _ = compiled.run(*inputs)
    return outputs


class ConvOfReshape(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 3, padding=1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # [B, H*W, C] -> conv
        b, n, c = tokens.shape
        x = (tokens * 2).transpose(1, 2).reshape(b, c, 4, n // 4)
        return self.conv(x.reshape(b, c, 4, n // 4))


class PoolOfReshape(nn.Module):
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # tokens back to a map, pooled
        return nn.functional.max_pool2d((tokens * 2).transpose(1, 2).reshape(2, 4, 4, 5), 2)


class StridedSliceOfReshape(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # Swin's patch merging
        y = (x + 1).view(1, 6, 6, 4)
        return torch.cat([y[:, 0::2, 0::2, :], y[:, 1::2, 1::2, :]], -1)


class ShiftRight(nn.Module):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # BART's shift_tokens_right
        shifted = ids.new_zeros(ids.shape)
        shifted[:, 1:] = ids[:, :-1].clone()
        shifted[:, 0] = 7
        return shifted * 3


def test_a_convolution_of_a_reshaped_value() -> None:
    torch.manual_seed(0)
    module, tokens = ConvOfReshape(), torch.randn(2, 20, 4)
    (out,) = _run(module, tokens)
    torch.testing.assert_close(out, module(tokens), rtol=1e-4, atol=1e-4)


def test_a_pooling_window_over_a_reshaped_value() -> None:
    tokens = torch.randn(2, 20, 4)
    (out,) = _run(PoolOfReshape(), tokens)
    assert torch.equal(out, PoolOfReshape()(tokens))


def test_a_strided_slice_of_a_reshaped_value() -> None:
    x = torch.randn(36, 4)
    (out,) = _run(StridedSliceOfReshape(), x)
    assert torch.equal(out, StridedSliceOfReshape()(x))


def test_slice_writes_and_copies_of_a_constant() -> None:
    ids = torch.randint(0, 50, (2, 9))
    (out,) = _run(ShiftRight(), ids)
    assert torch.equal(out, ShiftRight()(ids))


class PoolTokens(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # Swin's pooler on one image
        return torch.flatten(nn.functional.adaptive_avg_pool1d(x.transpose(1, 2), 1), 1)


def test_as_strided_that_only_adds_size_one_dims_is_a_view() -> None:
    x = torch.randn(1, 16, 32)
    (out,) = _run(PoolTokens(), x)
    torch.testing.assert_close(out, PoolTokens()(x), rtol=1e-5, atol=1e-6)


def test_other_as_strided_falls_back_visibly() -> None:
    class Strided(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.as_strided(x * 3, (2, 16), (1, 2))

    x = torch.randn(2, 16)
    compiled = compiler.compile_graph(compiler.export_model(Strided(), (x,)),
                                      load_config("tiny"))
    assert [f.split(": ")[1] for f in compiled.fallbacks] == ["aten.as_strided.default"]
    (out,) = compiled.run(x)[0]
    assert torch.equal(out, Strided()(x))


class CeilPoolOfReshape(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # Funnel's pooling of its tokens
        return nn.functional.avg_pool2d((x * 2)[:, None], (2, 1), stride=(2, 1),
                                        ceil_mode=True)[:, 0]


def test_a_ceil_mode_pooling_window_over_a_reshaped_value() -> None:
    x = torch.randn(1, 7, 8)
    (out,) = _run(CeilPoolOfReshape(), x)
    torch.testing.assert_close(out, CeilPoolOfReshape()(x), rtol=1e-5, atol=1e-6)


class ConvAfterGroupNorm(nn.Module):  # Wav2Vec2's feature extractor, its positional conv
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv1d(1, 8, 5, stride=2)
        self.norm = nn.GroupNorm(8, 8)
        self.second = nn.Conv1d(8, 8, 3)
        self.grouped = nn.utils.parametrizations.weight_norm(
            nn.Conv1d(8, 8, 3, padding=1, groups=2), dim=2)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        x = nn.functional.gelu(self.norm(self.first(wave[:, None])))
        return self.grouped(self.second(x))


def test_convolutions_whose_input_and_weights_are_computed_through_reshapes() -> None:
    torch.manual_seed(0)
    module, wave = ConvAfterGroupNorm().eval(), torch.randn(1, 41)
    (out,) = _run(module, wave)
    torch.testing.assert_close(out, module(wave), rtol=1e-4, atol=1e-5)
