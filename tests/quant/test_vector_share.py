"""The vector units' share of a decode GEMV whose arrays are bound by taking narrow
weights in (``compiler.kernels.matmul_vector``, ``compiler.ir.ops.VectorMatMul``)."""

from __future__ import annotations

import torch

from archsim.config import load_config
from archsim.vector import VectorEngine, matvec_ops
from compiler import compile as compile_module
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.ir.ops import Dequant, MatMul, VectorMatMul
from compiler.cost import Cost, MatmulTiling
from compiler.kernels.matmul_vector import (VectorShare, array_rate, interleaved, plan_share,
                                            vector_rate)
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


def _tiling(mxu: float, dma: float, dram_bytes: float = 0.0, serial: float = 0.0
            ) -> MatmulTiling:
    """A decode GEMV's tiling on tpu-v4, 512 x 128 an array, with a chosen estimate."""
    return MatmulTiling(mt=1, kt=512, nt=128, arrays=4, acc_sets=1,
                        cost=Cost(mxu_cycles=mxu, dma_cycles=dma, dram_bytes=dram_bytes,
                                  serial_cycles=serial))


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
    # every weight is multiplied once, on the arrays or the vector units
    assert sum(op.a.shape[-1] * op.columns for op in vector + arrays) == 4096 * 4096
    (out,), result = compiled.run(x)
    expected = module(x)
    assert torch.allclose(torch.as_tensor(out).to(torch.float32), expected.float(),
                          rtol=2e-2, atol=2e-2)
    # the share's speed on this GEMV: tests/quant/test_int4_input_path.py
