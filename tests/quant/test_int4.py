"""Weight-only int4 (issue 30): torch's CPU int4 pack and mm ops on the npu and through
the compiler against the same ops on CPU, the packed weight read at half a byte, and
``archsim llm --weights int4 --group-size N`` (memory at packed size, refusals)."""

from __future__ import annotations

import copy
import json

import pytest
import torch

import torch_bridge
from archsim.cli import main
from archsim.config import load_config
from compiler import compile as compile_module
from compiler.ir.access import sram_operands
from compiler.ir.dtypes import DType
from compiler.ir.ops import Binary, Cast, Dequantize, Load, Unary
from serving.plan import Parallelism, Request, check, memory_per_chip
from serving.quant import Int4WeightOnlyLinear, Int8WeightOnlyLinear
from serving.spec import spec_from_config

aten = torch.ops.aten
TINY = load_config("tiny")


def _int4(n: int, k: int, group: int, dtype: torch.dtype, seed: int = 0):
    torch.manual_seed(seed)
    codes = torch.randint(0, 16, (n, k), dtype=torch.int32)
    scales_and_zeros = torch.randn(k // group, n, 2).to(dtype)
    return codes, aten._convert_weight_to_int4pack_for_cpu(codes, 1), scales_and_zeros


@pytest.mark.parametrize("n", [128, 80])  # 80: a full block of 64 rows and a partial one
def test_packing_on_the_npu_gives_the_cpu_bytes(n: int) -> None:
    codes, packed, _ = _int4(n, 64, 32, torch.bfloat16)
    on_npu = aten._convert_weight_to_int4pack_for_cpu(codes.to("npu"), 1)
    assert on_npu.dtype == torch.uint8 and on_npu.shape == (n, 32)
    assert torch.equal(on_npu.cpu(), packed)


@pytest.mark.parametrize("n,k,group", [(128, 256, 64), (80, 64, 32), (64, 256, 128)])
def test_int4_mm_on_npu_matches_cpu(n: int, k: int, group: int) -> None:
    codes, packed, sz = _int4(n, k, group, torch.float32, seed=n + k)
    x = torch.randn(3, k)
    with torch_bridge.profile() as prof:
        out = aten._weight_int4pack_mm_for_cpu(x.to("npu"), packed.to("npu"), group,
                                               sz.to("npu"))
    expected = aten._weight_int4pack_mm_for_cpu(x, packed, group, sz)
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-4)  # f32 sum order
    assert prof.result.cycles("host") == 0


def test_int4_mm_in_bf16_is_within_the_rounding_of_its_weights() -> None:
    # torch dequantizes to f32; the npu rounds each weight to bf16 for the arrays (a
    # relative error of at most 2**-9) and rounds the f32 sum once, like torch: so
    # |npu - cpu| <= 2**-9 * (|x| @ |w|.T) + one bf16 ulp of the result
    n, k, group = 64, 128, 32
    codes, packed, sz = _int4(n, k, group, torch.bfloat16, seed=3)
    x = torch.randn(4, k).to(torch.bfloat16)
    out = aten._weight_int4pack_mm_for_cpu(x.to("npu"), packed.to("npu"), group,
                                           sz.to("npu")).cpu().float()
    expected = aten._weight_int4pack_mm_for_cpu(x, packed, group, sz).float()
    scale = sz[..., 0].float().repeat_interleave(group, 0).T
    zero = sz[..., 1].float().repeat_interleave(group, 0).T
    weight = (codes.float() - 8) * scale + zero
    bound = 2.0 ** -9 * (x.float().abs() @ weight.abs().T) + 2.0 ** -7 * expected.abs()
    assert bool(((out - expected).abs() <= bound).all())


def _weight_load_bytes(module: torch.nn.Module, k: int) -> int:
    compile_module.clear_cache()
    exported = torch.export.export(module, (torch.randn(1, k, dtype=torch.bfloat16),))
    compiled = compile_module.compile_graph(exported, TINY)
    weight = compiled.input_names[0]  # the packed weight: the module's first buffer
    return sum(c.op.dst.nbytes for c in compiled.program.commands
               if isinstance(c.op, Load) and c.op.src.tensor == weight)


def test_an_int4_weight_is_read_at_half_the_bytes_of_int8() -> None:
    n, k = 32, 64
    linear = torch.nn.Linear(k, n, bias=False)
    int8 = Int8WeightOnlyLinear.of(linear, torch.bfloat16)
    int4 = Int4WeightOnlyLinear.of(linear, torch.bfloat16, 32)
    assert _weight_load_bytes(int8, k) == n * k  # one byte a weight, read once
    assert _weight_load_bytes(int4, k) == n * k // 2  # two weights a byte, read once


def test_int4_linear_quantizes_each_group_onto_its_range_and_runs_compiled() -> None:
    torch.manual_seed(1)
    linear = torch.nn.Linear(64, 16).to(torch.bfloat16)
    layer = Int4WeightOnlyLinear.of(linear, torch.bfloat16, 32)
    x = torch.randn(2, 5, 64, dtype=torch.bfloat16)
    cpu = layer(x)
    # asymmetric: each group's min and max are codes 0 and 15, so the weight is within
    # half a step (plus the bf16 rounding of scale and zero) of the original
    step = (linear.weight.float().reshape(16, 2, 32).amax(-1)
            - linear.weight.float().reshape(16, 2, 32).amin(-1)) / 15
    dense = torch.ops.aten._weight_int4pack_mm_for_cpu(
        torch.eye(64, dtype=torch.bfloat16), layer.weight, 32, layer.scales_and_zeros).T
    error = (dense.float() - linear.weight.float()).reshape(16, 2, 32).abs().amax(-1)
    assert bool((error <= 0.5 * step + 2 ** -7 * linear.weight.abs().max()).all())
    on_npu = copy.deepcopy(layer).to("npu")
    compiled = torch.compile(on_npu, backend="archsim")(x.to("npu")).cpu()
    assert torch.equal(compiled, on_npu(x.to("npu")).cpu())
    assert (compiled.float() - cpu.float()).abs().max() <= 2 ** -6 * cpu.abs().max()


SMALL = spec_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2,
                          "intermediate_size": 128, "vocab_size": 100,
                          "max_position_embeddings": 64}, "small")
MATMUL = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128  # a layer's: 36,864
NORMS = 2 * 64


def test_memory_counts_half_a_byte_a_weight_and_a_scale_and_zero_a_group() -> None:
    request = Request(batch=1, prefill=8, decode=2, weights="int4-g32")
    par = Parallelism()
    shard = check(SMALL, request, par)
    layer = MATMUL // 2 + MATMUL // 32 * 2 * 2 + NORMS * 2  # bf16 scale + zero per group
    head = 100 * 64 // 2 + 100 * 64 // 32 * 2 * 2
    embed, final_norm = 100 * 64 * 2, 64 * 2
    assert memory_per_chip(SMALL, request, par, shard).weights == \
        2 * layer + embed + head + final_norm
    assert request.precision.startswith("int4 (a bf16 scale and zero per 32 inputs) weights")


@pytest.mark.parametrize("argv,message", [
    (["--weights", "int8", "--group-size", "64"],
     "--group-size applies to --weights int4 (a scale and zero point per group of inputs), "
     "got --weights int8"),
    (["--weights", "int4", "--group-size", "48"],
     "--group-size 48 is not one of 32, 64, 128, 256"),
    (["--weights", "int4", "--group-size", "0"],
     "--group-size 0 is not one of 32, 64, 128, 256"),
    # said 'needs quantized --weights (int8, int4 or fp8)', though int8 and fp8 refuse it
    (["--group-size", "64"], "--group-size applies to --weights int4 (a scale and zero point "
                             "per group of inputs), got no --weights"),
    (["--weights", "int4", "--group-size", "256", "--tp", "4"],
     "llama-2-7b: --group-size 256 does not divide the intermediate size 2752 (the input "
     "features of a matmul per chip)"),
    (["--weights", "int4", "--activations", "int8"],
     "--activations int8 applies to --weights int8, got --weights int4"),
    # said 'needs quantized --weights (int8, int4 or fp8)', though int4 refuses it
    (["--activations", "int8"], "--activations int8 applies to --weights int8, got no "
                                "--weights"),
    (["--activations", "fp8"], "--activations fp8 applies to --weights fp8, got no --weights"),
    (["--weights", "int8", "--activations", "fp8"],
     "--activations fp8 applies to --weights fp8, got --weights int8"),
])
def test_impossible_weight_options_are_refused_in_one_line(argv, message, capsys) -> None:
    assert main(["llm", "llama-2-7b", *argv]) != 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err == f"archsim: error: {message}"


def test_llm_cli_runs_int4_and_states_its_precision(tmp_path, capsys) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 100, "max_position_embeddings": 64}))
    out = tmp_path / "llm.json"
    assert main(["llm", str(config), "--config", "tiny", "--prefill", "8", "--decode", "2",
                 "--weights", "int4", "--group-size", "32", "--json", str(out)]) == 0
    assert "int4 (a bf16 scale and zero per 32 inputs) weights, bf16 activations" in \
        capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["weights"] == "int4-g32"


def test_serve_sizes_its_cache_with_int4_weights() -> None:
    from serving.traffic import ServeOptions, Server

    spec = spec_from_config({"model_type": "llama", "hidden_size": 64,
                             "num_hidden_layers": 2, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "intermediate_size": 128,
                             "vocab_size": 100, "max_position_embeddings": 512}, "small")
    server = Server.build(spec, TINY, options=ServeOptions(
        max_num_seqs=8, max_num_batched_tokens=256, weights="int4-g32"))
    request = Request(1, 256, 0, "bf16", "bf16", "int4-g32")  # as cache_budget counts
    par = Parallelism()
    assert server.budget.weights_bytes == \
        memory_per_chip(spec, request, par, check(spec, request, par)).weights
    assert server.timing.weights == "int4-g32"  # its iterations timed with int4 weights


def test_archsim_run_file_runs_an_int4_model_against_cpu(tmp_path, capsys) -> None:
    path = tmp_path / "int4_model.py"
    path.write_text("import torch\n"
                    "from serving.quant import Int4WeightOnlyLinear\n"
                    "torch.manual_seed(0)\n"
                    "model = Int4WeightOnlyLinear.of(torch.nn.Linear(128, 64).to(\n"
                    "    torch.bfloat16), torch.bfloat16, 32)\n"
                    "example_inputs = (torch.randn(4, 128, dtype=torch.bfloat16),)\n")
    assert main(["run", str(path), "--config", "tiny"]) == 0  # numbers checked vs CPU
    assert "numerics: max |npu - torch cpu|" in capsys.readouterr().err


def test_the_llm_report_says_how_int4_runs_today() -> None:
    from serving.run import serve
    from serving.spec import spec_from_config

    spec = spec_from_config({"model_type": "llama", "hidden_size": 64,
                             "num_hidden_layers": 1, "num_attention_heads": 2,
                             "intermediate_size": 128, "vocab_size": 64,
                             "max_position_embeddings": 64}, "one-layer")
    notes = serve(spec, load_config("tiny"), Request(1, 8, 1, weights="int4-g32"),
                  Parallelism()).notes()
    assert ("int4 weights are read at half a byte and dequantized per group in the "
            "arrays' input path; a weight tile still takes as many cycles to shift into an "
            "array as a 16-bit one, so where that binds a decode GEMV the vector units "
            "multiply a share of its columns (unpacked, widened and multiply-added in "
            "place), and small-batch decode cannot go below weights / (the arrays' and "
            "vector units' intake) cycles, whatever the packed HBM roofline says") in notes


class _PackedHead(torch.nn.Module):
    """``_weight_int4pack_mm_for_cpu`` on packed buffers, as a quantized head is."""

    def __init__(self, n: int, k: int, group: int) -> None:
        super().__init__()
        _, packed, sz = _int4(n, k, group, torch.float32, seed=n)
        self.register_buffer("packed", packed)
        self.register_buffer("sz", sz)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return aten._weight_int4pack_mm_for_cpu(x, self.packed, self.group, self.sz)


def test_a_partial_last_block_leaves_the_whole_blocks_to_the_arrays() -> None:
    # 4,000 rows (a 32,000 vocabulary over 8 chips): 62 blocks of 64 and 32 rows. The
    # blocks are read as stored by the arrays, and the 32 rows too, as one block of 32
    # whose bytes hold its rows in pairs: a second matmul over the whole K, a quarter
    # more on tiny (one array a core), where all of it unpacked on the vector unit took
    # 31x on tpu-v4
    k, group = 256, 64
    x = torch.randn(1, k)
    cycles = {}
    for n in (3968, 4000):
        head = _PackedHead(n, k, group)
        compile_module.clear_cache()
        compiled = compile_module.compile_graph(torch.export.export(head, (x,)), TINY)
        (out,), result = compiled.run(x)
        torch.testing.assert_close(out, head(x), rtol=1e-4, atol=1e-3)  # f32 sum order
        cycles[n] = result.total_cycles
        # the packed bytes are unpacked by the arrays only: no vector arithmetic on them
        vector = [c.op for c in compiled.program.commands
                  if isinstance(c.op, (Binary, Unary, Cast, Dequantize))]
        assert not [op for op in vector if any(ref.dtype is DType.u8 for _, ref in
                                               sram_operands(op))]
        assert any(getattr(c.op, "dequant", None) is not None and c.op.dequant.nibbles == "pairs"
                   for c in compiled.program.commands) == (n == 4000)
    assert cycles[4000] < 1.3 * cycles[3968]


def test_a_head_smaller_than_one_block_runs_on_the_arrays() -> None:
    # 16 rows: fewer than a block in every CPU layout (32 or 64), so all of it is the
    # partial block, read by the arrays in pairs (it was unpacked on the vector unit:
    # 12.8k cycles on tiny, 3.1k as one block)
    k, group = 256, 64
    x = torch.randn(1, k)
    head = _PackedHead(16, k, group)
    compile_module.clear_cache()
    compiled = compile_module.compile_graph(torch.export.export(head, (x,)), TINY)
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, head(x), rtol=1e-4, atol=1e-3)  # f32 sum order
    assert [c.op.dequant.nibbles for c in compiled.program.commands
            if getattr(c.op, "dequant", None) is not None] and all(
        c.op.dequant.nibbles == "pairs" for c in compiled.program.commands
        if getattr(c.op, "dequant", None) is not None)
    assert not [c.op for c in compiled.program.commands
                if isinstance(c.op, (Binary, Unary, Cast, Dequantize))
                and any(ref.dtype is DType.u8 for _, ref in sram_operands(c.op))]
