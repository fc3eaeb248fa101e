"""A decoder-only language model's shapes, read from a transformers ``config.json``.

MODEL is a bundled name (``serving/models/*.json``), a path to a ``config.json`` or a
model directory holding one. Only shapes are read; there are no weights. No torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from archsim.errors import ModelConfigError

_PACKAGE = "serving.models"

# config.json keys per family: (hidden, layers, heads, intermediate, positions)
_LLAMA_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads",
               "intermediate_size", "max_position_embeddings")
_GPT2_KEYS = ("n_embd", "n_layer", "n_head", "n_inner", "n_positions")
_FAMILIES: dict[str, str] = {"llama": "llama", "mistral": "llama", "qwen2": "llama",
                             "gpt2": "gpt2"}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str
    """``llama`` (RMSNorm, rotary, SwiGLU; llama/mistral/qwen2) or ``gpt2`` (LayerNorm,
    learned positions, GELU, biases everywhere)."""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_positions: int
    qkv_bias: bool
    tied_embeddings: bool
    sliding_window: int | None = None
    """Tokens of context attention sees (Mistral); None: all."""

    @property
    def gated_mlp(self) -> bool:
        return self.family == "llama"

    @property
    def dense_bias(self) -> bool:
        """Every projection has a bias (GPT-2)."""
        return self.family == "gpt2"

    # -- parameter counts (elements) -------------------------------------------------
    @property
    def attention_weights(self) -> int:
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return self.hidden * (2 * q + 2 * kv)

    @property
    def mlp_weights(self) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * self.intermediate

    @property
    def layer_matmul_weights(self) -> int:
        """Weights of one layer's matmuls: 2 FLOPs each per token."""
        return self.attention_weights + self.mlp_weights

    @property
    def layer_parameters(self) -> int:
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        norms = (4 if self.family == "gpt2" else 2) * self.hidden
        biases = 0
        if self.qkv_bias:
            biases += q + 2 * kv
        if self.dense_bias:
            biases += self.hidden + self.intermediate + self.hidden
        return self.layer_matmul_weights + norms + biases

    @property
    def head_parameters(self) -> int:
        """The final norm and the LM head (none when tied to the embedding)."""
        norm = (2 if self.family == "gpt2" else 1) * self.hidden
        return norm + (0 if self.tied_embeddings else self.vocab * self.hidden)

    @property
    def embedding_parameters(self) -> int:
        positions = self.max_positions * self.hidden if self.family == "gpt2" else 0
        return self.vocab * self.hidden + positions

    @property
    def parameters(self) -> int:
        return (self.layers * self.layer_parameters + self.head_parameters
                + self.embedding_parameters)

    def kv_elements_per_token(self) -> int:
        """K and V of one token in one layer."""
        return 2 * self.kv_heads * self.head_dim

    def attended(self, context: int) -> int:
        """Tokens a query at position ``context - 1`` attends to."""
        return min(context, self.sliding_window) if self.sliding_window else context


def bundled_models() -> tuple[str, ...]:
    return tuple(sorted(p.name.removesuffix(".json")
                        for p in resources.files(_PACKAGE).iterdir()
                        if p.name.endswith(".json")))


def load_model(name_or_path: str | Path) -> ModelSpec:
    """A bundled model by name, a ``config.json`` path, or a directory holding one."""
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        text, name = path.read_text(), (path.parent.name if path.name == "config.json"
                                        else path.stem)
    elif str(name_or_path) in bundled_models():
        name = str(name_or_path)
        text = resources.files(_PACKAGE).joinpath(f"{name}.json").read_text()
    else:
        raise ModelConfigError(f"unknown model {str(name_or_path)!r}: not a bundled model "
                               f"({', '.join(bundled_models())}), a config.json or a "
                               f"directory holding one")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"{path}: not valid JSON: {exc}") from None
    return spec_from_config(data, name)


def spec_from_config(data: dict[str, Any], name: str) -> ModelSpec:
    """A :class:`ModelSpec` from a transformers config dict."""
    model_type = data.get("model_type")
    family = _FAMILIES.get(str(model_type))
    if family is None:
        raise ModelConfigError(f"{name}: model_type {model_type!r} is not supported; "
                               f"supported: {', '.join(sorted(_FAMILIES))}")
    keys = _LLAMA_KEYS if family == "llama" else _GPT2_KEYS
    missing = [k for k in keys[:3] + ("vocab_size",) if not data.get(k)]
    if missing:
        raise ModelConfigError(f"{name}: config has no {', '.join(missing)}")
    hidden, layers, heads = (int(data[k]) for k in keys[:3])
    intermediate = int(data.get(keys[3]) or 4 * hidden)
    kv_heads = int(data.get("num_key_value_heads") or heads)
    head_dim = int(data.get("head_dim") or hidden // heads)
    if heads % kv_heads:
        raise ModelConfigError(f"{name}: {heads} attention heads are not a multiple of "
                               f"{kv_heads} key/value heads")
    window = data.get("sliding_window")
    if family == "llama" and data.get("use_sliding_window") is False:
        window = None
    return ModelSpec(
        name=name, family=family, hidden=hidden, layers=layers, heads=heads,
        kv_heads=kv_heads, head_dim=head_dim, intermediate=intermediate,
        vocab=int(data["vocab_size"]), max_positions=int(data.get(keys[4]) or 2048),
        qkv_bias=family == "gpt2" or model_type == "qwen2",
        tied_embeddings=bool(data.get("tie_word_embeddings", family == "gpt2")),
        sliding_window=int(window) if window else None,
    )


__all__ = ["ModelSpec", "bundled_models", "load_model", "spec_from_config"]
