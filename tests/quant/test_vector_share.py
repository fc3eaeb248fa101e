"""The vector units' share of a decode GEMV whose arrays are bound by taking narrow
weights in (``compiler.kernels.matmul_vector``, ``compiler.ir.ops.VectorMatMul``)."""

from __future__ import annotations

import numpy as np
import torch

from archsim.config import load_config
from archsim.functional_steps import dequantized
from archsim.simulator import Simulator
from archsim.vector import VectorEngine, matvec_ops
from compiler import compile as compile_module
from compiler.ir.dtypes import DType
from compiler.ir.builder import ProgramBuilder
from compiler.ir.operands import DramRef, Slice, SramRef
from compiler.ir.ops import Dequant, Load, MatMul, Store, VectorMatMul
from compiler.cost import Cost, MatmulTiling
from compiler.kernels.matmul_vector import (VectorShare, array_rate, feed_rate, interleaved,
                                            plan_share, start, vector_rate)
from reports.ops import op_rows
from serving.quant import Int4WeightOnlyLinear

TPU_V4 = load_config("tpu-v4")


class _Int4:
    """What plan_share reads of int4 weights in groups of 128, a bf16 scale and zero."""

    packed, n_unit, unpack_ops = True, 64, 2
    item_bytes = 0.5 + 2 * 2 / 128

    class spec:
        group = 128


def _sram(offset: int, shape: tuple[int, ...], dtype: DType = DType.f32) -> SramRef:
    return SramRef("sram0", offset, shape, dtype)


def test_a_vector_matmul_takes_its_element_operations_over_the_lanes() -> None:
    # 1 x 256 x 128 int4 in groups of 128 (two groups): a multiply-add a weight
    # (32,768), an unpack and a widen a weight (65,536), two multiply-adds a group and
    # column (512): 98,816 operations over 1,024 lanes, 97 cycles, and 16 of latency
    op = VectorMatMul(_sram(0, (1, 256), DType.bf16), _sram(0x1000, (2, 256, 32), DType.u8),
                      _sram(0x20000, (1, 128)), False, _sram(0x30000, (2, 128, 2), DType.bf16),
                      Dequant(128, 0, "halves"))
    assert op.columns == 128
    assert matvec_ops(1, 256, 128, 2, 2) == 98_816
    timing = VectorEngine("core0.vpu", TPU_V4.core.vector).timing(op)
    assert timing.fixed_cycles == 97 + 16
    assert timing.flops == 2 * 256 * 128
    # bf16 weights: a multiply-add a weight and row, nothing to unpack
    plain = VectorMatMul(_sram(0, (2, 256), DType.bf16), _sram(0x1000, (256, 128), DType.bf16),
                         _sram(0x20000, (2, 128)))
    assert VectorEngine("core0.vpu", TPU_V4.core.vector).timing(plain).fixed_cycles == \
        2 * 256 * 128 // 1024 + 16


def _tiling(mxu: float, dma: float, dram_bytes: float = 0.0, serial: float = 0.0,
            vpu: float = 0.0) -> MatmulTiling:
    """A decode GEMV's tiling on tpu-v4, 512 x 128 an array, with a chosen estimate."""
    return MatmulTiling(mt=1, kt=512, nt=128, arrays=4, acc_sets=1,
                        cost=Cost(mxu_cycles=mxu, vpu_cycles=vpu, dma_cycles=dma,
                                  dram_bytes=dram_bytes, serial_cycles=serial))


def test_the_share_balances_the_arrays_and_the_vector_unit() -> None:
    # tpu-v4 at one row, 512 x 128 tiles an array: 4 folds of 128 cycles back to back,
    # so 4 arrays take 4 x 512 x 128 / 512 = 512 weights a cycle; the vector unit
    # 1,024 / (1 + 2 + 2 / 128) = 339.6. Its share, 339.6 / 851.6 = 0.399 of 4,096
    # columns, 816.6 a core, is 768 in whole blocks of 64
    assert array_rate(TPU_V4, 1, (512, 128), 4, DType.bf16) == 512
    vector = vector_rate(TPU_V4, 1, DType.bf16, DType.u8, _Int4())
    assert abs(vector - 1024 / (3 + 2 / 128)) < 1e-9
    # the arrays' estimate 16,384 cycles, the loads' 10,000: with the share the arrays
    # take 2,560 columns (10,240 cycles), the vector unit 768 x 4,096 / 339.6 = 9,264
    # after its first weights (500 + 100 + 512 x 768 x 0.53125 / 768 = 872): 10,240,
    # 0.63 of 16,384
    share = plan_share(TPU_V4, 2, 1, 4096, 4096, _tiling(16_384, 10_000), DType.bf16,
                       DType.u8, _Int4())
    assert share == VectorShare(2560, ((2560, 3328), (3328, 4096)), 512,
                                768 * 512 / vector)
    # loads of 15,000 cycles leave little to win: 15,000 > 0.9 x 16,384
    assert plan_share(TPU_V4, 2, 1, 4096, 4096, _tiling(16_384, 15_000), DType.bf16,
                      DType.u8, _Int4()) is None
    # 1,024 x 1,024: 1,024 cycles on the arrays alone; with the share 640 on them, and
    # 192 x 1,024 / 339.6 = 579 on the vector unit after its first 512 x 192 weights
    # arrive (500 + 100 + 52,224 bytes at 768 a cycle, 3 load engines): 1,247 > 0.9 x
    # 1,024, so the arrays keep every column
    assert plan_share(TPU_V4, 2, 1, 1024, 1024, _tiling(1_024, 500), DType.bf16, DType.u8,
                      _Int4()) is None
    # a batch of 64 rows: the arrays' folds stream 64 rows as fast as one, the vector
    # unit needs 64 multiply-adds a weight (15.5 weights a cycle): a share under a block
    assert plan_share(TPU_V4, 2, 64, 4096, 4096, _tiling(16_384, 10_000), DType.bf16,
                      DType.u8, _Int4()) is None


def test_the_vector_unit_takes_no_more_columns_than_one_engine_feeds() -> None:
    # a share's k step of packed weights is strided commands on one DMA engine: tpu-v4's
    # 256 B a cycle bring 256 / 0.53125 = 481.9 weights (with their scales) a cycle
    assert feed_rate(TPU_V4, _Int4.item_bytes) == 256 / 0.53125
    wide = TPU_V4.with_overrides({"core.vector.lanes": 2048})
    lanes = vector_rate(wide, 1, DType.bf16, DType.u8, _Int4())
    assert abs(lanes - 2048 / (3 + 2 / 128)) < 1e-9  # 679.1: the lanes alone
    # so the split is 481.9 / 993.9 = 0.485 of 4,096 columns, 993 a core, 960 in whole
    # blocks (by the lanes' rate it would be 0.570: 1,152 a core)
    share = plan_share(wide, 2, 1, 4096, 4096, _tiling(16_384, 10_000), DType.bf16,
                       DType.u8, _Int4())
    feed = feed_rate(wide, _Int4.item_bytes)
    assert share == VectorShare(2176, ((2176, 3136), (3136, 4096)), 512, 960 * 512 / feed)
    # 1,024 lanes (339.6 weights a cycle) are under the feed: the lanes set the split
    assert plan_share(TPU_V4, 2, 1, 4096, 4096, _tiling(16_384, 10_000), DType.bf16,
                      DType.u8, _Int4()).first == 2560


def test_twice_the_lanes_do_not_slow_an_int4_gemv_down() -> None:
    # tpu-v4 with 2,048 lanes a core: by the lanes' rate alone the vector units took 57%
    # of the columns, their loads (one engine a step) held the arrays' behind them, and
    # the GEMV ran 18,208 cycles against 13,660 with 1,024 lanes; the 11,008-row one
    # lost its share. Fed by one engine, it stays within 5% of the 1,024 lanes' time (4.1%)
    module, x = _int4_gemv(4096, 4096)
    exported = torch.export.export(module, (x,))
    cycles = {}
    for lanes in (1024, 2048):
        compile_module.clear_cache()
        config = TPU_V4.with_overrides({"core.vector.lanes": lanes})
        compiled = compile_module.compile_graph(exported, config)
        cycles[lanes] = compiled.run(x)[1].total_cycles
    assert cycles[2048] <= 1.05 * cycles[1024]


def test_each_units_rate_and_the_wait_for_the_first_weights() -> None:
    # one-byte weight-only weights are widened (1 operation) and multiply-added once a
    # row; weights in a's dtype only multiply-added; 4 rows of int4: 4 + 2 + 8 / 128
    assert vector_rate(TPU_V4, 1, DType.bf16, DType.i8, None) == 512
    assert vector_rate(TPU_V4, 1, DType.bf16, DType.bf16, None) == 1024
    assert abs(vector_rate(TPU_V4, 4, DType.bf16, DType.u8, _Int4()) - 1024 / (6 + 8 / 128)) \
        < 1e-9
    # an elementwise op of 2 cycles a lane halves the rate
    slow = TPU_V4.with_overrides({"core.vector.costs.elementwise": 2})
    assert vector_rate(slow, 1, DType.bf16, DType.i8, None) == 256
    # a scratchpad port of 128 bytes a cycle passes 128 / 0.53125 int4 weights a cycle
    narrow = TPU_V4.with_overrides({"core.vector.sram_bandwidth_bytes_per_cycle": 128})
    assert abs(vector_rate(narrow, 1, DType.bf16, DType.u8, _Int4()) - 128 / 0.53125) < 1e-9
    # f32 inputs at the highest precision take 6 bf16 passes on the arrays: a command
    # of 4 folds of 128 cycles and a 382-cycle fill and drain, 6 times over, less the
    # fill a back-to-back command hides once: 4 x 512 x 128 / (894 x 6 - 382)
    highest = TPU_V4.with_overrides({"core.matrix.f32_precision": "highest"})
    assert array_rate(highest, 1, (512, 128), 4, DType.bf16) == 512
    assert array_rate(highest, 1, (512, 128), 4, DType.f32) == 4 * 512 * 128 / (894 * 6 - 382)
    # the vector share's first 512 x 768 int4 weights: 500 cycles of DRAM latency, 100
    # of DMA setup, 208,896 bytes over 3 load engines of 256 bytes a cycle
    assert start(TPU_V4, 512, 768, 0.53125) == 500 + 100 + 512 * 768 * 0.53125 / 768


def test_what_the_share_is_weighed_against() -> None:
    # int8 weight-only, no packing: whole units of 16 columns. 1,024 / 2 = 512 weights
    # a cycle, as the arrays: half of 4,000 columns, 1,000 a core, 992 in units of 16
    share = plan_share(TPU_V4, 2, 1, 4000, 4096, _tiling(16_000, 5_000), DType.bf16,
                       DType.i8, None)
    assert share == VectorShare(2016, ((2016, 3008), (3008, 4000)), 512, 992 * 512 / 512)
    # weights in a's dtype need no widening: 1,024 a cycle, 2/3 of the columns
    share = plan_share(TPU_V4, 2, 1, 4000, 4096, _tiling(16_000, 5_000), DType.bf16,
                       DType.bf16, None)
    assert share is not None and share.first == 4000 - 2 * 1328
    # a share of exactly one block a core is still a share: 384 int4 columns, 76.5 a
    # core by the rates, one block of 64
    share = plan_share(TPU_V4, 2, 1, 384, 4096, _tiling(1e6, 0), DType.bf16, DType.u8,
                       _Int4())
    assert share is not None and share.columns == ((256, 320), (320, 384))
    # DRAM bytes for 15,000 cycles at the sustained rate the estimate assumes (0.85 of
    # it): too little left to win
    dram = 15_000 * TPU_V4.dram_sustained_bytes_per_cycle * 0.85
    assert plan_share(TPU_V4, 2, 1, 4096, 4096, _tiling(16_384, 0, dram), DType.bf16,
                      DType.u8, _Int4()) is None
    # serial cycles (fills, stalls) count on both sides: with 45,500 of them the
    # arrays' 10,240 cycles for their 2,560 columns give 55,740 > 0.9 x 61,884 = 55,696,
    # though the vector unit's 10,136 alone would have passed
    assert plan_share(TPU_V4, 2, 1, 4096, 4096, _tiling(16_384, 0, 0, 45_500), DType.bf16,
                      DType.u8, _Int4()) is None
    assert plan_share(TPU_V4, 2, 1, 4096, 4096, _tiling(16_384, 0, 0, 45_000), DType.bf16,
                      DType.u8, _Int4()) is not None
    # the vector unit keeps the epilogue work it had: 2,000 cycles of it make its side
    # 12,136 cycles, and with 30,000 serial ones 42,136 > 0.9 x 46,384 = 41,746
    assert plan_share(TPU_V4, 2, 1, 4096, 4096, _tiling(16_384, 0, 0, 30_000, 2_000),
                      DType.bf16, DType.u8, _Int4()) is None


def test_the_steps_are_issued_in_the_order_their_work_is_due() -> None:
    # arrays: steps of 100, 100 (ending a tile), 100; vector steps 120 apart. Due:
    # A0 at 0, V0 at 0, A1 at 100, V1 at 120, A1's epilogue at 200, A2 at 200, V2 at 240
    log: list[str] = []

    def step(name: str, store: bool = False):
        from compiler.kernels.common import TileSteps
        return TileSteps(lambda: log.append(f"load {name}"), lambda: log.append(name),
                         (lambda: log.append(f"store {name}")) if store else (lambda: None))
    from compiler.kernels.matmul_vector import TimedStep
    arrays = [step("A0"), step("A1", True), step("A2")]
    timed = [TimedStep(100, False), TimedStep(100, True), TimedStep(100, False)]
    order = interleaved(arrays, timed, 120, [step("V0"), step("V1"), step("V2")])
    for s in order:
        s.load(), s.compute(), s.store()
    assert [e for e in log if not e.startswith("load")] == [
        "A0", "V0", "A1", "V1", "store A1", "A2", "V2"]


def test_a_vector_matmul_keeps_its_weights_f32() -> None:
    # x [1, 64] bf16 times 8 columns of int4 codes in two groups of 32 (halves layout,
    # one block of 4 bytes a k row), each group's scale and zero f32: the vector unit
    # applies them to its sums, so no weight is rounded to bf16 (the arrays' input path
    # rounds each one)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 64)).astype(np.float32)
    x = torch.from_numpy(x).to(torch.bfloat16).float().numpy()  # bf16 values
    codes = rng.integers(0, 256, (1, 64, 4), dtype=np.uint8)
    scales = rng.standard_normal((2, 8, 2)).astype(np.float32)
    spec = Dequant(32, 0, "halves")
    b = ProgramBuilder("vmatmul")
    b.tensor("X", (1, 64), DType.bf16, "in")
    b.tensor("W", (64, 4), DType.u8, "in")
    b.tensor("S", (2, 16), DType.f32, "in")
    b.tensor("O", (1, 8), DType.f32, "out")
    xs, ws = _sram(0, (1, 64), DType.bf16), _sram(0x100, (1, 64, 4), DType.u8)
    ss, out = _sram(0x200, (2, 8, 2)), _sram(0x300, (1, 8))
    b.add("core0.dma0", Load(DramRef("X", (Slice(0, 1), Slice(0, 64))), xs))
    b.add("core0.dma0", Load(DramRef("W", (Slice(0, 64), Slice(0, 4))),
                             SramRef("sram0", 0x100, (64, 4), DType.u8)))
    b.add("core0.dma0", Load(DramRef("S", (Slice(0, 2), Slice(0, 16))),
                             SramRef("sram0", 0x200, (2, 16), DType.f32)))
    b.add("core0.vpu", VectorMatMul(xs, ws, out, False, ss, spec), (0, 1, 2))
    b.add("core0.dma1", Store(out, DramRef("O", (Slice(0, 1), Slice(0, 8)))), (3,))
    result = Simulator(TPU_V4).run(b.build(), {"X": x, "W": codes.reshape(64, 4),
                                                "S": scales.reshape(2, 16)})
    weights = dequantized(codes, scales, spec, DType.f32).astype(np.float64)
    expected = x.astype(np.float64) @ weights
    np.testing.assert_allclose(result.outputs["O"], expected, rtol=1e-5, atol=1e-5)
    rounded = x.astype(np.float64) @ dequantized(codes, scales, spec, DType.bf16)
    assert np.abs(rounded - expected).max() > 1e-3  # what rounding each weight would give


def _int4_gemv(n: int, k: int) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    module = Int4WeightOnlyLinear.of(torch.nn.Linear(k, n, bias=False), torch.bfloat16, 128)
    return module, torch.randn(1, k, dtype=torch.bfloat16)


def test_an_int4_gemv_shares_its_columns_and_matches_torch() -> None:
    module, x = _int4_gemv(4096, 4096)
    compile_module.clear_cache()
    compiled = compile_module.compile_graph(torch.export.export(module, (x,)), TPU_V4)
    ops = [c.op for c in compiled.program.commands]
    vector = [op for op in ops if isinstance(op, VectorMatMul)]
    arrays = [op for op in ops if isinstance(op, MatMul)]
    assert vector and arrays
    # each core's share starts its sums at its first k step and adds to them after
    for core in range(TPU_V4.cores):
        mine = [c.op for c in compiled.program.commands
                if c.engine == f"core{core}.vpu" and isinstance(c.op, VectorMatMul)]
        assert [op.accumulate for op in mine] == [False] + [True] * (len(mine) - 1)
    # every weight is multiplied once, on the arrays or the vector units
    assert sum(op.a.shape[-1] * op.columns for op in vector + arrays) == 4096 * 4096
    (out,), result = compiled.run(x)
    # the share's FLOPs are matmul FLOPs, wherever they ran: 2 x 4096 x 4096 in all, by
    # the run, by its dtypes and by the op table
    assert result.matmul_flops == 2 * 4096 * 4096
    assert sum(result.matmul_flops_by_dtypes.values()) == 2 * 4096 * 4096
    assert sum(row.matmul_flops for row in op_rows(result)) == 2 * 4096 * 4096
    expected = module(x)
    assert torch.allclose(torch.as_tensor(out).to(torch.float32), expected.float(),
                          rtol=2e-2, atol=2e-2)
    # the share's speed on this GEMV: tests/quant/test_int4_input_path.py
