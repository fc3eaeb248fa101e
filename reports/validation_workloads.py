"""The workloads a validation file names, built as PyTorch modules from their names.

Names follow ``../shared/data/README.md`` (PyTorchSim's validation set): the family,
then its sizes joined by ``x``. Every input is float32 from ``torch.randn``, batch 1
unless named. Each family is one row of :data:`FAMILIES`: a pattern and a builder.

==============================================  =========================================
``gemm_MxKxN``                                  ``A (M,K) @ B (K,N)``
``conv_BxHxWxCINxCOUTxKxSTRIDExPAD``            ``Conv2d`` without bias, channels_last
``layernorm_NxD``                               ``LayerNorm(D)`` on ``(N, D)``
``softmax_NxM``                                 ``Softmax(dim=1)`` on ``(N, M)``
``attention_HxSxD``                             ``softmax(q @ kᵀ / √D) @ v``, each (H, S, D)
``bert_base``, ``bert_large`` (``_sSEQ``)         one BERT encoder layer (ReLU FFN), seq 512
``resnet18``, ``resnet50`` (``_bB``)              the whole network on 224×224 images
==============================================  =========================================
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from archsim.errors import ArchsimError


class WorkloadNameError(ArchsimError):
    """A validation row names a workload archsim cannot build."""


@dataclass(frozen=True)
class Family:
    pattern: str
    """A regular expression over the whole name; its groups are the sizes."""
    example: str
    build: Callable[..., tuple[Any, tuple[Any, ...]]]


def _gemm(m: str, k: str, n: str):
    import torch

    from archsim.app.models import Gemm

    return Gemm(), (torch.randn(int(m), int(k)), torch.randn(int(k), int(n)))


def _conv(b, h, w, cin, cout, k, stride, pad):
    import torch

    module = torch.nn.Conv2d(int(cin), int(cout), int(k), int(stride), int(pad), bias=False)
    image = torch.randn(int(b), int(cin), int(h), int(w))
    return (module.to(memory_format=torch.channels_last),
            (image.to(memory_format=torch.channels_last),))


def _layernorm(n, d):
    import torch

    return torch.nn.LayerNorm(int(d)), (torch.randn(int(n), int(d)),)


def _softmax(n, m):
    import torch

    return torch.nn.Softmax(dim=1), (torch.randn(int(n), int(m)),)


def _attention(heads, seq, dim):
    import torch

    shape = (int(heads), int(seq), int(dim))
    attention_core, _ = _module_classes()
    return attention_core(), tuple(torch.randn(shape) for _ in range(3))


def _bert(size: str, seq: str | None):
    import torch

    hidden, heads = {"base": (768, 12), "large": (1024, 16)}[size]
    _, bert_layer = _module_classes()
    return bert_layer(hidden, heads), (torch.randn(1, int(seq or 512), hidden),)


def _resnet(depth: str, batch: str | None):
    import torch

    from archsim.app.models import ResNet

    blocks = {"18": ((2, 2, 2, 2), False), "34": ((3, 4, 6, 3), False),
              "50": ((3, 4, 6, 3), True), "101": ((3, 4, 23, 3), True)}[depth]
    return ResNet(*blocks), (torch.randn(int(batch or 1), 3, 224, 224),)


_N = r"(\d+)"
FAMILIES: tuple[Family, ...] = (
    Family(rf"gemm_{_N}x{_N}x{_N}", "gemm_512x512x512", _gemm),
    Family(r"conv_" + "x".join([_N] * 8), "conv_64x56x56x64x64x3x1x1", _conv),
    Family(rf"layer_?norm_{_N}x{_N}", "layernorm_2048x768", _layernorm),
    Family(rf"softmax_{_N}x{_N}", "softmax_2048x2048", _softmax),
    Family(rf"attention_{_N}x{_N}x{_N}", "attention_16x512x64", _attention),
    Family(r"bert[_-]?(base|large)(?:_s(\d+))?", "bert_base", _bert),
    Family(r"resnet[_-]?(18|34|50|101)(?:_b(\d+))?", "resnet18", _resnet),
)


def build_workload(name: str) -> tuple[Any, tuple[Any, ...]]:
    """``(module, example_inputs)`` for a workload name (float32, random values)."""
    import torch

    key = name.strip().lower()
    for family in FAMILIES:
        match = re.fullmatch(family.pattern, key)
        if match:
            torch.manual_seed(0)
            module, inputs = family.build(*match.groups())
            return module.eval(), inputs
    examples = ", ".join(f.example for f in FAMILIES)
    raise WorkloadNameError(f"unknown workload {name!r}: expected one of the forms {examples} "
                            f"(sizes joined by 'x'; see reports.validation_workloads)")


@functools.cache
def _module_classes() -> tuple[type, type]:
    """The two torch modules validation needs, defined on first use (no torch at import)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class AttentionCore(nn.Module):
        """The attention core as BERT-era code writes it: no SDPA call, no mask."""

        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
            return torch.softmax(scores, dim=-1) @ v

    class BertEncoderLayer(nn.Module):
        """One BERT encoder layer (``BertLayer`` with ``hidden_act="relu"``, no dropout)."""

        def __init__(self, hidden: int, heads: int) -> None:
            super().__init__()
            from archsim.app.models import Attention

            self.attention = Attention(hidden, heads, causal=False)
            self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
            self.intermediate = nn.Linear(hidden, 4 * hidden)
            self.output = nn.Linear(4 * hidden, hidden)
            self.output_norm = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.attention_norm(x + self.attention(x))
            return self.output_norm(x + self.output(F.relu(self.intermediate(x))))

    return AttentionCore, BertEncoderLayer


__all__ = ["FAMILIES", "Family", "WorkloadNameError", "build_workload"]
