"""Reading a transformers ``config.json`` into a :class:`~serving.spec.ModelSpec`: one
reader per ``model_type``, in the table :data:`READERS`.

Each reader states the family's real differences (fused projections, norms, GeGLU,
sliding-window layers, parallel attention and MLP, learned positions...); a feature
the blocks do not build is a :class:`ModelConfigError` naming what is accepted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from archsim.errors import ModelConfigError
from serving.spec import ModelSpec

Config = dict[str, Any]

_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu",
                "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_new", "relu": "relu"}
"""transformers' activation names -> :data:`serving.spec.ACTIVATIONS`."""
_LAYER_TYPES = {"full_attention": False, "sliding_attention": True}


def _int(data: Config, name: str, *keys: str, default: int | None = None) -> int:
    for key in keys:
        if data.get(key):
            return int(data[key])
    if default is None:
        raise ModelConfigError(f"{name}: config has no {' or '.join(keys)}")
    return default


def _activation(data: Config, name: str, key: str, default: str) -> str:
    value = data.get(key) or default
    if value not in _ACTIVATIONS:
        raise ModelConfigError(f"{name}: {key} {value!r} is not supported; supported: "
                               f"{', '.join(sorted(_ACTIVATIONS))}")
    return _ACTIVATIONS[value]


def _shapes(data: Config, name: str, *, intermediate: tuple[str, ...] = ("intermediate_size",),
            kv: tuple[str, ...] = ("num_key_value_heads",), positions: int = 2048,
            tied: bool = False) -> Config:
    """The shape fields every family has, under the usual (Llama) key names."""
    hidden = _int(data, name, "hidden_size", "n_embd")
    layers = _int(data, name, "num_hidden_layers", "n_layer")
    heads = _int(data, name, "num_attention_heads", "n_head")
    kv_heads = _int(data, name, *kv, default=heads)
    if heads % kv_heads:
        raise ModelConfigError(f"{name}: {heads} attention heads are not a multiple of "
                               f"{kv_heads} key/value heads")
    return dict(name=name, family=str(data["model_type"]), hidden=hidden, layers=layers,
                heads=heads, kv_heads=kv_heads,
                head_dim=_int(data, name, "head_dim", default=hidden // heads),
                intermediate=_int(data, name, *intermediate, default=4 * hidden),
                vocab=_int(data, name, "vocab_size"),
                max_positions=_int(data, name, "max_position_embeddings", "n_positions",
                                   default=positions),
                tied_embeddings=bool(data.get("tie_word_embeddings", tied)))


def _windows(data: Config, name: str, layers: int, pattern: Callable[[int], bool] | None,
             enabled: bool = True) -> Config:
    """``sliding_window`` and which layers use it: ``layer_types`` when the config has
    them, else ``pattern(layer)`` (None: every layer)."""
    window = data.get("sliding_window")
    if not window or not enabled:
        return dict(sliding_window=None, sliding_layers=None)
    types = data.get("layer_types")
    if types is None:
        sliding = None if pattern is None else tuple(pattern(i) for i in range(layers))
    else:
        unknown = sorted({t for t in types if t not in _LAYER_TYPES})
        if unknown:
            raise ModelConfigError(f"{name}: layer types {', '.join(unknown)} are not "
                                   f"supported; supported: {', '.join(_LAYER_TYPES)}")
        sliding = tuple(_LAYER_TYPES[t] for t in types)
    if sliding is not None and not any(sliding):
        return dict(sliding_window=None, sliding_layers=None)
    return dict(sliding_window=int(window),
                sliding_layers=None if sliding is None or all(sliding) else sliding)


def _llama(data: Config, name: str) -> ModelSpec:
    """Llama, Mistral: RMSNorm, rotary, SwiGLU; optional biases (``attention_bias``,
    ``mlp_bias``); Mistral's sliding window on every layer."""
    shapes = _shapes(data, name)
    bias = bool(data.get("attention_bias"))
    return ModelSpec(**shapes, qkv_bias=bias, out_bias=bias, mlp_bias=bool(data.get("mlp_bias")),
                     activation=_activation(data, name, "hidden_act", "silu"),
                     **_windows(data, name, shapes["layers"], None))


def _qwen(data: Config, name: str) -> ModelSpec:
    """Qwen2 (biases on Q/K/V) and Qwen3 (``attention_bias``; an RMSNorm on each query
    and key head); sliding windows only with ``use_sliding_window``."""
    shapes = _shapes(data, name)
    qwen3 = data["model_type"] == "qwen3"
    first = int(data.get("max_window_layers") or 0)
    bias = bool(data.get("attention_bias")) if qwen3 else True
    return ModelSpec(**shapes, qkv_bias=bias, out_bias=qwen3 and bias, qk_norm=qwen3,
                     activation=_activation(data, name, "hidden_act", "silu"),
                     **_windows(data, name, shapes["layers"], lambda i: i >= first,
                                bool(data.get("use_sliding_window"))))


def _phi3(data: Config, name: str) -> ModelSpec:
    """Phi-3: Q/K/V from one matmul (``qkv_proj``), gate and up from one
    (``gate_up_proj``), partial rotary, a sliding window on every layer."""
    shapes = _shapes(data, name)
    factor = float(data.get("partial_rotary_factor") or 1.0)
    return ModelSpec(**shapes, qkv_bias=False, fused_qkv=True, fused_gate_up=True,
                     rotary_dim=int(shapes["head_dim"] * factor) if factor < 1 else 0,
                     activation=_activation(data, name, "hidden_act", "silu"),
                     **_windows(data, name, shapes["layers"], None))


def _gemma(data: Config, name: str) -> ModelSpec:
    """Gemma-2 and Gemma-3 (text): Gemma's RMSNorm, four norms a layer, GeGLU,
    embeddings scaled by sqrt(hidden), tied LM head, sliding-window layers alternating
    with global ones; Gemma-2's logit soft-capping, Gemma-3's query/key norms."""
    if data["model_type"] == "gemma3":  # the multimodal config: its text model
        data = {**data.get("text_config", {}), "model_type": "gemma3_text"}
    gemma3 = data["model_type"] == "gemma3_text"
    shapes = _shapes(data, name, positions=8192, tied=True)
    every = int(data.get("sliding_window_pattern") or 6) if gemma3 else 2
    softcap = data.get("final_logit_softcapping")
    attention_softcap = data.get("attn_logit_softcapping")
    return ModelSpec(**shapes, qkv_bias=bool(data.get("attention_bias")),
                     out_bias=bool(data.get("attention_bias")), norm="rms_f32",
                     activation=_activation(data, name, "hidden_activation",
                                            "gelu_pytorch_tanh"),
                     sandwich_norms=True, embed_scale=True, qk_norm=gemma3,
                     logit_softcap=float(softcap) if softcap else None,
                     attention_softcap=float(attention_softcap) if attention_softcap else None,
                     **_windows(data, name, shapes["layers"], lambda i: bool((i + 1) % every)))


def _falcon(data: Config, name: str) -> ModelSpec:
    """Falcon: LayerNorm, Q/K/V from one matmul, multi-query (or ``num_kv_heads`` with
    the new decoder architecture), attention and MLP side by side on the layer input
    (``parallel_attn``) behind one norm or two, a GELU MLP, biases with ``bias``."""
    if data.get("alibi"):
        raise ModelConfigError(f"{name}: ALiBi positions are not supported; supported: "
                               f"rotary (alibi false)")
    new = bool(data.get("new_decoder_architecture"))
    kv = ("num_kv_heads",) if new else ()
    shapes = _shapes({**data, "head_dim": None}, name, intermediate=("ffn_hidden_size",),
                     kv=kv, tied=True)
    if not new and data.get("multi_query", True):
        shapes["kv_heads"] = 1
    if new:
        norms = int(data.get("num_ln_in_parallel_attn") or 2)
        parallel = "two_norms" if norms == 2 else "shared_norm"
    else:
        parallel = "shared_norm" if data.get("parallel_attn", True) else ""
    bias = bool(data.get("bias"))
    return ModelSpec(**shapes, qkv_bias=bias, out_bias=bias, mlp_bias=bias, norm="layer",
                     fused_qkv=True, gated=False, parallel=parallel,
                     activation=_activation(data, name, "activation", "gelu"))


def _opt(data: Config, name: str) -> ModelSpec:
    """OPT: learned positions (two rows of offset), LayerNorm before attention and MLP,
    ReLU MLP, biases everywhere, the query scaled before attention, tied LM head."""
    if data.get("do_layer_norm_before") is False:
        raise ModelConfigError(f"{name}: OPT with do_layer_norm_before false (norms after "
                               f"the residual, OPT-350m) is not supported; supported: true")
    hidden = _int(data, name, "hidden_size")
    if int(data.get("word_embed_proj_dim") or hidden) != hidden:
        raise ModelConfigError(f"{name}: word_embed_proj_dim {data['word_embed_proj_dim']} "
                               f"differs from hidden_size {hidden} (projected embeddings, "
                               f"OPT-350m); supported: equal")
    bias = bool(data.get("enable_bias", True))
    return ModelSpec(**_shapes(data, name, intermediate=("ffn_dim",), tied=True),
                     qkv_bias=bias, out_bias=bias, mlp_bias=bias, norm="layer",
                     positions="learned", position_offset=2, gated=False,
                     scaled_query=True,
                     activation=_activation(data, name, "activation_function", "relu"))


def _gpt2(data: Config, name: str) -> ModelSpec:
    """GPT-2: learned positions, LayerNorm, Q/K/V from one matmul (``c_attn``), GELU
    written out (``gelu_new``), biases everywhere, tied LM head."""
    shapes = _shapes(data, name, intermediate=("n_inner",), positions=1024, tied=True)
    return ModelSpec(**shapes, qkv_bias=True, out_bias=True, mlp_bias=True, norm="layer",
                     positions="learned", gated=False, fused_qkv=True,
                     activation=_activation(data, name, "activation_function", "gelu_new"))


READERS: dict[str, Callable[[Config, str], ModelSpec]] = {
    "llama": _llama, "mistral": _llama, "qwen2": _qwen, "qwen3": _qwen, "phi3": _phi3,
    "gemma2": _gemma, "gemma3_text": _gemma, "gemma3": _gemma, "falcon": _falcon,
    "opt": _opt, "gpt2": _gpt2,
}


def read_config(data: Config, name: str) -> ModelSpec:
    model_type = data.get("model_type")
    reader = READERS.get(str(model_type))
    if reader is None:
        raise ModelConfigError(f"{name}: model_type {model_type!r} is not supported; "
                               f"supported: {', '.join(sorted(READERS))}")
    return reader(data, name)


__all__ = ["READERS", "read_config"]
