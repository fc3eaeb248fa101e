"""A one-row-block matmul's last round dealt evenly over every array, the columns left
over split by K (compiler/kernels/matmul_split.py): the plan by hand, and the arrays'
cycles by hand from the fold model of archsim/matrix.py.

``TWO_ARRAYS`` is ``tiny`` with two 4x4 weight-stationary arrays a core and one weight
buffer, so a fold of a GEMV (M = 1) takes 2R + C + T - 2 = 8 + 4 + 1 - 2 = 11 cycles
and a multiply of f folds 11 f: an array's busy cycles count the weight tiles it
shifts in.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from archsim.config import load_config
from compiler import compile_op
from compiler.cost import choose_matmul_tiling
from compiler.ir import DType
from compiler.ir.ops import Binary, MatMul
from compiler.kernels.matmul_split import Lane, TailTile, balanced_tail

TWO_ARRAYS = load_config("tiny").with_overrides({"core.matrix.arrays": 2})


def _multiplies(result) -> dict[str, list[tuple[tuple[int, ...], int]]]:
    """Per array, its multiplies in order: (B tile shape, cycles)."""
    out: dict[str, list] = defaultdict(list)
    for event in sorted(result.trace, key=lambda e: e.start):
        op = result.program.commands[event.command].op
        if isinstance(op, MatMul):
            out[event.engine].append((op.b.shape, event.cycles))
    return dict(out)


def test_llama_gate_on_tpu_v4_is_dealt_344_folds_an_array() -> None:
    """The gate projection 4096 -> 11008 (int8 weights) as tpu-v4 tiles it: ``kt`` 256,
    ``nt`` 1408 (11 column units of 128), 2 cores x 4 arrays, one round of two tiles
    (the first core's arrays get 11 units, the second's 11, 11, 11 and 9: 352 folds on
    the busiest, 11 units x 32 k folds). Dealt again: 86 units, 43 a core; 10 an array
    as a plain tile (1280 columns, all 4096 k) and 3 (384 columns) split four ways,
    1024 k each: 10 x 32 + 3 x 8 = 344 folds an array, 86 x 32 / 8 exactly. The split
    tile's k-step is the longest whole number of 128-row folds whose [k, 384] weights
    fit the [256, 1408] B buffer (896 rows), evened out: two steps of 512."""
    def fits(rows: int, width: int) -> bool:
        return rows * width <= 256 * 1408
    tail = balanced_tail(0, 11008, 4096, 2, 4, (256, 1408), 128, 128, fits)
    shares = ((0, 1024), (1024, 2048), (2048, 3072), (3072, 4096))
    assert tail == [
        TailTile(0, tuple(Lane((c, c + 1280), (0, 4096)) for c in (0, 1280, 2560, 3840)),
                 False, 256),
        TailTile(0, tuple(Lane((5120, 5504), ks) for ks in shares), True, 512),
        TailTile(1, tuple(Lane((c, c + 1280), (0, 4096))
                          for c in (5504, 6784, 8064, 9344)), False, 256),
        TailTile(1, tuple(Lane((10624, 11008), ks) for ks in shares), True, 512),
    ]
    for core in (0, 1):
        assert sum(t.folds(128, 128) for t in tail if t.core == core) == 344


def test_a_gemv_split_by_k_runs_its_arrays_the_hand_derived_cycles() -> None:
    """1 x 16 @ 16 x 20 (f32) on one core of TWO_ARRAYS: the tiling is one tile of
    ``nt`` 10 columns an array in k-steps of 4 (each array 3 column units of 4 x 4 k
    folds: 12 folds, 132 cycles). Dealt again: 5 units, 2 an array whole (a [4, 8]
    weight tile a step: 2 folds, 22 cycles, four steps) and the fifth (columns 16-20)
    split by K, rows 0-8 on the first array and 8-16 on the second ([8, 4]: 2 folds,
    22 cycles, in one step: 8 x 4 fits the 4 x 10 buffer, 12 x 4 does not): 10 folds,
    110 cycles an array; the vector unit adds the two partial sums. Numbers against
    torch."""
    tiling = choose_matmul_tiling(TWO_ARRAYS, 1, 1, 16, 20, DType.f32, DType.f32, 2, 2, 2,
                                  0, TWO_ARRAYS.core.scratchpad.size_bytes)
    assert (tiling.mt, tiling.kt, tiling.nt, tiling.arrays, tiling.a_resident) == \
        (1, 4, 10, 2, False)
    torch.manual_seed(0)
    a, b = torch.randn(1, 16), torch.randn(16, 20)
    compiled = compile_op(torch.ops.aten.mm.default, (a, b), {}, TWO_ARRAYS)
    (out,), result = compiled.run(a, b)
    torch.testing.assert_close(out, a @ b, rtol=1e-5, atol=1e-5)
    plain = [((4, 8), 22)] * 4
    assert _multiplies(result) == {"core0.mxu0": plain + [((8, 4), 22)],
                                   "core0.mxu1": plain + [((8, 4), 22)]}
    assert sum(isinstance(c.op, Binary) for c in result.program.commands) == 1


def test_int8_partial_sums_are_bit_exact_and_both_cores_even() -> None:
    """``torch._int_mm`` 1 x 32 @ 32 x 40 on TWO_ARRAYS: tiles of one 4-column unit an
    array (``nt`` 4, ``kt`` 32), dealt in turn: tiles 0, 2, 4 to core 0, 1 and 3 to
    core 1; int8 packs two k a PE (``rates.i8: 2``), so a [32, 4] tile is 16 k rows,
    4 folds, 44 cycles, and core 0's arrays would take 3 x 44 = 132 to core 1's 88.
    The last round (tile 4, two units) is dealt again: a unit a core, split by K (k
    rows 0-16 and 16-32 of 32: [16, 4], 2 folds, 22 cycles): every array 44 + 44 + 22 =
    110. The int32 partial sums add exactly: the result equals torch's."""
    torch.manual_seed(1)
    a = torch.randint(-128, 128, (1, 32), dtype=torch.int8)
    b = torch.randint(-128, 128, (32, 40), dtype=torch.int8)
    compiled = compile_op(torch.ops.aten._int_mm.default, (a, b), {}, TWO_ARRAYS)
    (out,), result = compiled.run(a, b)
    assert torch.equal(out, torch._int_mm(a, b))
    each = [((32, 4), 44), ((32, 4), 44), ((16, 4), 22)]
    assert _multiplies(result) == {f"core{c}.mxu{j}": each for c in (0, 1) for j in (0, 1)}
    assert sum(isinstance(c.op, Binary) for c in result.program.commands) == 2
