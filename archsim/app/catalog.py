"""The one catalog of models archsim can build by name.

Two kinds of names:

- **built-in models** (:data:`BUILTINS`): ``gpt2``, ``llama-7b``, ``resnet-50``... with
  sizes set by ``--batch``/``--seq``/``--layers`` (each built-in says which of them it
  takes; the others are refused);
- **sized workloads** (:data:`FAMILIES`): a family and its sizes in the name, e.g.
  ``gemm_2048x2048x2048`` or ``conv_1x56x56x64x64x3x1x1`` (the names of
  ``../shared/data``'s measurement files, PyTorchSim's validation set), float32
  inputs from ``torch.randn``, batch 1 unless named (built on ``meta``, shapes only,
  when too large for the host: ``archsim.app.pipeline.sized_workload``).

Every entry builds ``(module, example inputs)`` with plain ``torch.nn``
(:mod:`archsim.app.models`): random weights, shapes of the public models.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from archsim.errors import ArchsimError

SIZES = ("batch", "seq", "layers")
"""The sizes a built-in model may take from the command line."""


class WorkloadNameError(ArchsimError):
    """A name that is neither a built-in model nor a sized workload."""


@dataclass(frozen=True)
class Sizes:
    """The sizes a built-in model is built with (its defaults, or the flags given)."""

    batch: int = 1
    seq: int = 128
    layers: int = 0


Build = Callable[[Sizes, Any], tuple[Any, tuple[Any, ...]]]
"""(sizes, torch dtype) -> (module, example inputs); called under the target device."""


@dataclass(frozen=True)
class Builtin:
    summary: str
    build: Build
    defaults: Sizes
    takes: tuple[str, ...]
    """Which of :data:`SIZES` the model is built from; the others are refused."""
    model_layers: int = 0
    """Layers of the model the workload stands for (the report says N of them)."""
    op: str = ""
    """The aten op (``mm``) the workload is by itself: performance-only runs compile it
    as that one op (``compile_op``, the eager device's path) instead of through
    ``torch.export``, whose import of ``torch._dynamo`` takes over a second; the graph
    is the same single node."""
    performance_only: bool = False
    """Always shapes only (a 7B model's weights would not fit a host)."""
    int8_op: str = ""
    """The aten op the workload is in int8 (``_int_mm``), if it takes ``--dtype i8``."""
    positions: int = 0
    """Rows of the model's learned position table, the longest ``--seq`` it takes
    (0: none; a rotary model computes any position)."""

    @property
    def description(self) -> str:
        flags = ", ".join(f"--{size} ({getattr(self.defaults, size)}"
                          + (f", at most {self.positions}" if size == "seq" and self.positions
                             else "") + ")" for size in self.takes)
        return f"{self.summary}; {flags}" if flags else self.summary


# ---------------------------------------------------------------- built-in models


def _ids(sizes: Sizes, vocab: int) -> Any:
    import torch

    return torch.randint(0, vocab, (sizes.batch, sizes.seq))


def _gpt2(sizes: Sizes, dtype: Any) -> tuple[Any, tuple[Any, ...]]:
    from archsim.app.models import GPT2

    return GPT2(layers=sizes.layers).to(dtype), (_ids(sizes, 50257),)


def _bert(sizes: Sizes, dtype: Any) -> tuple[Any, tuple[Any, ...]]:
    from archsim.app.models import Bert

    return Bert(layers=sizes.layers).to(dtype), (_ids(sizes, 30522),)


def _llama(**shape: int) -> Build:
    def build(sizes: Sizes, dtype: Any) -> tuple[Any, tuple[Any, ...]]:
        from archsim.app.models import Llama

        model = Llama(layers=sizes.layers, **shape).to(dtype)
        return model, (_ids(sizes, model.embed.num_embeddings),)
    return build


def _resnet(blocks: tuple[int, ...], bottleneck: bool) -> Build:
    def build(sizes: Sizes, dtype: Any) -> tuple[Any, tuple[Any, ...]]:
        import torch

        from archsim.app.models import ResNet

        model = ResNet(blocks, bottleneck).to(dtype)
        return model, (torch.randn(sizes.batch, 3, 224, 224, dtype=dtype),)
    return build


def _gemm(sizes: Sizes, dtype: Any) -> tuple[Any, tuple[Any, ...]]:
    import torch

    from archsim.app.models import Gemm

    n = sizes.seq
    if dtype == torch.int8:  # int8 x int8 -> int32 (torch._int_mm)
        from archsim.app.models import IntGemm

        return IntGemm(), tuple(torch.randint(-128, 128, (n, n), dtype=torch.int8)
                                for _ in range(2))
    return Gemm(), (torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype))


def _conv(sizes: Sizes, dtype: Any) -> tuple[Any, tuple[Any, ...]]:
    import torch

    from archsim.app.models import Conv

    return Conv(64, 64, 3).to(dtype), (torch.randn(sizes.batch, 64, 56, 56, dtype=dtype),)


def _attention(sizes: Sizes, dtype: Any) -> tuple[Any, tuple[Any, ...]]:
    import torch

    from archsim.app.models import SDPA

    shape = (sizes.batch, 12, sizes.seq, 64)
    return SDPA(), tuple(torch.randn(shape, dtype=dtype) for _ in range(3))


_LANGUAGE = ("batch", "seq", "layers")
BUILTINS: dict[str, Builtin] = {
    "gpt2": Builtin("GPT-2 small (hidden 768, 12 heads)", _gpt2, Sizes(layers=12),
                    _LANGUAGE, model_layers=12, positions=1024),  # models.GPT2's wpe
    "bert-base": Builtin("BERT-base encoder (hidden 768, 12 heads)", _bert, Sizes(layers=12),
                         _LANGUAGE, model_layers=12, positions=512),
    "llama-7b": Builtin("Llama-2-7B (hidden 4096, SwiGLU 11008): token ids in, the last "
                        "token's logits out, as a prefill; 3 layers simulated, the others "
                        "extended; performance-only", _llama(), Sizes(seq=2048, layers=32),
                        _LANGUAGE, model_layers=32, performance_only=True),
    "llama-small": Builtin("small Llama-style decoder (hidden 512, GQA 8/2 heads, "
                           "vocabulary 1024)",
                           _llama(hidden=512, heads=8, kv_heads=2, intermediate=1376,
                                  vocab=1024), Sizes(layers=2), _LANGUAGE),
    "resnet-18": Builtin("ResNet-18 on 224x224 images", _resnet((2, 2, 2, 2), False),
                         Sizes(), ("batch",)),
    "resnet-50": Builtin("ResNet-50 on 224x224 images", _resnet((3, 4, 6, 3), True),
                         Sizes(), ("batch",)),
    "gemm": Builtin("square GEMM, --seq gives the size; --dtype i8: int8 x int8 -> int32",
                    _gemm, Sizes(seq=1024), ("seq",), op="mm", int8_op="_int_mm"),
    "conv": Builtin("3x3 conv, 64->64 channels on 56x56", _conv, Sizes(), ("batch",)),
    "attention": Builtin("causal scaled-dot-product attention, 12 heads x 64", _attention,
                         Sizes(), ("batch", "seq")),
}


# ---------------------------------------------------------------- sized workloads


@dataclass(frozen=True)
class Family:
    pattern: str
    """A regular expression over the whole name; its groups are the sizes."""
    example: str
    summary: str
    build: Callable[..., tuple[Any, tuple[Any, ...]]]
    may_be_zero: tuple[int, ...] = ()
    """Positions of the sizes that may be 0 (a convolution's padding); every other
    size is at least 1."""


def _sized_gemm(m: str, k: str, n: str) -> tuple[Any, tuple[Any, ...]]:
    import torch

    from archsim.app.models import Gemm

    return Gemm(), (torch.randn(int(m), int(k)), torch.randn(int(k), int(n)))


def _sized_conv(b: str, h: str, w: str, cin: str, cout: str, k: str, stride: str,
                pad: str) -> tuple[Any, tuple[Any, ...]]:
    import torch

    module = torch.nn.Conv2d(int(cin), int(cout), int(k), int(stride), int(pad), bias=False)
    image = torch.randn(int(b), int(cin), int(h), int(w))
    return (module.to(memory_format=torch.channels_last),
            (image.to(memory_format=torch.channels_last),))


def _layernorm(n: str, d: str) -> tuple[Any, tuple[Any, ...]]:
    import torch

    return torch.nn.LayerNorm(int(d)), (torch.randn(int(n), int(d)),)


def _softmax(n: str, m: str) -> tuple[Any, tuple[Any, ...]]:
    import torch

    return torch.nn.Softmax(dim=1), (torch.randn(int(n), int(m)),)


def _attention_core(heads: str, seq: str, dim: str) -> tuple[Any, tuple[Any, ...]]:
    import torch

    from archsim.app.models import AttentionCore

    shape = (int(heads), int(seq), int(dim))
    return AttentionCore(), tuple(torch.randn(shape) for _ in range(3))


def _bert_layer(size: str, seq: str | None) -> tuple[Any, tuple[Any, ...]]:
    import torch

    from archsim.app.models import BertEncoderLayer

    # xlarge: hidden 2048 and hidden / 64 heads, ALBERT's xlarge shape (arXiv:1909.11942),
    # as PyTorchSim's public TPU v3 rows name it
    hidden, heads = {"base": (768, 12), "large": (1024, 16), "xlarge": (2048, 32)}[size]
    return BertEncoderLayer(hidden, heads), (torch.randn(1, int(seq or 512), hidden),)


def _sized_resnet(depth: str, batch: str | None) -> tuple[Any, tuple[Any, ...]]:
    import torch

    from archsim.app.models import ResNet

    blocks = {"18": ((2, 2, 2, 2), False), "34": ((3, 4, 6, 3), False),
              "50": ((3, 4, 6, 3), True), "101": ((3, 4, 23, 3), True)}[depth]
    return ResNet(*blocks), (torch.randn(int(batch or 1), 3, 224, 224),)


_N = r"(\d+)"
FAMILIES: tuple[Family, ...] = (
    Family(rf"gemm_{_N}x{_N}x{_N}", "gemm_512x512x512", "gemm_MxKxN: A (M,K) @ B (K,N)",
           _sized_gemm),
    Family(r"conv_" + "x".join([_N] * 8), "conv_64x56x56x64x64x3x1x1",
           "conv_BxHxWxCINxCOUTxKxSTRIDExPAD: Conv2d without bias, channels_last",
           _sized_conv, may_be_zero=(7,)),
    Family(rf"layer_?norm_{_N}x{_N}", "layernorm_2048x768", "layernorm_NxD: LayerNorm(D)",
           _layernorm),
    Family(rf"softmax_{_N}x{_N}", "softmax_2048x2048", "softmax_NxM: softmax over dim 1",
           _softmax),
    Family(rf"attention_{_N}x{_N}x{_N}", "attention_16x512x64",
           "attention_HxSxD: softmax(q @ k^T / sqrt(D)) @ v as written, no mask",
           _attention_core),
    Family(r"bert[_-]?(base|large|xlarge)(?:_s(\d+))?", "bert_base",
           "bert_base, bert_large, bert_xlarge (_sSEQ): one BERT encoder layer, ReLU FFN, "
           "seq 512",
           _bert_layer),
    Family(r"resnet[_-]?(18|34|50|101)(?:_b(\d+))?", "resnet18",
           "resnet18/34/50/101 (_bB): the whole network on 224x224 images", _sized_resnet),
)
"""Sized workloads: the family, then its sizes joined by ``x`` (the names of
``../shared/data``'s measurement files)."""


def family_of(name: str) -> tuple[Family, tuple[str | None, ...]] | None:
    """The family a sized name belongs to and its sizes, or None."""
    key = name.strip().lower()
    for family in FAMILIES:
        match = re.fullmatch(family.pattern, key)
        if match:
            return family, match.groups()
    return None


def check_sizes(name: str) -> None:
    """Raise :class:`WorkloadNameError` when a sized workload name has a size of 0 where
    its family needs at least 1 (``gemm_0x64x64``); names of no family pass."""
    found = family_of(name)
    if found is None:
        return
    family, sizes = found
    zero = [i for i, size in enumerate(sizes)
            if size is not None and size.isdigit() and int(size) == 0
            and i not in family.may_be_zero]
    if zero:
        form = family.summary.split(":")[0]  # gemm_MxKxN
        letters = re.fullmatch(r"[a-z_]+_([A-Z]+(?:x[A-Z]+)+)", form)
        what = letters.group(1).split("x")[zero[0]] if letters else f"size {zero[0] + 1}"
        raise WorkloadNameError(f"{name}: {what} is 0 in {form}; sizes are at least 1"
                                + (" (the padding may be 0)" if family.may_be_zero else ""))


def build_workload(name: str, *, meta: bool = False) -> tuple[Any, tuple[Any, ...]]:
    """``(module, example_inputs)`` for a sized workload name (float32, random values);
    ``meta``: shapes only, on the ``meta`` device (nothing allocated: the size check
    before any run, a run too large for the host)."""
    import torch

    found = family_of(name)
    if found is None:
        raise WorkloadNameError(f"unknown workload {name!r}: expected one of the forms "
                                f"{examples()} (sizes joined by 'x'; see archsim.app.catalog)")
    family, sizes = found
    check_sizes(name)
    torch.manual_seed(0)
    with torch.device("meta") if meta else contextlib.nullcontext():
        module, inputs = family.build(*sizes)
    return module.eval(), inputs


@functools.cache
def examples() -> str:
    return ", ".join(f.example for f in FAMILIES)


__all__ = ["BUILTINS", "FAMILIES", "SIZES", "Builtin", "Family", "Sizes",
           "WorkloadNameError", "build_workload", "check_sizes", "family_of"]
