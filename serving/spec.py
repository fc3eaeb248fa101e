"""A decoder-only language model's shapes and architecture, read from a transformers
``config.json``.

MODEL is a bundled name (``serving/models/*.json``), a path to a ``config.json`` or a
model directory holding one. Only shapes and architecture flags are read (each family's
reader is in :mod:`serving.families`); there are no weights. No torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from archsim.errors import ModelConfigError, SequenceTooLongError

_PACKAGE = "serving.models"

NORMS = ("rms", "rms_f32", "layer")
"""``rms``: Llama's RMSNorm (normalized in float32, cast back, then scaled); ``rms_f32``:
Gemma's (scaled by 1 + weight in float32, then cast); ``layer``: LayerNorm."""
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "gelu_new", "relu")
"""MLP activations: ``gelu_tanh`` is torch's tanh GELU (``gelu_pytorch_tanh``),
``gelu_new`` the same formula written out (GPT-2)."""
PARALLEL = ("", "shared_norm", "two_norms")
"""Attention and MLP in sequence (``""``) or side by side on the layer input (Falcon):
behind one norm, or each behind its own."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str
    """The config's ``model_type`` (``llama``, ``gemma2``, ``falcon``...)."""
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
    """Tokens of context a sliding-window layer's attention sees; None: all."""
    sliding_layers: tuple[bool, ...] | None = None
    """Which layers use the sliding window (Gemma-2/3 alternate); None: all of them."""
    norm: str = "rms"
    positions: str = "rotary"
    """``rotary`` or ``learned`` (an embedding table added to the tokens')."""
    position_offset: int = 0
    """Rows of the learned position table before position 0 (OPT: 2)."""
    rotary_dim: int = 0
    """Leading dimensions of each head that rotary rotates; 0: all (``head_dim``)."""
    activation: str = "silu"
    gated: bool = True
    """A gated MLP (SwiGLU, GeGLU): activation(gate) x up, three matrices."""
    out_bias: bool = False
    """The attention output projection has a bias."""
    mlp_bias: bool = False
    fused_qkv: bool = False
    """Q, K and V come from one matmul (Phi-3 ``qkv_proj``, Falcon, GPT-2 ``c_attn``)."""
    fused_gate_up: bool = False
    """Gate and up come from one matmul (Phi-3 ``gate_up_proj``)."""
    qk_norm: bool = False
    """An RMSNorm over each query and key head before rotary (Qwen3, Gemma-3)."""
    sandwich_norms: bool = False
    """Norms after attention and after the MLP too (Gemma-2/3): four per layer."""
    parallel: str = ""
    embed_scale: bool = False
    """Token embeddings multiplied by sqrt(hidden) (Gemma)."""
    scaled_query: bool = False
    """The query is multiplied by 1/sqrt(head_dim) before attention (OPT)."""
    logit_softcap: float | None = None
    """Final logits through cap * tanh(logits / cap) (Gemma-2)."""
    attention_softcap: float | None = None
    """Attention scores soft-capped inside the kernel (Gemma-2): not timed."""

    def __post_init__(self) -> None:
        for field, value, accepted in (("norm", self.norm, NORMS),
                                       ("activation", self.activation, ACTIVATIONS),
                                       ("parallel", self.parallel, PARALLEL),
                                       ("positions", self.positions, ("rotary", "learned"))):
            if value not in accepted:
                raise ModelConfigError(f"{self.name}: {field} {value!r} is not one of "
                                       f"{', '.join(repr(a) for a in accepted)}")
        if self.sliding_layers is not None and len(self.sliding_layers) != self.layers:
            raise ModelConfigError(f"{self.name}: {len(self.sliding_layers)} layer types "
                                   f"for {self.layers} layers")

    # -- attention windows -------------------------------------------------------------
    def window(self, layer: int) -> int | None:
        """Tokens layer ``layer`` attends to at most (None: all)."""
        if self.sliding_layers is not None and not self.sliding_layers[layer]:
            return None
        return self.sliding_window

    def attended(self, context: int, layer: int = 0) -> int:
        """Tokens a query at position ``context - 1`` of layer ``layer`` attends to."""
        window = self.window(layer)
        return min(context, window) if window else context

    def kv_tokens(self, context: int) -> int:
        """Cached tokens all layers together read at ``context`` (per sequence)."""
        return sum(self.attended(context, layer) for layer in range(self.layers))

    # -- parameter counts (elements) -------------------------------------------------
    @property
    def gated_mlp(self) -> bool:
        return self.gated

    @property
    def attention_weights(self) -> int:
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return self.hidden * (2 * q + 2 * kv)

    @property
    def mlp_weights(self) -> int:
        return (3 if self.gated else 2) * self.hidden * self.intermediate

    @property
    def layer_matmul_weights(self) -> int:
        """Weights of one layer's matmuls: 2 FLOPs each per token."""
        return self.attention_weights + self.mlp_weights

    @property
    def norm_parameters(self) -> int:
        """Of one norm over the hidden size."""
        return (2 if self.norm == "layer" else 1) * self.hidden

    @property
    def layer_norms(self) -> int:
        """Norms over the hidden size in one layer."""
        if self.parallel == "shared_norm":
            return 1
        return 4 if self.sandwich_norms else 2

    @property
    def layer_parameters(self) -> int:
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        norms = self.layer_norms * self.norm_parameters + (2 * self.head_dim
                                                           if self.qk_norm else 0)
        biases = (q + 2 * kv if self.qkv_bias else 0) + (self.hidden if self.out_bias else 0)
        if self.mlp_bias:
            biases += (2 if self.gated else 1) * self.intermediate + self.hidden
        return self.layer_matmul_weights + norms + biases

    @property
    def head_parameters(self) -> int:
        """The final norm and the LM head (none when tied to the embedding)."""
        return self.norm_parameters + (0 if self.tied_embeddings else self.vocab * self.hidden)

    @property
    def position_rows(self) -> int:
        """Rows of the learned position table (0 with rotary)."""
        return self.max_positions + self.position_offset if self.positions == "learned" else 0

    @property
    def embedding_parameters(self) -> int:
        return (self.vocab + self.position_rows) * self.hidden

    @property
    def parameters(self) -> int:
        return (self.layers * self.layer_parameters + self.head_parameters
                + self.embedding_parameters)

    def kv_elements_per_token(self) -> int:
        """K and V of one token in one layer."""
        return 2 * self.kv_heads * self.head_dim


def bundled_models() -> tuple[str, ...]:
    return tuple(sorted(p.name.removesuffix(".json")
                        for p in resources.files(_PACKAGE).iterdir()
                        if p.name.endswith(".json")))


def load_model(name_or_path: str | Path) -> ModelSpec:
    """A bundled model by name, a ``config.json`` path, or a directory holding one."""
    return spec_from_config(*read_model_config(name_or_path))


def read_model_config(name_or_path: str | Path) -> tuple[dict[str, Any], str]:
    """The transformers config dict of a bundled model, a ``config.json`` path or a
    directory holding one, and the model's name."""
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
    if not isinstance(data, dict):
        raise ModelConfigError(f"{path}: expected a JSON object (a transformers config), "
                               f"got {type(data).__name__}")
    check_sizes(data, name)
    return data, name


SIZE_KEYS = ("hidden_size", "n_embd", "num_hidden_layers", "n_layer", "num_attention_heads",
             "n_head", "num_key_value_heads", "num_kv_heads", "head_dim", "intermediate_size",
             "ffn_hidden_size", "ffn_dim", "n_inner", "vocab_size", "max_position_embeddings",
             "n_positions")
"""The size fields of the families' configs (transformers' and GPT-2's names); null
means "not set" (GPT-2's ``n_inner``), anything else must be a count."""


def check_sizes(data: dict[str, Any], name: str) -> None:
    """Refuse sizes no model has, in one ModelConfigError naming each field: the same
    check for ``archsim llm``/``serve`` and ``archsim run`` (where torch or transformers
    would fail inside model building, or a zero would silently become a default)."""
    problems = [f"{key} is {data[key]!r}: expected an integer >= 1" for key in SIZE_KEYS
                if data.get(key) is not None and not _is_count(data[key])]
    hidden = next((key for key in ("hidden_size", "n_embd") if data.get(key)), None)
    heads = next((key for key in ("num_attention_heads", "n_head") if data.get(key)), None)
    if (not problems and hidden and heads and data.get("head_dim") is None
            and data[hidden] % data[heads]):
        problems.append(f"{hidden} {data[hidden]} is not a multiple of {heads} "
                        f"{data[heads]}")
    if problems:
        raise ModelConfigError(f"{name}: {'; '.join(problems)}")


def check_positions(name: str, tokens: tuple[int, ...], positions: int,
                    option: str = "") -> None:
    """Refuse more ``tokens`` (their parts: prompt and generated) than the model's
    ``positions``, in one SequenceTooLongError: the same check for ``archsim llm`` and
    ``archsim run`` (``option``, e.g. ``--seq``: the one option that sets them)."""
    if sum(tokens) <= positions:
        return
    hint = f"; give {option} {positions} or fewer" if option else ""
    raise SequenceTooLongError(f"{name}: {' + '.join(map(str, tokens))} tokens exceed its "
                               f"{positions} positions{hint}")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def spec_from_config(data: dict[str, Any], name: str) -> ModelSpec:
    """A :class:`ModelSpec` from a transformers config dict."""
    from serving.families import read_config

    return read_config(data, name)


__all__ = ["ACTIVATIONS", "ModelSpec", "NORMS", "PARALLEL", "SIZE_KEYS", "bundled_models",
           "check_positions", "check_sizes", "load_model", "read_model_config", "spec_from_config"]
