"""What the matmul kernel (compiler/kernels/matmul.py) does that its mutation survivors
showed no test pinned (issue 34; BENCHMARKS.md, "Mutation score"): the fused epilogue's
one pass, every command's source, when a matmul may be compiled in part, the command
cap's count, the columns of a last tile that needs fewer arrays, how far loads run ahead,
B's bytes in the tiling, the epilogue's buffers of a batched tile, size-1 batch dims of
an operand and a transposed weight loaded in pieces.

`tiny`: 2 cores, one 4x4 f32 array, 2 DMA engines (the last kept for stores), 64 KiB
scratchpad, allocations 64 B aligned. Numbers are compared with torch on the CPU.
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from torch import nn

import compiler
import compiler.kernels.matmul as matmul_kernel
from archsim.config import load_config
from archsim.errors import LoweringError, ProgramTooLargeError
from compiler import compile_graph, compile_op
from compiler.compile import clear_cache
from compiler.cost import choose_matmul_tiling
from compiler.ir import DType
from compiler.ir.ops import Binary, BinaryKind, Cast, Load, MatMul, Store, Unary, UnaryKind
from compiler.ir.operands import DramRef, Slice
from compiler.kernels.matmul import _row_parts, _transposed_strides
from compiler.options import CompileOptions

aten = torch.ops.aten
TINY = load_config("tiny")
TPU_V3 = load_config("tpu-v3")  # one core, two 128x128 bf16 arrays
TPU_V4 = load_config("tpu-v4")  # two cores, four 128x128 bf16 arrays each


def _tiling(config, m: int, k: int, n: int, dtype: DType = DType.f32):
    """The cost model's tiling of a plain [m, k] @ [k, n]: its epilogue only casts the
    f32 accumulator to a narrower ``dtype`` (an output element a tile)."""
    return choose_matmul_tiling(config, 1, m, k, n, dtype, dtype, config.cores,
                                config.core.matrix.arrays, 2,
                                0 if dtype is DType.f32 else dtype.itemsize,
                                config.core.scratchpad.size_bytes)


def _compiled(module: nn.Module, *args: torch.Tensor, config=TINY, options=None):
    """``module`` exported and compiled, run functionally: outputs compared with torch."""
    program = torch.export.export(module.eval(), args).run_decompositions()
    compiled = compile_graph(program, config, options)
    (out,), _ = compiled.run(*args)
    expected = module(*args)
    tol = {"rtol": 2e-2, "atol": 2e-2} if expected.dtype == torch.bfloat16 else \
        {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(out, expected, **tol)
    return compiled


def _meta(module: nn.Module, *shapes: tuple[int, ...], dtype=torch.float32):
    with torch.device("meta"):
        inputs = tuple(torch.empty(s, dtype=dtype) for s in shapes)
    return compiler.export_model(module, inputs)


class _Mm(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


# -- the fused epilogue: one pass over the tile --------------------------------------------

class _BiasRelu(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ b + bias)


class _Relu(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ b)


def test_the_epilogue_after_the_first_op_on_the_accumulator_is_chained() -> None:
    """f32 on tiny: no cast, so each tile's bias add reads the accumulator in the
    scratchpad and starts the pass (not chained); relu takes its result in registers
    (chained)."""
    torch.manual_seed(0)
    compiled = _compiled(_BiasRelu(), torch.randn(8, 8), torch.randn(8, 8), torch.randn(8))
    vector = [c.op for c in compiled.program.commands if c.engine.endswith(".vpu")]
    tiles = sum(isinstance(c.op, MatMul) and not c.op.accumulate
                for c in compiled.program.commands)
    assert [(type(op), op.chained) for op in vector] == [(Binary, False), (Unary, True)] * tiles
    assert {op.kind for op in vector} == {BinaryKind.add, UnaryKind.relu}


def test_after_the_cast_the_first_epilogue_op_takes_the_value_in_registers() -> None:
    """bf16 on tpu-v3: the f32 accumulator is cast to bf16 first (the cast reads the
    scratchpad), so the relu after it is already chained."""
    torch.manual_seed(0)
    a, b = torch.randn(8, 16).bfloat16(), torch.randn(16, 8).bfloat16()
    compiled = _compiled(_Relu(), a, b, config=TPU_V3)
    vector = [c.op for c in compiled.program.commands if c.engine.endswith(".vpu")]
    tiles = sum(isinstance(c.op, MatMul) and not c.op.accumulate
                for c in compiled.program.commands)
    assert [(type(op), op.chained) for op in vector] == [(Cast, False), (Unary, True)] * tiles
    assert {op.kind for op in vector if isinstance(op, Unary)} == {UnaryKind.relu}


# -- sources ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(8, 8, 8), (16, 32, 16)], ids=["plain", "staged-A"])
def test_every_command_of_a_matmul_is_its_kernels(shape) -> None:
    """8x8x8: core DMA loads of A and B, multiplies, the store. 16x32x16: A tiles loaded
    once by the task DMA and copied into both cores (tests/compiler/test_matmul_staging.py)."""
    m, k, n = shape
    program = compile_op(aten.mm.default, (torch.randn(m, k), torch.randn(k, n)), {},
                         TINY).program
    kinds = {type(c.op).__name__ for c in program.commands}
    assert {"Load", "MatMul", "Store"} <= kinds
    if shape == (16, 32, 16):
        assert "Copy" in kinds
    assert {c.source for c in program.commands} == {"mm_default"}  # compile_op's node


# -- compiled in part: when it may be, and its panels -----------------------------------------

def test_a_matmul_of_128_counted_commands_runs_whole_at_a_limit_of_128() -> None:
    """4096x32 @ 32x32 on tiny: 128x32 tiles, 2 k steps of 16, 2 accumulator and 2
    operand sets: 32 tiles, counted as a load and a multiply per tile and k step = 128.
    At a limit of 127 it runs in part: the accumulators alternate per round of 2
    cores and a tile's 2 k steps use both operand sets, so a panel is 2 rounds = 4 tiles,
    8 panels of them."""
    t = _tiling(TINY, 4096, 32, 32)
    assert (t.mt, t.kt, t.nt, t.acc_sets, t.op_sets, t.a_resident, t.a_staged) == \
        (128, 16, 32, 2, 2, False, False)
    exported = _meta(_Mm(), (4096, 32), (32, 32))
    whole = compile_graph(exported, TINY, CompileOptions(partial_matmul_commands=128))
    assert whole.tile_panels is None
    part = compile_graph(exported, TINY, CompileOptions(partial_matmul_commands=127))
    assert (part.tile_panels.total, part.tile_panels.tiles_per_panel) == (8, 4)


def test_a_last_row_block_of_other_rows_runs_whole() -> None:
    """4000x32 @ 32x32: the same 128x32 tiles, the 32nd row block 32 rows: tiles of two
    shapes are not identical panels, however many commands."""
    assert _tiling(TINY, 4000, 32, 32).mt == 128
    compiled = compile_graph(_meta(_Mm(), (4000, 32), (32, 32)), TINY,
                             CompileOptions(partial_matmul_commands=1))
    assert compiled.tile_panels is None


def test_a_resident_row_block_sets_the_panel_period() -> None:
    """2048x32 @ 32x4096 bf16 on tpu-v4 (2 cores): 512x512 tiles (128 columns on each of
    4 arrays), 4 row blocks of 8 column tiles, A resident: 32 tiles. A core keeps its row
    block over its 4 tiles of it and the next block takes the other resident set, so a
    panel is 4 x 2 rounds of 2 cores = 16 tiles: 2 panels, too few to extend, and it
    runs whole (with the accumulators' period alone, 2 rounds, it would be 8 panels)."""
    t = _tiling(TPU_V4, 2048, 32, 4096, DType.bf16)
    assert (t.mt, t.nt, t.arrays, t.a_resident, t.acc_sets, t.op_sets, t.k_steps) == \
        (512, 128, 4, True, 2, 2, 1)
    compiled = compile_graph(_meta(_Mm(), (2048, 32), (32, 4096), dtype=torch.bfloat16),
                             TPU_V4, CompileOptions(partial_matmul_commands=1))
    assert compiled.tile_panels is None


# -- the command cap ---------------------------------------------------------------------------

def test_the_cap_is_checked_against_a_load_and_a_multiply_per_tile_and_k_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """8x8x8 on tiny: one 8x8 tile, 2 k steps of 4 (test_matmul_tiling.py): 4 counted."""
    monkeypatch.setenv("ARCHSIM_MAX_COMMANDS", "3")
    clear_cache()
    with pytest.raises(ProgramTooLargeError,
                       match=r"needs more than 3 commands \(at mm_default: 4 more\)"):
        compile_op(aten.mm.default, (torch.randn(8, 8), torch.randn(8, 8)), {}, TINY)
    clear_cache()


# -- a last tile that needs fewer arrays ---------------------------------------------------------

def test_a_last_tile_multiplies_on_the_arrays_its_columns_need() -> None:
    """4x4 @ 4x1152 bf16 on tpu-v4: 256 columns an array, 1024 a tile (4 arrays): tile 0
    (columns 0-1023, core 0) on mxu0-3, tile 1 (columns 1024-1151, core 1) on mxu0 only.
    (4x640 was this case until shares under an array's width were offered: it now
    takes 80 columns an array, 2 even tiles.)"""
    t = _tiling(TPU_V4, 4, 4, 1152, DType.bf16)
    assert (t.mt, t.kt, t.nt, t.arrays, t.k_steps) == (4, 4, 256, 4, 1)
    torch.manual_seed(0)
    a, b = torch.randn(4, 4).bfloat16(), torch.randn(4, 1152).bfloat16()
    program = _compiled(_Mm(), a, b, config=TPU_V4).program
    assert [(c.engine, c.op.b.shape) for c in program.commands
            if isinstance(c.op, MatMul)] == \
        [(f"core0.mxu{j}", (4, 256)) for j in range(4)] + [("core1.mxu0", (4, 128))]


# -- loads run ahead by the operand sets less one ------------------------------------------------

def test_loads_run_two_steps_ahead_with_three_operand_sets() -> None:
    """16x4 @ 4x16 on tiny with one core and one DMA engine (loads and stores share its
    queue): four 16x4 tiles, one k step each, A resident (loaded once), 3 operand sets.
    Tile t's loads are issued 2 tiles ahead of its multiply and store: B0 and A, B1, B2,
    then S0, B3, S1, S2, S3 on the one queue."""
    one = TINY.with_overrides({"cores": 1, "core.dma.engines": 1})
    t = choose_matmul_tiling(one, 1, 16, 4, 16, DType.f32, DType.f32, 1, 1, 2, 0,
                             one.core.scratchpad.size_bytes)
    assert (t.mt, t.kt, t.nt, t.op_sets, t.a_resident) == (16, 4, 4, 3, True)
    torch.manual_seed(0)
    program = _compiled(_Mm(), torch.randn(16, 4), torch.randn(4, 16), config=one).program
    queue = [c.op for c in program.commands if c.engine == "core0.dma0"]
    b_name = program.tensors[1].name
    names = ["B" if isinstance(op, Load) and op.src.tensor == b_name else
             "A" if isinstance(op, Load) else "S" for op in queue]
    assert all(isinstance(op, (Load, Store)) for op in queue)
    assert "".join(names) == "BABBSBSSS"


# -- B's bytes in the tiling -------------------------------------------------------------------

def _tiling_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    calls: list[dict] = []
    real = matmul_kernel.choose_matmul_tiling
    signature = inspect.signature(real)

    def spy(*args, **kwargs):
        calls.append(dict(signature.bind(*args, **kwargs).arguments))
        return real(*args, **kwargs)
    monkeypatch.setattr(matmul_kernel, "choose_matmul_tiling", spy)
    clear_cache()
    return calls


def test_weight_only_int8_tiles_for_one_byte_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_weight_int8pack_mm`` of f32 x [4, 64] and int8 w [32, 64] on tiny: the tiling
    is asked with B's int8 (1 byte), and its k step (16) is the one-byte weights';
    weights as wide as x (4 bytes) would tile 4x8x8 with A resident."""
    calls = _tiling_calls(monkeypatch)
    torch.manual_seed(0)
    x, w = torch.randn(4, 64), torch.randint(-128, 128, (32, 64), dtype=torch.int8)
    scales = torch.rand(32)
    compiled = compile_op(aten._weight_int8pack_mm.default, (x, w, scales), {}, TINY)
    (out,), _ = compiled.run(x, w, scales)
    torch.testing.assert_close(out, torch._weight_int8pack_mm(x, w, scales), rtol=1e-5,
                               atol=1e-3)
    (call,) = calls
    assert call["b_dtype"] is DType.i8 and not call["b_item_bytes"]  # not packed
    wide = choose_matmul_tiling(**{**call, "b_dtype": None})
    assert (wide.kt, wide.a_resident) == (8, True)
    shapes = {(c.op.a.shape, c.op.b.shape) for c in compiled.program.commands
              if isinstance(c.op, MatMul)}
    assert shapes == {((4, 16), (16, 8))}


def test_int4_weights_tile_at_half_a_byte_and_their_scales(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An int4 linear (groups of 128, a scale and a zero per group and column): the
    tiling is asked with 0.5 B a weight plus 2 x the scales' bytes / 128."""
    from serving.quant import Int4WeightOnlyLinear

    calls = _tiling_calls(monkeypatch)
    torch.manual_seed(0)
    module = Int4WeightOnlyLinear.of(nn.Linear(256, 256, bias=False), torch.bfloat16, 128)
    scales = [t for t in module.state_dict().values() if t.dtype.is_floating_point]
    (item,) = {t.element_size() for t in scales}
    compile_graph(torch.export.export(module, (torch.randn(1, 256, dtype=torch.bfloat16),)),
                  TPU_V4)
    (call,) = calls
    assert call["b_item_bytes"] == 0.5 + 2 * item / 128


# -- the epilogue's buffers of a batched tile ----------------------------------------------------

class _BmmPlus(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b) + r


def test_a_batched_tiles_epilogue_buffers_hold_one_tile() -> None:
    """[4, 8, 8] @ [4, 8, 8] + r [1, 8, 8] on tiny: one 8x8 tile a batch, two per core,
    two accumulator sets. Each set is the accumulator (256 B), r's [1, 8, 8] tile and the
    sum's (256 B each), in that order, 64 B aligned: 256 B apart, 768 B a set."""
    torch.manual_seed(0)
    a, b, r = torch.randn(4, 8, 8), torch.randn(4, 8, 8), torch.randn(1, 8, 8)
    program = _compiled(_BmmPlus(), a, b, r).program
    core0 = [c.op for c in program.commands if c.engine.startswith("core0")]
    accs = sorted({op.out.offset for op in core0 if isinstance(op, MatMul)})
    r_name = program.tensors[2].name
    r_tiles = sorted({op.dst.offset for op in core0
                      if isinstance(op, Load) and op.src.tensor == r_name})
    sums = sorted({op.dst.offset for op in core0 if isinstance(op, Binary)})
    assert len(accs) == 2
    assert r_tiles == [acc + 256 for acc in accs] and sums == [acc + 512 for acc in accs]
    assert accs[1] == accs[0] + 768


# -- operands with size-1 batch dims -------------------------------------------------------------

@pytest.mark.parametrize("a_shape,b_shape", [
    ((3, 1, 14), (2, 3, 14, 6)),     # one row, a batch dim of b's
    ((2, 1, 9, 14), (1, 3, 14, 6)),  # each operand's own size-1 batch dim broadcast
    ((1, 3, 9, 14), (2, 1, 14, 6)),
])
def test_batch_dims_of_size_one_broadcast(a_shape, b_shape) -> None:
    torch.manual_seed(0)
    a, b = torch.randn(a_shape), torch.randn(b_shape)
    compiled = compile_op(aten.matmul.default, (a, b), {}, TINY)
    (out,), _ = compiled.run(a, b)
    torch.testing.assert_close(out, torch.matmul(a, b), rtol=1e-5, atol=1e-5)


# -- a transposed weight loaded in pieces --------------------------------------------------------

class _ReshapedWeight(nn.Module):
    """A linear whose weight [N, K] is a view of a parameter of another shape: each B
    tile is loaded transposed in pieces of the parameter's rank."""

    def __init__(self, shape: tuple[int, ...], n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(shape))
        self.n = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.w.reshape(self.n, self.w.numel() // self.n))


@pytest.mark.parametrize("shape,n", [
    ((6, 3, 5), 6),      # k steps of 8 cross the rows of 5: pieces [1, 1, 4], [1, 1, 1], ...
    ((6, 2, 3), 6),      # a k step of all 6: pieces [rows, 2, 3], whose middle dim steps 3 k
    ((8, 2, 2), 8),
    ((16, 2, 4), 16),    # pieces [4, 1, 4]: 4 rows of the second half of k
    ((8, 6, 1, 1), 8),   # a 1x1 convolution's weight as a linear's
    ((12, 3), 6),        # a row of 6 k is two rows of the parameter: pieces [2 x rows, 3]
    ((2, 3, 4), 6),      # rows in two dims: pieces [2, 3, 4]
    ((3, 4, 3), 6),      # the middle dim holds 2 rows of 2 x 3 k
])
def test_a_transposed_weight_in_pieces_lands_where_each_piece_belongs(shape, n) -> None:
    """The pieces' rows and k land transposed in the B tile (numbers as torch's). Before
    the fix, a piece's leading dims got stride 0 and its last two (1, n), right only for
    pieces [1, ..., 1, rows, k]: [6, 2, 3] gave errors of 5."""
    torch.manual_seed(0)
    compiled = _compiled(_ReshapedWeight(shape, n), torch.randn(4, math.prod(shape) // n))
    weight = compiled.program.tensors[0].name
    pieces = [c.op for c in compiled.program.commands
              if isinstance(c.op, Load) and c.op.src.tensor == weight]
    assert pieces and all(len(p.src.shape) == len(shape) for p in pieces)
    if shape == (6, 3, 5):
        matmuls = [c.op for c in compiled.program.commands if isinstance(c.op, MatMul)]
        assert len(pieces) > len(matmuls)  # more than one piece a B tile


@pytest.mark.parametrize("shape,cols,n,strides", [
    ((3, 5), 5, 6, (1, 6)),               # [rows, k]: rows 1 apart, k n apart
    ((1, 1, 4), 4, 8, (0, 1, 8)),         # a row of a 3-D base: as before, leading 0
    ((4, 2, 3), 6, 4, (1, 12, 4)),        # rows, then k in 2 x 3: the 2 steps 3 k
    ((4, 6, 1, 1), 6, 4, (1, 4, 4, 4)),   # a 1x1 convolution's weight
    ((1, 1), 1, 4, (1, 4)),               # one element: as before
    ((2, 3), 6, 4, (12, 4)),              # one row of 6 k held as 2 x 3: all k's dims
    ((2, 2, 3), 3, 4, (2, 1, 4)),         # 4 rows held as 2 x 2
])
def test_the_strides_of_a_transposed_piece(shape, cols, n, strides) -> None:
    assert _transposed_strides(shape, cols, n) == strides


def test_a_piece_without_whole_rows_is_refused() -> None:
    with pytest.raises(LoweringError, match=r"^a transposed load's piece \[2, 3\] does not "
                                            r"hold rows of 4 elements$"):
        _transposed_strides((2, 3), 4, 8)


class _Attention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return nn.functional.scaled_dot_product_attention(q, k, v)


def test_attentions_k_is_loaded_transposed_with_its_batch_and_head_dims() -> None:
    """load_transposed also writes attention's K^T: a box [1, 1, 8 keys, 4] of K
    [2, 2, 8, 4], its batch and head dims in front (stride 0), keys 1 apart, d 8 apart."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 8, 4) for _ in range(3))
    compiled = _compiled(_Attention(), q, k, v)
    k_name = compiled.program.tensors[1].name
    assert {c.op.dst.strides for c in compiled.program.commands
            if isinstance(c.op, Load) and c.op.src.tensor == k_name} == {(0, 0, 1, 8)}


def test_a_piece_whose_dim_holds_rows_and_k_is_loaded_a_row_at_a_time() -> None:
    """A weight [6, 6] viewed from [12, 3]: a piece of 4 rows is the parameter's
    [8, 3], whose first dim steps half a row; each row of 6 k is its [2, 3] box, 6
    elements further into the dense box. A piece [2, 3] of one row stays whole."""
    piece = DramRef("w", (Slice(4, 12), Slice(0, 3)))
    assert _row_parts(piece, 12, 6) == [
        (DramRef("w", (Slice(4 + 2 * r, 6 + 2 * r), Slice(0, 3))), 12 + 6 * r)
        for r in range(4)]
    row = DramRef("w", (Slice(4, 6), Slice(0, 3)))
    assert _row_parts(row, 12, 6) == [(row, 12)]
    # [3, 4, 3] as [6, 6]: the middle dim holds two rows' halves of k
    plane = DramRef("w", (Slice(1, 2), Slice(0, 4), Slice(0, 3)))
    assert _row_parts(plane, 12, 6) == [
        (DramRef("w", (Slice(1, 2), Slice(0, 2), Slice(0, 3))), 12),
        (DramRef("w", (Slice(1, 2), Slice(2, 4), Slice(0, 3))), 18)]
