"""Functional mode: hand-written tiled programs compute what torch computes on CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from archsim.config import load_config
from archsim.errors import SimulationError
from archsim.simulator import Simulator
from compiler.ir import (
    Binary,
    BinaryKind,
    Cast,
    DType,
    Gather,
    HostOp,
    Load,
    MatMul,
    Reduce,
    ReduceKind,
    Scalar,
    SramRef,
    Store,
    Transpose,
    Unary,
    UnaryKind,
)
from compiler.ir.builder import ProgramBuilder
from compiler.ir.ops import Program

TINY = load_config("tiny")
F32 = DType.f32


def tiled_matmul(m: int, k: int, n: int, tile: int = 4, dtype: DType = F32) -> Program:
    """C = A @ B with tile x tile blocks, accumulating over k on core0, spreading output
    tiles over both cores' DMA engines alternately. Each output tile uses its own SRAM
    regions, so no buffer is reused."""
    b = ProgramBuilder(f"mm_{m}x{k}x{n}")
    b.tensor("A", (m, k), dtype, "in")
    b.tensor("B", (k, n), dtype, "in")
    b.tensor("C", (m, n), F32, "out")
    offset = 0

    def region(shape: tuple[int, int], dt: DType) -> SramRef:
        nonlocal offset
        ref = SramRef("sram0", offset, shape, dt)
        offset += -(-ref.nbytes // 64) * 64  # keep every region 64-byte aligned
        return ref

    for i in range(0, m, tile):
        for j in range(0, n, tile):
            mi, nj = min(tile, m - i), min(tile, n - j)
            acc = region((mi, nj), F32)
            last = None
            for kk in range(0, k, tile):
                kt = min(tile, k - kk)
                a = region((mi, kt), dtype)
                w = region((kt, nj), dtype)
                la = b.add("core0.dma0", Load(b.ref("A", (i, i + mi), (kk, kk + kt)), a))
                lb = b.add("core0.dma1", Load(b.ref("B", (kk, kk + kt), (j, j + nj)), w))
                deps = [la, lb] + ([last] if last is not None else [])
                last = b.add("core0.mxu0", MatMul(a, w, acc, accumulate=kk > 0), deps,
                             source="aten.mm")
            b.add("core0.dma0", Store(acc, b.ref("C", (i, i + mi), (j, j + nj))), [last])
    return b.build()


@pytest.mark.parametrize(("m", "k", "n"), [(8, 8, 8), (10, 7, 13), (1, 9, 5)])
def test_tiled_matmul_matches_torch(m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((k, n), dtype=np.float32)
    result = Simulator(TINY).run(tiled_matmul(m, k, n), {"A": a, "B": w})
    expected = torch.from_numpy(a) @ torch.from_numpy(w)
    torch.testing.assert_close(torch.from_numpy(result.outputs["C"]), expected)
    assert result.matmul_flops == 2 * m * k * n


def test_bf16_matmul_rounds_inputs_like_torch() -> None:
    config = TINY.with_overrides({"core.matrix.input_dtype": "bf16"})
    rng = np.random.default_rng(1)
    a = torch.from_numpy(rng.standard_normal((6, 5), dtype=np.float32)).to(torch.bfloat16)
    w = torch.from_numpy(rng.standard_normal((5, 7), dtype=np.float32)).to(torch.bfloat16)
    result = Simulator(config).run(tiled_matmul(6, 5, 7, dtype=DType.bf16),
                                   {"A": a.float().numpy(), "B": w.float().numpy()})
    expected = a.float() @ w.float()
    torch.testing.assert_close(torch.from_numpy(result.outputs["C"]), expected)


def tiled_softmax(rows: int, cols: int, tile_rows: int = 4) -> Program:
    """Row softmax in row tiles: max, subtract, exp, sum, divide; the last tile is
    partial when rows % tile_rows != 0."""
    b = ProgramBuilder(f"softmax_{rows}x{cols}")
    b.tensor("X", (rows, cols), F32, "in")
    b.tensor("Y", (rows, cols), F32, "out")
    step = tile_rows * cols * 4 + 2 * tile_rows * 4
    for t, r in enumerate(range(0, rows, tile_rows)):
        h = min(tile_rows, rows - r)
        base = t * step
        x = SramRef("sram0", base, (h, cols), F32)
        peak = SramRef("sram0", base + tile_rows * cols * 4, (h, 1), F32)
        total = SramRef("sram0", base + tile_rows * cols * 4 + tile_rows * 4, (h, 1), F32)
        load = b.add("core0.dma0", Load(b.ref("X", (r, r + h), (0, cols)), x))
        mx = b.add("core0.vpu", Reduce(ReduceKind.max, x, peak, axis=1), [load])
        sub = b.add("core0.vpu", Binary(BinaryKind.sub, x, peak, x), [mx])
        exp = b.add("core0.vpu", Unary(UnaryKind.exp, x, x), [sub])
        sm = b.add("core0.vpu", Reduce(ReduceKind.sum, x, total, axis=1), [exp])
        div = b.add("core0.vpu", Binary(BinaryKind.div, x, total, x), [sm])
        b.add("core0.dma1", Store(x, b.ref("Y", (r, r + h), (0, cols))), [div])
    return b.build()


@pytest.mark.parametrize(("rows", "cols"), [(4, 8), (10, 13)])
def test_tiled_softmax_matches_torch(rows: int, cols: int) -> None:
    x = np.random.default_rng(2).standard_normal((rows, cols), dtype=np.float32) * 4
    result = Simulator(TINY).run(tiled_softmax(rows, cols), {"X": x})
    torch.testing.assert_close(torch.from_numpy(result.outputs["Y"]),
                               torch.softmax(torch.from_numpy(x), dim=1))


def test_performance_only_gives_identical_cycles() -> None:
    program = tiled_matmul(10, 7, 13)
    rng = np.random.default_rng(3)
    inputs = {"A": rng.standard_normal((10, 7)), "B": rng.standard_normal((7, 13))}
    functional = Simulator(TINY).run(program, inputs)
    timing_only = Simulator(TINY).run(program)
    assert timing_only.outputs is None
    assert functional.total_cycles == timing_only.total_cycles
    assert functional.starts.tolist() == timing_only.starts.tolist()
    assert functional.ends.tolist() == timing_only.ends.tolist()


def vector_program(op, src_shape, dst_shape, src_dtype=F32, dst_dtype=F32) -> Program:
    b = ProgramBuilder("vector")
    b.tensor("X", src_shape, src_dtype, "in")
    b.tensor("Y", dst_shape, dst_dtype, "out")
    x = SramRef("sram0", 0, src_shape, src_dtype)
    y = SramRef("sram0", 4096, dst_shape, dst_dtype)
    load = b.add("core0.dma0", Load(b.ref("X"), x))
    compute = b.add("core0.vpu", op(x, y), [load])
    b.add("core0.dma0", Store(y, b.ref("Y")), [compute])
    return b.build()


UNARY_REFERENCE = {
    UnaryKind.gelu: lambda t: torch.nn.functional.gelu(t),
    UnaryKind.gelu_tanh: lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
    UnaryKind.silu: torch.nn.functional.silu,
    UnaryKind.sigmoid: torch.sigmoid,
    UnaryKind.rsqrt: lambda t: torch.rsqrt(t.abs() + 1),
    UnaryKind.erf: torch.erf,
    UnaryKind.tanh: torch.tanh,
}


@pytest.mark.parametrize("kind", list(UNARY_REFERENCE))
def test_unary_ops_match_torch(kind: UnaryKind) -> None:
    x = np.linspace(-4, 4, 24, dtype=np.float32).reshape(4, 6)
    if kind is UnaryKind.rsqrt:
        x = np.abs(x) + 1
    result = Simulator(TINY).run(vector_program(lambda s, d: Unary(kind, s, d), (4, 6), (4, 6)),
                                 {"X": x})
    expected = UNARY_REFERENCE[kind](torch.from_numpy(np.abs(x) - 1 if kind is UnaryKind.rsqrt
                                                      else x))
    torch.testing.assert_close(torch.from_numpy(result.outputs["Y"]), expected)


def test_f16_cast_and_transpose_match_torch() -> None:
    x = np.random.default_rng(4).standard_normal((3, 5), dtype=np.float32)
    cast = Simulator(TINY).run(
        vector_program(lambda s, d: Cast(s, d), (3, 5), (3, 5), dst_dtype=DType.f16), {"X": x})
    assert cast.outputs["Y"].dtype == np.float16
    torch.testing.assert_close(torch.from_numpy(cast.outputs["Y"]),
                               torch.from_numpy(x).half(), rtol=0, atol=0)
    transposed = Simulator(TINY).run(
        vector_program(lambda s, d: Transpose(s, d, (1, 0)), (3, 5), (5, 3)), {"X": x})
    np.testing.assert_array_equal(transposed.outputs["Y"], x.T)


def test_scalar_operand_broadcasts() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    result = Simulator(TINY).run(
        vector_program(lambda s, d: Binary(BinaryKind.mul, s, Scalar(0.5), d), (2, 3), (2, 3)),
        {"X": x})
    np.testing.assert_array_equal(result.outputs["Y"], x * 0.5)


def test_host_op_runs_its_host_function_and_is_timed() -> None:
    b = ProgramBuilder("host")
    b.tensor("X", (2, 3), F32, "in")
    b.tensor("Y", (2, 3), F32, "out")
    b.add("host", HostOp("aten.cumsum.default", ("X",), ("Y",), cycles=500),
          source="aten.cumsum")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    result = Simulator(TINY).run(b.build(), {"X": x},
                                 host_functions={"aten.cumsum.default":
                                                 lambda v: np.cumsum(v, axis=1)})
    np.testing.assert_array_equal(result.outputs["Y"], np.cumsum(x, axis=1))
    assert result.total_cycles == 500
    assert result.engine_busy_cycles["host"] == 500


def test_host_op_without_a_function_names_the_op() -> None:
    b = ProgramBuilder("host")
    b.tensor("X", (2, 3), F32, "in")
    b.tensor("Y", (2, 3), F32, "out")
    b.add("host", HostOp("aten.cumsum.default", ("X",), ("Y",), cycles=5))
    with pytest.raises(SimulationError, match=r"host op 'aten.cumsum.default' has no host "
                                              r"function for functional mode \(given: none\)"):
        Simulator(TINY).run(b.build(), {"X": np.zeros((2, 3), np.float32)})


def test_missing_input_is_named() -> None:
    with pytest.raises(SimulationError, match=r"input tensor 'B' \(in\) was not given"):
        Simulator(TINY).run(tiled_matmul(4, 4, 4), {"A": np.zeros((4, 4), np.float32)})


def test_input_of_wrong_shape_is_named() -> None:
    with pytest.raises(SimulationError,
                       match=r"input 'A': shape \[4, 5\] does not match the program's \[4, 4\]"):
        Simulator(TINY).run(tiled_matmul(4, 4, 4), {"A": np.zeros((4, 5)), "B": np.zeros((4, 4))})


def gather_program(rows: int, cols: int, n: int, index_dtype: DType,
                   box: tuple[tuple[int, int], tuple[int, int]]) -> Program:
    """Load ``n`` indices, gather those rows of a box of ``w`` into core1's scratchpad
    over core0's DMA (across the NoC), store them to ``out``."""
    (r0, r1), (c0, c1) = box
    b = ProgramBuilder("gather")
    b.tensor("ids", (n,), index_dtype, "in")
    b.tensor("w", (rows, cols), F32, "in")
    b.tensor("out", (n, c1 - c0), F32, "out")
    ids = SramRef("sram0", 0, (n,), index_dtype)
    rows_buf = SramRef("sram1", 0, (n, c1 - c0), F32)
    load = b.add("core0.dma0", Load(b.ref("ids"), ids))
    gather = b.add("core0.dma1", Gather(b.ref("w", (r0, r1), (c0, c1)), ids, rows_buf), [load])
    b.add("core1.dma0", Store(rows_buf, b.ref("out")), [gather])
    return b.build()


@pytest.mark.parametrize("index_dtype", [DType.i32, DType.i64])
def test_gather_matches_torch(index_dtype: DType) -> None:
    torch.manual_seed(0)
    w = torch.randn(13, 7)
    ids = torch.tensor([12, 0, 5, 5, 3, 9, 1], dtype=torch.int64)
    program = gather_program(13, 7, len(ids), index_dtype, ((0, 13), (0, 7)))
    result = Simulator(TINY).run(program, {"w": w.numpy(), "ids": ids.numpy()})
    expected = torch.nn.functional.embedding(ids, w)
    np.testing.assert_array_equal(result.outputs["out"], expected.numpy())


def test_gather_indices_are_relative_to_the_box() -> None:
    w = torch.arange(13 * 7, dtype=torch.float32).reshape(13, 7)
    ids = torch.tensor([0, 3, 1], dtype=torch.int64)
    program = gather_program(13, 7, 3, DType.i64, ((8, 12), (2, 6)))
    result = Simulator(TINY).run(program, {"w": w.numpy(), "ids": ids.numpy()})
    np.testing.assert_array_equal(result.outputs["out"], w[8:12, 2:6][ids].numpy())


def test_gather_index_out_of_range_names_command_and_index() -> None:
    w = np.zeros((13, 7), np.float32)
    ids = np.array([1, 13, 2], np.int64)
    program = gather_program(13, 7, 3, DType.i64, ((0, 13), (0, 7)))
    with pytest.raises(SimulationError, match=r"command 1 \(core0\.dma1 gather\) failed in "
                                              r"functional mode: IndexError: index 13 "
                                              r"\(position 1 of field indices\) is out of range "
                                              r"for the 13 rows"):
        Simulator(TINY).run(program, {"w": w, "ids": ids})


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_a_fill_of_two_scalars_is_rounded_into_a_narrow_dtype(dtype: str) -> None:
    # numpy's float64 result of two Python scalars was written raw into a bf16 region's
    # bit pattern (np.dtype("float64") == None is True): -inf became 0. The pooling
    # kernel's -inf border exposed it; zero fills never could.
    from archsim.functional import Memory, to_values
    from archsim.functional_steps import _bind_binary
    from compiler.ir.dtypes import DType
    from compiler.ir.operands import Scalar, SramRef
    from compiler.ir.ops import Binary, BinaryKind

    memory = Memory({}, {"sram0": 1024}, {})
    region = SramRef("sram0", 0, (2, 1, 3), DType(dtype), (6, 3, 1))
    _bind_binary(Binary(BinaryKind.add, Scalar(float("-inf")), Scalar(0.0), region), memory)()
    values = memory.view(region)
    values = to_values(values, DType.bf16) if dtype == "bf16" else values
    assert np.all(values == -np.inf)
