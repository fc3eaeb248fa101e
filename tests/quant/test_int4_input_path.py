"""int4 weights dequantized in the arrays' input path (issue 30): the ``matmul ... int4``
op's weights against torch's own packing and the dequantization formula, its timing on
hand-computed tiles, its text form and verifier errors, and the compiled int4 matmul:
half a byte a weight, no vector work on the weights, numbers as torch's CPU kernel."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

import archsim
import torch_bridge
from torch_bridge.runtime import use_config
from archsim.config import load_config
from archsim.functional_steps import dequantized
from archsim.matrix import MatrixEngine
from compiler import CompileOptions
from compiler import compile as compile_module
from compiler.cost import b_runs
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.ir.ops import Dequant, Load, MatMul, VectorMatMul
from compiler.ir.text import parse_program, print_program
from compiler.ir.verify import find_problems
from compiler.lowerings.int4 import cpu_layout
from compiler.views import flat_boxes
from serving.quant import Int4WeightOnlyLinear

aten = torch.ops.aten
TPU_V4 = load_config("tpu-v4")


NIBBLES = "halves" if cpu_layout().halves else "pairs"


def _packed(n: int, k: int, group: int, seed: int = 0):
    """Codes [N, K], torch's CPU packing of them viewed as [blocks, K, h], and
    scales_and_zeros [K/group, N, 2] (f32)."""
    torch.manual_seed(seed)
    codes = torch.randint(0, 16, (n, k), dtype=torch.int32)
    packed = aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    block = cpu_layout().block_rows
    blocks = packed.view(n // block, k, block // 2)
    return codes, blocks, torch.randn(k // group, n, 2)


def _reference(codes: torch.Tensor, sz: torch.Tensor, group: int) -> np.ndarray:
    """``(code - 8) * scale + zero`` per group, as ``[K, N]``, in f32."""
    scale = sz[..., 0].repeat_interleave(group, 0)  # [K, N]
    zero = sz[..., 1].repeat_interleave(group, 0)
    return ((codes.T.float() - 8) * scale + zero).numpy()


def test_the_input_path_reads_torchs_packing_as_torch_dequantizes_it() -> None:
    codes, blocks, sz = _packed(128, 96, 32)
    got = dequantized(blocks.numpy(), sz.numpy(), Dequant(32, 0, NIBBLES),
                       DType.f32)
    np.testing.assert_array_equal(got, _reference(codes, sz, 32))


def test_a_k_step_inside_a_group_takes_its_groups_rows_from_the_phase() -> None:
    # k rows 48..80 of groups of 32: rows 48..63 use group 1, 64..79 group 2; the op
    # gets scale rows 1..2 and phase 16
    codes, blocks, sz = _packed(64, 128, 32, seed=1)
    got = dequantized(blocks[:, 48:80].numpy(), sz[1:3].numpy(),
                       Dequant(32, 16, NIBBLES), DType.f32)
    np.testing.assert_array_equal(got, _reference(codes, sz, 32)[48:80])


@pytest.mark.parametrize("halves", [True, False])
def test_the_two_nibble_layouts_put_each_column_where_torch_puts_its_row(halves) -> None:
    # one block of 4 columns, one k row: bytes 0x21 and 0x43 hold codes 1, 2, 3, 4
    packed = np.array([[[0x21, 0x43]]], dtype=np.uint8)
    ones = np.tile(np.array([1.0, 8.0], dtype=np.float32), (1, 4, 1))  # w = code
    got = dequantized(packed, ones, Dequant(1, 0, "halves" if halves else "pairs"),
                      DType.f32)
    # halves: low nibbles are columns 0, 1, high ones 2, 3; pairs: byte c holds 2c, 2c+1
    expected = [1, 3, 2, 4] if halves else [1, 2, 3, 4]
    np.testing.assert_array_equal(got, [[e - 8 + 8 for e in expected]])


def test_weights_are_rounded_to_the_arrays_input_dtype() -> None:
    packed = np.array([[[0x99]]], dtype=np.uint8)  # codes 9 and 9
    scales = np.array([[[1 + 2.0 ** -10, 0.0], [1.0, 2.0 ** -12]]], dtype=np.float32)
    got = dequantized(packed, scales, Dequant(1, 0, "halves"), DType.bf16)
    np.testing.assert_array_equal(got, [[1.0, 1.0]])  # both round to 1 in bf16's 8 bits


def _op(n: int = 128, k: int = 128, m: int = 1) -> MatMul:
    h = 32
    return MatMul(SramRef("sram0", 0, (m, k), DType.bf16),
                  SramRef("sram0", 65536, (n // (2 * h), k, h), DType.u8),
                  SramRef("sram0", 131072, (m, n), DType.f32), False,
                  SramRef("sram0", 196608, (k // 128, n, 2), DType.bf16),
                  Dequant(128, 0, "halves"))


def test_an_int4_tile_costs_the_array_what_its_unpacked_tile_costs() -> None:
    # tpu-v4: 128x128 ws, double-buffered weights: 1 fold x max(T=1, R=128) + 2R + C - 2
    engine = MatrixEngine("core0.mxu0", TPU_V4.core.matrix)
    timing = engine.timing(_op())
    assert timing.fixed_cycles == 128 + 2 * 128 + 128 - 2
    assert timing.flops == 2 * 128 * 128
    # 256 columns are two folds (one more R: 2 x 128 + 382)
    assert engine.timing(_op(n=256)).fixed_cycles == 2 * 128 + 382


def test_the_op_prints_and_parses_back() -> None:
    text = ("program p target=tpu-v4\n"
            "0: core0.mxu0 matmul sram0[0] bf16[1,128], sram0[0x10000] u8[2,128,32] -> "
            "sram0[0x20000] f32[1,128] dequant sram0[0x30000] bf16[2,128,2] group=64 "
            "phase=0 pairs\n")
    program = parse_program(text)
    op = program.commands[0].op
    assert op.dequant == Dequant(64, 0, "pairs") and op.columns == 128
    assert parse_program(print_program(program)).commands[0].op == op
    assert find_problems(program, TPU_V4) == []


@pytest.mark.parametrize("tail,message", [
    ("sram0[0x30000] bf16[1,128,2] group=64 phase=0 halves",
     "field scales: bf16[1,128,2] should be float [2,128,1] or [2,128,2] (a scale, and a "
     "zero, per group of 64 k rows and column)"),
    ("sram0[0x30000] bf16[2,128,2] group=64 phase=64 halves",
     "field dequant: group 64 and phase 64 need group >= 1 and 0 <= phase < group"),
])
def test_bad_int4_operands_are_named(tail: str, message: str) -> None:
    text = ("program p target=tpu-v4\n"
            "0: core0.mxu0 matmul sram0[0] bf16[1,128], sram0[0x10000] u8[2,128,32] -> "
            f"sram0[0x20000] f32[1,128] dequant {tail}\n")
    assert find_problems(parse_program(text), TPU_V4) == [
        f"command 0 (core0.mxu0 matmul): {message}"]


def test_runs_of_a_packed_tile_and_boxes_of_a_storage_run() -> None:
    assert b_runs(512, 4096, 512, 64) == 8 + 1  # 8 blocks, 8 stored rows each: 8, and scales
    # K = 3584: a stored row holds 56 k rows of a block; 512-row steps start mid-row
    assert b_runs(512, 3584, 128, 64) == 2 * 3 + 1
    assert b_runs(4096, 4096, 512, 64) == 1 + 1  # all of k: the blocks adjoin
    assert b_runs(128, 4096, 512, 1) == 1  # unpacked weights: one box
    assert flat_boxes((4, 10), 5, 27) == [((0, 1), (5, 10)), ((1, 2), (0, 10)),
                                         ((2, 3), (0, 7))]
    assert flat_boxes((4, 10), 10, 30) == [((1, 3), (0, 10))]


def test_a_compiled_int4_matmul_reads_half_a_byte_a_weight_and_unpacks_none_in_sram() -> None:
    n, k = 4096, 4096
    module = Int4WeightOnlyLinear.of(torch.nn.Linear(k, n, bias=False), torch.bfloat16, 128)
    compile_module.clear_cache()
    exported = torch.export.export(module, (torch.randn(1, k, dtype=torch.bfloat16),))
    compiled = compile_module.compile_graph(exported, TPU_V4)
    commands = compiled.program.commands
    weight = compiled.input_names[0]
    assert sum(c.op.dst.nbytes for c in commands if isinstance(c.op, Load)
               and c.op.src.tensor == weight) == n * k // 2
    matmuls = [c.op for c in commands if isinstance(c.op, (MatMul, VectorMatMul))]
    assert matmuls and all(op.dequant is not None for op in matmuls)
    assert sum(op.a.shape[-1] * op.columns for op in matmuls) == n * k
    # the vector units' share multiplies the packed bytes as they are (VectorMatMul,
    # unpacking each in registers); besides it they only round the f32 results to bf16:
    # no weight is unpacked into the scratchpad
    assert any(isinstance(op, VectorMatMul) for op in matmuls)
    vector = [c for c in commands if c.engine.endswith("vpu")
              and not isinstance(c.op, VectorMatMul)]
    assert sum(c.op.dst.nbytes for c in vector) <= 4 * n


def test_int4_decode_matmul_is_bound_by_the_arrays_weight_loads() -> None:
    # M = 1 on tpu-v4's 8 arrays: each 128x128 tile takes 128 cycles to shift in,
    # whatever its dtype, so 4096 x 4096 weights take at least 4096^2 / (8 x 128)
    # cycles on the arrays alone; the packed bytes alone would take a quarter of bf16's
    # DRAM time. With the vector units' share (1,024 lanes a core, 3 operations a
    # weight: unpack, widen, multiply-add) the two cores take 2 x (512 + 1024 / 3)
    # weights a cycle at most
    torch.manual_seed(0)
    module = Int4WeightOnlyLinear.of(torch.nn.Linear(4096, 4096, bias=False),
                                     torch.bfloat16, 128)
    x = torch.randn(1, 4096, dtype=torch.bfloat16)
    alone = archsim.estimate(module, x, config="tpu-v4",
                             options=CompileOptions(vector_share=False))
    floor = 4096 * 4096 // (8 * 128)
    assert floor <= alone.total_cycles <= 1.25 * floor
    shared = archsim.estimate(module, x, config="tpu-v4")
    both = 4096 * 4096 / (2 * (512 + 1024 / 3))
    assert both <= shared.total_cycles <= 0.9 * floor


def test_a_k_step_starting_inside_a_group_matches_cpu() -> None:
    # an 8 KiB scratchpad takes k steps shorter than a 256-row group: their scales
    # start mid-group (phase > 0)
    tiny = load_config("tiny")
    small = replace(tiny, core=replace(tiny.core, scratchpad=replace(
        tiny.core.scratchpad, size_bytes=8192)))
    n, k, group = 64, 512, 256
    codes, blocks, sz = _packed(n, k, group, seed=5)
    packed = aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    x = torch.randn(2, k)

    class Mm(torch.nn.Module):
        def forward(self, x, w, s):
            return aten._weight_int4pack_mm_for_cpu(x, w, group, s)

    compile_module.clear_cache()
    compiled = compile_module.compile_graph(torch.export.export(Mm(), (x, packed, sz)),
                                            small)
    phases = {c.op.dequant.phase for c in compiled.program.commands
              if isinstance(c.op, MatMul)}
    assert phases - {0}, phases
    with use_config(small), torch_bridge.profile() as prof:
        out = aten._weight_int4pack_mm_for_cpu(x.to("npu"), packed.to("npu"), group,
                                               sz.to("npu"))
    assert prof.result.cycles("host") == 0
    torch.testing.assert_close(out.cpu(), aten._weight_int4pack_mm_for_cpu(x, packed, group, sz),
                               rtol=1e-5, atol=1e-4)


def test_the_summary_names_int4_weights_widened_on_the_way_in() -> None:
    from reports.data import matrix_precision

    assert matrix_precision(TPU_V4, [(DType.bf16, DType.u8)]).endswith(
        "; int4 weights (two a byte, scaled per group) widened to bf16 on the way in")


def test_the_summary_names_two_weight_formats_of_one_activation_dtype() -> None:
    # int8 and int4 weights against bf16 activations in one program: the pairs share
    # their first dtype, and DTypes do not order (this raised TypeError in sorted())
    from reports.data import matrix_precision

    text = matrix_precision(TPU_V4, [(DType.bf16, DType.u8), (DType.bf16, DType.i8)])
    assert text.endswith("; i8 weights widened to bf16 on the way in; int4 weights (two a "
                         "byte, scaled per group) widened to bf16 on the way in")


def test_a_packed_tile_reads_a_run_per_block_or_one_for_all_of_k() -> None:
    from compiler.kernels.matmul_dequant import block_runs

    # blocks 2..3 of [blocks, k=8, 32 bytes]: block b's rows 2..6 are bytes
    # (8b + 2) * 32 .. (8b + 6) * 32
    assert block_runs((2, 4), (2, 6), 8, 32) == [(576, 704), (832, 960)]
    assert block_runs((2, 4), (0, 8), 8, 32) == [(512, 1024)]  # all of k: one run
    assert block_runs((0, 1), (0, 8), 8, 32) == [(0, 256)]


@pytest.mark.parametrize("kt,group,groups", [
    (2, 128, 2),  # two rows can straddle a group boundary
    (128, 128, 2), (129, 128, 2), (130, 128, 3),  # mid-group starts meet one more
    (1, 128, 1), (512, 128, 4),  # capped at the tensor's 4 groups
])
def test_a_k_step_holds_the_scales_of_every_group_it_can_meet(kt, group, groups) -> None:
    from compiler.graph import Dequantization, Value
    from compiler.kernels.matmul_dequant import DequantWeights

    weights = DequantWeights(Value((8, 4 * group, 32), DType.u8, "w"),
                             Value((4, 512, 2), DType.bf16, "s"),
                             Dequantization(group, "halves", 64))
    assert weights.max_groups(kt) == groups
    assert weights.item_bytes == 0.5 + 2 * 2 / group  # half a byte, a scale and a zero


def test_every_load_of_the_int4_matmul_is_its_own_and_on_a_load_engine() -> None:
    module = Int4WeightOnlyLinear.of(torch.nn.Linear(256, 256, bias=False), torch.bfloat16,
                                     128)
    compile_module.clear_cache()
    exported = torch.export.export(module, (torch.randn(2, 256, dtype=torch.bfloat16),))
    compiled = compile_module.compile_graph(exported, TPU_V4)
    weight, scales = compiled.input_names[:2]
    loads = [c for c in compiled.program.commands if isinstance(c.op, Load)
             and c.op.src.tensor in (weight, scales)]
    assert {c.op.src.tensor for c in loads} == {weight, scales}
    # the matmul's own commands, on the load engines (tpu-v4 keeps dma3 for stores)
    assert {c.source for c in loads} == {"_weight_int4pack_mm_for_cpu"}
    assert {c.engine.split(".")[1] for c in loads} <= {"dma0", "dma1", "dma2"}


def _one_matmul(a: str, b: str, tail: str, out: str = "f32[1,128]") -> str:
    return ("program p target=tpu-v4\n"
            f"0: core0.mxu0 matmul sram0[0] {a}, sram0[0x10000] {b} -> sram0[0x20000] "
            f"{out} dequant {tail}\n")


@pytest.mark.parametrize("a,b,tail,message", [
    ("i8[1,128]", "u8[2,128,32]", "sram0[0x30000] bf16[1,128,2] group=128 phase=0 halves",
     "field a: dequantized weights are widened for float a, got i8"),
    ("bf16[1,128]", "i8[2,128,32]", "sram0[0x30000] bf16[1,128,2] group=128 phase=0 halves",
     "field b: packed int4 weights are u8 bytes (two codes each), got i8"),
    ("bf16[1,128]", "bf16[128,128]", "sram0[0x30000] bf16[1,128,1] group=128 phase=0 bytes",
     "field b: dequantized weights are one-byte values (i8, e4m3, e5m2), got bf16"),
    ("bf16[1,128]", "i8[128,128]", "sram0[0x30000] i8[1,128,2] group=128 phase=0 bytes",
     "field scales: i8[1,128,2] should be float [1,128,1] or [1,128,2] (a scale, and a "
     "zero, per group of 128 k rows and column)"),
    ("bf16[1,128]", "i8[128,128]", "sram0[0x30000] f32[1,128,3] group=128 phase=0 bytes",
     "field scales: f32[1,128,3] should be float [1,128,1] or [1,128,2] (a scale, and a "
     "zero, per group of 128 k rows and column)"),
])
def test_dequantized_operands_of_the_wrong_kind_are_named(a, b, tail, message) -> None:
    problems = find_problems(parse_program(_one_matmul(a, b, tail)), TPU_V4)
    assert f"command 0 (core0.mxu0 matmul): {message}" in problems


@pytest.mark.parametrize("a,b,tail", [
    # one-byte weights with one scale a column (no zero), a group of 1 k row each
    ("bf16[1,128]", "e4m3[128,128]", "sram0[0x30000] f32[128,128,1] group=1 phase=0 bytes"),
    # 65 k rows from the start of 64-row groups meet 2 groups
    ("bf16[1,65]", "i8[65,128]", "sram0[0x30000] bf16[2,128,2] group=64 phase=0 bytes"),
])
def test_valid_dequantized_matmuls_pass(a, b, tail) -> None:
    assert find_problems(parse_program(_one_matmul(a, b, tail)), TPU_V4) == []


def test_a_dequantized_matmuls_rows_are_as_leading_dims_and_its_k_the_last() -> None:
    # a [1, 2, 256]: 2 rows of k = 256, two 128-row groups
    text = _one_matmul("bf16[1,2,256]", "u8[2,256,32]",
                       "sram0[0x30000] bf16[2,128,2] group=128 phase=0 pairs", "f32[2,128]")
    assert find_problems(parse_program(text), TPU_V4) == []


def test_a_dequantizing_op_needs_its_scales_and_its_layout_named() -> None:
    from dataclasses import replace as changed

    packed = parse_program(_one_matmul(
        "bf16[1,128]", "u8[2,128,32]", "sram0[0x30000] bf16[1,128,2] group=128 phase=0 halves"))
    values = parse_program(_one_matmul(
        "bf16[1,128]", "i8[128,128]", "sram0[0x30000] bf16[1,128,2] group=128 phase=0 bytes"))
    messages = [find_problems(changed(program, commands=(changed(
        program.commands[0], op=changed(program.commands[0].op, dequant=dequant)),)), TPU_V4)
        for program, dequant in ((values, None), (packed, Dequant(128, 0, "quads")))]
    assert messages[0] == [
        "command 0 (core0.mxu0 matmul): field scales: weights dequantized on the way in need "
        "both scales and how (dequant SCALES group=G phase=P halves|pairs|bytes)"]
    assert ("command 0 (core0.mxu0 matmul): field dequant: nibbles 'quads' is not one of "
            "halves, pairs") in messages[1]
