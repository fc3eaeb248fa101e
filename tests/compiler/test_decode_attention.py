"""Decode-shaped attention (issue 32): numbers equal torch's SDPA on CPU, the KV cache read
once (grouped-query heads share it), keys streamed at DRAM speed, split-K and its
combine step, and the plan's pieces on hand-derived cases; and the flash kernel's
causal mask tiles kept in the scratchpad (prefill's DRAM bytes)."""

from __future__ import annotations

import math

import pytest
import torch
from compiler_helpers import check_op, config

from archsim.simulator import Simulator
from compiler import compile_op
from compiler.kernels.attention_decode import _splits, key_chunks
from compiler.options import CompileOptions

aten = torch.ops.aten
SDPA = aten.scaled_dot_product_attention.default


def _qkv(batch: int, heads: int, kv_heads: int, rows: int, keys: int, dim: int,
         dtype: torch.dtype = torch.float32, device: str = "cpu"
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    make = torch.empty if device == "meta" else torch.randn
    return (make(batch, heads, rows, dim, dtype=dtype, device=device),
            make(batch, kv_heads, keys, dim, dtype=dtype, device=device),
            make(batch, kv_heads, keys, dim, dtype=dtype, device=device))


def _choice(compiled) -> str:
    (text,) = compiled.choices.values()
    return text


# ------------------------------------------------------------------ numbers vs torch

@pytest.mark.parametrize("preset", ["tiny", "tpu-v4"])
def test_batched_multi_head_decode_matches_torch(preset: str) -> None:
    torch.manual_seed(0)
    compiled, _ = check_op(SDPA, _qkv(3, 4, 4, 1, 300, 16), preset, {"scale": 0.2})
    assert _choice(compiled).startswith("decode attention: 12 (batch, kv head) items of 1 "
                                        "query rows")


@pytest.mark.parametrize("preset", ["tiny", "tpu-v4"])
def test_grouped_query_decode_matches_torch(preset: str) -> None:
    torch.manual_seed(1)
    compiled, _ = check_op(SDPA, _qkv(2, 8, 2, 1, 300, 16), preset, {"enable_gqa": True})
    assert "4 (batch, kv head) items of 4 query rows" in _choice(compiled)


def test_several_key_tiles_rescale_the_running_softmax() -> None:
    """tiny's 64 KiB scratchpad holds 100 keys a step: three steps per item, each
    rescaling the accumulator (online softmax), equal to torch."""
    torch.manual_seed(2)
    compiled, _ = check_op(SDPA, _qkv(2, 8, 2, 1, 300, 16), "tiny", {"enable_gqa": True})
    assert "keys in tiles of 100 " in _choice(compiled)


def test_split_keys_are_combined_across_cores() -> None:
    """One item on atom's 8 cores: the keys are split over them and combined, with the
    same numbers as torch (several query rows per head too: 3 rows x 2 heads)."""
    torch.manual_seed(3)
    compiled, _ = check_op(SDPA, _qkv(1, 2, 1, 3, 700, 32), "atom", {"enable_gqa": True})
    assert "1 (batch, kv head) items of 6 query rows" in _choice(compiled)
    assert "8 split(s) per item" in _choice(compiled)


def test_bf16_decode_matches_torch() -> None:
    torch.manual_seed(4)
    check_op(SDPA, _qkv(2, 4, 2, 1, 257, 64, torch.bfloat16), "tpu-v4", {"enable_gqa": True})


@pytest.mark.parametrize("case", ["causal", "mask", "one fold of keys"])
def test_masked_causal_or_short_attention_keeps_the_flash_kernel(case: str) -> None:
    q, k, v = _qkv(1, 2, 2, 4, 200 if case != "one fold of keys" else 128, 8)
    args, kwargs = (q, k, v), {}
    if case == "causal":
        kwargs = {"is_causal": True}
    elif case == "mask":
        args += (torch.zeros(4, 200),)
    compiled, _ = check_op(SDPA, args, "tpu-v4", kwargs)
    assert compiled.choices == {}


# ------------------------------------------------------------------ DRAM bytes and time

def _run(args: tuple, preset: str, kwargs: dict | None = None, on_chip: bool = True):
    cfg = config(preset)
    compiled = compile_op(SDPA, args, kwargs or {}, cfg,
                          CompileOptions(on_chip_temps=on_chip))
    return compiled, Simulator(cfg).run(compiled.program)


def test_kv_cache_is_read_once_per_step_grouped_heads_share_it() -> None:
    """Llama-3-8B-like GQA (32 query heads over 8 K/V heads), batch 4, 1000 cached
    tokens, bf16, on tpu-v4 (32 items on 2 cores: no split): the kernel moves exactly
    K + V once, Q and the output."""
    batch, heads, kv_heads, keys, dim = 4, 32, 8, 1000, 128
    compiled, result = _run(_qkv(batch, heads, kv_heads, 1, keys, dim, torch.bfloat16,
                                 "meta"), "tpu-v4", {"enable_gqa": True})
    kv = 2 * batch * kv_heads * keys * dim * 2
    q_and_out = 2 * batch * heads * 1 * dim * 2
    assert "1 split(s)" in _choice(compiled)
    assert result.dram_bytes == kv + q_and_out


def test_split_k_adds_only_its_partials() -> None:
    """One f16 item over atom's 8 cores: K and V once, the query once per split (each
    core needs it), the output once; each split writes its partial acc [1, 64] f32 and
    its m and l (4 bytes each, charged atom's 32-byte access granule), and the combine
    step reads the 8 splits' [1, 66] f32 rows in one run. With the partials kept in
    atom's shared SRAM (the default) they cross no DRAM."""
    rows, keys, dim, splits = 1, 4096, 64, 8
    moved = 2 * keys * dim * 2 + splits * rows * dim * 2 + rows * dim * 2
    written = splits * (rows * dim * 4 + 2 * 32)
    read = splits * rows * (dim + 2) * 4
    for on_chip, dram in ((False, moved + written + read), (True, moved)):
        compiled, result = _run(_qkv(1, 1, 1, rows, keys, dim, torch.float16, "meta"),
                                "atom", on_chip=on_chip)
        assert f"{splits} split(s)" in _choice(compiled)
        assert result.dram_bytes == dram


def test_decode_streams_the_cache_at_dram_bandwidth() -> None:
    """Batch 16 x 8 heads x 2048 keys (64 MiB of bf16 KV) on tpu-v4: no faster than
    its bytes over DRAM bandwidth, and within 10% of it (the first loads' latency and
    the last item's softmax are what it adds)."""
    args = _qkv(16, 8, 8, 1, 2048, 128, torch.bfloat16, "meta")
    _, result = _run(args, "tpu-v4")
    cfg = config("tpu-v4")
    floor = result.dram_bytes / cfg.dram_bytes_per_cycle
    assert floor <= result.total_cycles <= 1.10 * floor


# ------------------------------------------------------------------ the plan's pieces

def test_key_chunks_are_whole_folds_one_per_array() -> None:
    # 2049 keys = 17 folds of 128 over 4 arrays: 5, 4, 4, 4 folds, the last one partial
    assert key_chunks(2049, 4, 128) == [(0, 640), (640, 1152), (1152, 1664), (1664, 2049)]
    assert key_chunks(45, 4, 128) == [(0, 45)]  # one fold: one array
    assert key_chunks(300, 1, 4) == [(0, 300)]


@pytest.mark.parametrize("items, keys, cores, min_keys, want", [
    (256, 2049, 2, 512, 1),   # items fill the cores: 128 x 2049 < 256 x 1025 split in 2
    (3, 2049, 2, 512, 2),     # 2 + 1 items: 2 x 2049 keys on one core; split: 3 x 1025
    (1, 700, 8, 64, 8),       # one item over 8 cores, 88 keys each
    (1, 700, 20, 64, 11),     # at least 64 keys a split: 11 of 64 (12 would be 59)
    (1, 100, 8, 64, 1),       # too short to split
])
def test_splits_balance_the_busiest_core(items: int, keys: int, cores: int, min_keys: int,
                                         want: int) -> None:
    assert _splits(items, keys, cores, min_keys) == want
    load = math.ceil(items * want / cores) * math.ceil(keys / want)
    assert load <= math.ceil(items / cores) * keys


# ------------------------------------------------------------------ prefill's causal tiles

def test_causal_mask_tiles_are_loaded_once_per_core() -> None:
    """Causal prefill, 4 heads x 1024 tokens x 128 bf16 on tpu-v4: 512 x 512 tiles, two
    query tiles a head (one key tile, then two), the 8 query tiles over 2 cores. Every
    diagonal tile has the same mask (key j hidden from query i when j > i), so each core
    loads it once: 2 x 512 x 512 f32, where a slice of the whole bias per diagonal tile
    was 8 of them."""
    heads, seq, dim = 4, 1024, 128
    q = torch.empty(1, heads, seq, dim, dtype=torch.bfloat16, device="meta")
    _, result = _run((q, q, q), "tpu-v4", {"is_causal": True})
    tile_kv = 512 * dim * 2 * 2
    q_and_out = 2 * heads * seq * dim * 2
    masks = 2 * 512 * 512 * 4
    assert result.dram_bytes == heads * 3 * tile_kv + q_and_out + masks


class _BottomRight(torch.nn.Module):
    """Causal attention of the last queries over a longer key sequence (a cache
    chunk), its mask built in forward, as transformers builds it."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        sq, sk = q.shape[-2], k.shape[-2]
        mask = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_causal_tiles_with_queries_at_the_end_match_torch() -> None:
    """Offset 60 (40 queries, 100 keys) on tiny: the diagonal crosses tiles at two
    distinct offsets, both kept resident, and the numbers equal torch's."""
    from compiler import compile_graph, export_model

    torch.manual_seed(5)
    inputs = (torch.randn(1, 2, 40, 16), torch.randn(1, 2, 100, 16), torch.randn(1, 2, 100, 16))
    compiled = compile_graph(export_model(_BottomRight(), inputs), config("tiny"))
    (out,), _ = compiled.run(*inputs)
    torch.testing.assert_close(out, _BottomRight()(*inputs), rtol=1e-4, atol=1e-4)
    tiles = [t.name for t in compiled.program.tensors if "_causal_tile" in t.name]
    assert len(tiles) == 2


class _HeadsInRows(torch.nn.Module):
    """A decode step as transformers writes it: the query's heads split off its hidden
    dim ([B, 1, H, D] viewed, then transposed), K/V given [B, S, H, D] and transposed
    too, the output's heads merged back: the kernel reads and writes them in place."""

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, heads, dim = x.shape[0], k.shape[2], 16
        q = x.view(b, 1, 2 * heads, dim).transpose(1, 2)
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True)
        return out.transpose(1, 2).reshape(b, 1, 2 * heads * dim)


def test_heads_stored_after_the_sequence_match_torch() -> None:
    from compiler import compile_graph, export_model

    torch.manual_seed(7)
    inputs = (torch.randn(2, 1, 4 * 16), torch.randn(2, 300, 2, 16), torch.randn(2, 300, 2, 16))
    compiled = compile_graph(export_model(_HeadsInRows(), inputs), config("tpu-v4"))
    (out,), _ = compiled.run(*inputs)
    torch.testing.assert_close(out, _HeadsInRows()(*inputs), rtol=1e-4, atol=1e-4)
    assert "4 (batch, kv head) items of 2 query rows" in _choice(compiled)


class _QuantizedCache(torch.nn.Module):
    """A decode step over an int8/fp8 cache, dequantized right before the attention
    (as serving.layers writes it; the compiler reads the cache as stored)."""

    def forward(self, q, k, v, k_scale, v_scale):
        from serving.layers import dequantize_kv

        return torch.nn.functional.scaled_dot_product_attention(
            q, dequantize_kv((k, k_scale)), dequantize_kv((v, v_scale)), enable_gqa=True)


@pytest.mark.parametrize("cache", [torch.int8, torch.float8_e4m3fn])
@pytest.mark.parametrize("preset, rows", [("tiny", 1), ("tpu-v4", 2), ("tpu-v4", 1)])
def test_quantized_cache_decode_matches_torch_reading_one_byte(cache: torch.dtype,
                                                               preset: str, rows: int) -> None:
    """Batch 2, 4 query heads over 2 K/V heads (``rows`` query rows each: 2 or 4 rows an
    item), 256 cached tokens: torch's numbers, and the cache read at one byte an element
    plus a bf16 scale per token, head, K and V (256 keys: each scale run a whole number
    of the presets' 16- and 32-byte DRAM access granules, nothing rounded up)."""
    from compiler import compile_graph, export_model
    from serving.layers import quantize_kv

    torch.manual_seed(8)
    batch, kv_heads, keys, dim = 2, 2, 256, 32
    q = torch.randn(batch, 4, rows, dim, dtype=torch.bfloat16)
    k, k_scale = quantize_kv(torch.randn(batch, kv_heads, keys, dim, dtype=torch.bfloat16), cache)
    v, v_scale = quantize_kv(torch.randn(batch, kv_heads, keys, dim, dtype=torch.bfloat16), cache)
    inputs = (q, k, v, k_scale, v_scale)
    compiled = compile_graph(export_model(_QuantizedCache(), inputs), config(preset))
    (out,), result = compiled.run(*inputs)
    torch.testing.assert_close(out, _QuantizedCache()(*inputs), rtol=1.6e-2, atol=1e-2)
    assert f"items of {2 * rows} query rows" in _choice(compiled)
    cache_bytes = 2 * batch * kv_heads * keys * (dim + 2)
    assert result.dram_bytes_read == cache_bytes + q.nbytes
    assert result.dram_bytes_written == out.nbytes
