"""An attention mask whose folded values are the causal triangle runs as causal
attention (compiler/causal_mask.py): the same commands and cycles as ``is_causal=True``,
the same numbers as torch; any other mask keeps the masked kernel."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler import frontend
from compiler import graph as g
from compiler.causal_mask import causal_offset
from compiler.ir.ops import MatMul
from compiler.options import CompileOptions
from compiler_helpers import config

S = 96  # on tiny: query tiles the causal kernel skips key tiles for


def _triangle(sq: int, sk: int, offset: int = 0) -> np.ndarray:
    return np.arange(sk)[None, :] <= np.arange(sq)[:, None] + offset


def _additive(visible: np.ndarray) -> np.ndarray:
    return np.where(visible, 0.0, -np.inf).astype(np.float32)


class TestCausalOffset:
    """The pure check, mask values in, offset (or None) out."""

    def test_the_triangle_in_both_forms_and_broadcast(self) -> None:
        tri = _triangle(8, 8)
        assert causal_offset(tri, 8, 8) == 0
        assert causal_offset(_additive(tri), 8, 8) == 0
        assert causal_offset(np.broadcast_to(tri, (2, 4, 8, 8)).copy(), 8, 8) == 0
        assert causal_offset(tri[None, None], 8, 8) == 0

    def test_queries_at_the_end_of_longer_keys(self) -> None:
        assert causal_offset(_triangle(3, 8, 5), 3, 8) == 5
        assert causal_offset(_triangle(8, 3), 8, 3) == 0  # SDPA's top-left triangle

    def test_every_key_visible_is_no_mask(self) -> None:
        assert causal_offset(np.ones((1, 8), bool), 1, 8) == 7  # a decode step
        assert causal_offset(np.zeros((4, 8), np.float32), 4, 8) == 7

    def test_other_masks_are_not_causal(self) -> None:
        tri = _triangle(8, 8)
        flipped = tri.copy()
        flipped[5, 2] = False
        padded = tri & (np.arange(8) < 6)[None, :]
        window = tri & (np.arange(8)[None, :] > np.arange(8)[:, None] - 3)
        one_head = np.broadcast_to(tri, (1, 2, 8, 8)).copy()
        one_head[0, 1, 7, 0] = False
        for mask in (flipped, padded, window, one_head, ~tri, np.triu(tri.T, 1)):
            assert causal_offset(mask, 8, 8) is None
            assert causal_offset(_additive(mask), 8, 8) is None
        assert causal_offset(np.where(tri, 0.0, -1e4), 8, 8) is None  # not -inf
        assert causal_offset(tri[:1], 8, 8) is None  # query 0's row for every query


class Attention(torch.nn.Module):
    """SDPA over [B, H, S, D] with a mask the forward builds from positions (folded by
    the frontend), or ``is_causal=True``."""

    def __init__(self, mask: str) -> None:
        super().__init__()
        self.mask = mask

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.mask == "is_causal":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        sq, sk = q.shape[-2], k.shape[-2]
        rows = torch.arange(sq)[:, None] + (sk - sq)
        cols = torch.arange(sk)[None, :]
        masks = {
            "tril": lambda: torch.ones(sq, sk).tril().bool(),
            "bottom_right": lambda: cols <= rows,
            "additive": lambda: torch.zeros(sq, sk).masked_fill(cols > rows, float("-inf")),
            "flipped": lambda: (cols <= rows) & ~((rows == 30) & (cols == 3)),
            "padding": lambda: (cols <= rows) & (cols < sk - 5),
            "window": lambda: (cols <= rows) & (cols > rows - 8),
        }
        mask = masks[self.mask]()[None, None].expand(q.shape[0], 1, sq, sk)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _qkv(sq: int = S, sk: int = S) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return torch.randn(2, 2, sq, 8), torch.randn(2, 2, sk, 8), torch.randn(2, 2, sk, 8)


def _compile(module: torch.nn.Module, inputs: tuple, options: CompileOptions | None = None):
    return compiler.compile_graph(compiler.export_model(module, inputs), config("tiny"),
                                  options)


def _commands(compiled) -> list[str]:
    """The program's commands with its DRAM tensors named by first use and sources
    by module (the graph that builds a mask numbers its FX nodes differently)."""
    names: dict[str, str] = {}

    def rename(match: re.Match) -> str:
        return f"tensor='{names.setdefault(match.group(1), f't{len(names)}')}'"

    def text(command) -> str:
        text = re.sub(r"tensor='([^']*)'", rename, repr(command))
        return re.sub(r"source='([^':]*):[^']*'", r"source='\1'", text)
    return [text(c) for c in compiled.program.commands]


def _matmuls(compiled) -> int:
    return sum(isinstance(c.op, MatMul) for c in compiled.program.commands)


def _attention_node(module: torch.nn.Module, inputs: tuple) -> g.Node:
    graph, _, _ = frontend.build(compiler.export_model(module, inputs), CompileOptions())
    (node,) = [n for n in graph.nodes if isinstance(n.spec, g.Attention)]
    return node


@pytest.mark.parametrize("mask", ["tril", "additive"])
def test_a_causal_mask_compiles_as_is_causal(mask: str) -> None:
    inputs = _qkv()
    masked, causal = _compile(Attention(mask), inputs), _compile(Attention("is_causal"), inputs)
    assert _commands(masked) == _commands(causal)
    (out,), result = masked.run(*inputs)
    torch.testing.assert_close(out, Attention(mask)(*inputs), rtol=1e-4, atol=1e-4)
    (_,), reference = causal.run(*inputs)
    assert result.total_cycles == reference.total_cycles


def test_without_the_option_the_mask_is_read() -> None:
    inputs = _qkv()
    on = _compile(Attention("tril"), inputs)
    off = _compile(Attention("tril"), inputs, CompileOptions(causal_mask=False))
    assert _matmuls(off) > _matmuls(on)  # no key tile skipped
    assert off.simulate().total_cycles > on.simulate().total_cycles


def test_queries_at_the_end_of_the_keys_skip_the_hidden_tiles() -> None:
    inputs = _qkv(sq=S - 16, sk=S)
    node = _attention_node(Attention("bottom_right"), inputs)
    assert node.spec.causal and node.spec.causal_offset == 16 and len(node.inputs) == 3
    compiled = _compile(Attention("bottom_right"), inputs)
    (out,), _ = compiled.run(*inputs)
    torch.testing.assert_close(out, Attention("bottom_right")(*inputs), rtol=1e-4, atol=1e-4)
    full = _compile(Attention("bottom_right"), inputs, CompileOptions(causal_mask=False))
    assert _matmuls(compiled) < _matmuls(full)


@pytest.mark.parametrize("mask", ["flipped", "padding", "window"])
def test_other_masks_keep_the_masked_kernel(mask: str) -> None:
    inputs = _qkv()
    node = _attention_node(Attention(mask), inputs)
    assert not node.spec.causal and len(node.inputs) == 4
    (out,), _ = _compile(Attention(mask), inputs).run(*inputs)
    torch.testing.assert_close(out, Attention(mask)(*inputs), rtol=1e-4, atol=1e-4)


class TestTransformersLlama:
    """transformers builds its causal mask as a tensor under torch.export (``sdpa_mask``
    from arange comparisons): the same program as the model with ``is_causal=True``."""

    @staticmethod
    def _model(seq: int, hidden: int, heads: int, kv_heads: int, attention: str = "sdpa"):
        transformers = pytest.importorskip("transformers")
        cfg = transformers.LlamaConfig(
            vocab_size=256, hidden_size=hidden, intermediate_size=2 * hidden,
            num_hidden_layers=1, num_attention_heads=heads, num_key_value_heads=kv_heads,
            max_position_embeddings=seq, rms_norm_eps=1e-5, attn_implementation=attention)
        return transformers.LlamaForCausalLM(cfg).eval()

    @staticmethod
    def _is_causal_attention() -> str:
        """transformers' SDPA attention given no mask, so it passes ``is_causal=True``."""
        from transformers import AttentionInterface, AttentionMaskInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        AttentionInterface.register("archsim_is_causal", sdpa_attention_forward)
        AttentionMaskInterface.register("archsim_is_causal", lambda *args, **kwargs: None)
        return "archsim_is_causal"

    @pytest.mark.parametrize("kv_heads", [2, 1])
    def test_its_mask_compiles_as_is_causal_with_torchs_numbers(self, kv_heads: int) -> None:
        """Given a mask, transformers repeats grouped-query heads (``repeat_kv``) where
        with none it passes ``enable_gqa``: the kernel reads the heads repeated."""
        torch.manual_seed(0)
        masked = self._model(S, 32, 2, kv_heads)
        causal = self._model(S, 32, 2, kv_heads, self._is_causal_attention())
        causal.load_state_dict(masked.state_dict())
        ids = torch.randint(0, 256, (1, S))
        compiled, reference = (_compile(Logits(m), (ids,)) for m in (masked, causal))
        assert _commands(compiled) == _commands(reference)
        (out,), result = compiled.run(ids)
        with torch.no_grad():
            torch.testing.assert_close(out, masked(ids, use_cache=False).logits,
                                       rtol=1e-4, atol=1e-4)
        assert result.total_cycles == reference.simulate().total_cycles

    def test_estimate_equals_the_builtin_llama_with_is_causal(self) -> None:
        import archsim
        from archsim.app.models import Llama

        seq, hidden, heads = 256, 64, 2
        with torch.device("meta"):
            model = self._model(seq, hidden, heads, heads)
            builtin = Llama(layers=1, hidden=hidden, heads=heads, kv_heads=heads,
                            intermediate=2 * hidden, vocab=256, all_logits=True)
        ids = torch.zeros(1, seq, dtype=torch.long, device="meta")
        got = archsim.estimate(model, (ids,), "tiny", kwargs={"use_cache": False})
        want = archsim.estimate(builtin, (ids,), "tiny")
        assert abs(got.total_cycles / want.total_cycles - 1) < 0.01


class Logits(torch.nn.Module):
    """A transformers causal LM's logits, no cache: one tensor out."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, use_cache=False).logits
