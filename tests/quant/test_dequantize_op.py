"""The vector unit's dequantization command (IR ``dequantize``, issue 30's ``vector``
placement): its numbers against torch, its cycles by hand and its verifier errors.

On ``tiny`` the vector unit has 4 lanes, a pipeline latency of 2 and elementwise ops
at one cycle an element a lane: a ``dequantize`` of ``k x n`` weights takes
``2 + passes * k * n / 4`` cycles, with 5 passes a weight for packed int4 (a byte's two
nibbles split, half an op a weight each; widened; scaled; the zero added; rounded) and
3 for one-byte values (widened, scaled, rounded)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from archsim.config import load_config
from archsim.simulator import Simulator
from compiler.ir import Dequant, Dequantize, DType, Load, SramRef, Store
from compiler.ir.builder import ProgramBuilder
from compiler.ir.text import parse_program
from compiler.ir.verify import find_problems

TINY = load_config("tiny")


def run_dequantize(stored: np.ndarray, scales: np.ndarray, dequant: Dequant,
                   shape: tuple[int, int], dtype: DType):
    b = ProgramBuilder("dq")
    stored_dtype = DType.u8 if dequant.nibbles else DType.i8
    b.tensor("w", stored.shape, stored_dtype, "in")
    b.tensor("s", scales.shape, DType.f32, "in")
    b.tensor("o", shape, dtype, "out")
    w = SramRef("sram0", 0, stored.shape, stored_dtype)
    s = SramRef("sram0", 256, scales.shape, DType.f32)
    o = SramRef("sram0", 1024, shape, dtype)
    b.add("core0.dma0", Load(b.ref("w"), w))
    b.add("core0.dma1", Load(b.ref("s"), s))
    b.add("core0.vpu", Dequantize(w, s, o, dequant), [0, 1])
    b.add("core0.dma0", Store(o, b.ref("o")), [2])
    result = Simulator(TINY).run(b.build(), {"w": stored, "s": scales})
    vpu = next(e for e in result.trace if e.engine == "core0.vpu")
    return np.asarray(result.outputs["o"]), vpu.end - vpu.start


def test_one_byte_weights_scaled_per_column_rounded_once() -> None:
    torch.manual_seed(0)
    w = torch.randint(-128, 128, (4, 8), dtype=torch.int8)
    scale = torch.rand(8) + 0.5
    out, cycles = run_dequantize(w.numpy(), scale.reshape(1, 8, 1).numpy(),
                                 Dequant(4, 0, ""), (4, 8), DType.bf16)
    expected = (w.float() * scale).to(torch.bfloat16)
    assert torch.equal(torch.from_numpy(out.astype(np.float32)).to(torch.bfloat16), expected)
    assert cycles == 2 + 3 * 32 // 4


def test_packed_int4_codes_with_scale_and_zero_per_group() -> None:
    # pairs: column 2c in the low nibble of byte c, 2c + 1 in the high one; k = 4 rows
    # in two groups of 2; value (code - 8) * scale + zero
    torch.manual_seed(1)
    codes = torch.randint(0, 16, (4, 8))
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)  # [k, 4]
    planes = torch.rand(2, 8, 2)
    out, cycles = run_dequantize(packed.reshape(1, 4, 4).numpy(), planes.numpy(),
                                 Dequant(2, 0, "pairs"), (4, 8), DType.f32)
    rows = torch.arange(4) // 2
    expected = (codes.float() - 8) * planes[rows, :, 0] + planes[rows, :, 1]
    torch.testing.assert_close(torch.from_numpy(out), expected, rtol=0, atol=0)
    assert cycles == 2 + 5 * 32 // 4


@pytest.mark.parametrize(("op", "expected"), [
    ("dequantize sram0[0x0] i8[4,8], sram0[0x100] f32[1,8,1] -> sram0[0x400] i32[4,8] "
     "group=4 phase=0 bytes",
     "field dst: dequantized weights are a float [k, n] tile, got i32[4,8]"),
    ("dequantize sram0[0x0] i8[4,4], sram0[0x100] f32[1,8,1] -> sram0[0x400] f32[4,8] "
     "group=4 phase=0 bytes",
     "field src: shape i8[4,4] does not match dst's [4,8]"),
    ("dequantize sram0[0x0] u8[1,4,2], sram0[0x100] f32[2,8,2] -> sram0[0x400] f32[4,8] "
     "group=2 phase=0 pairs",
     "field src: packed int4 weights of a [4,8] tile are bytes [blocks, 4, block/2] of 8 "
     "columns in all, got u8[1,4,2]"),
    ("dequantize sram0[0x0] u8[1,4,4], sram0[0x100] f32[1,8,2] -> sram0[0x400] f32[4,8] "
     "group=2 phase=0 pairs",
     "field scales: f32[1,8,2] should be float [2,8,1] or [2,8,2] (a scale, and a zero, "
     "per group of 2 k rows and column)"),
    ("dequantize sram0[0x0] f32[4,8], sram0[0x100] f32[1,8,1] -> sram0[0x400] f32[4,8] "
     "group=4 phase=0 bytes",
     "field b: dequantized weights are one-byte values (i8, e4m3, e5m2), got f32"),
])
def test_verifier_errors(op: str, expected: str) -> None:
    program = parse_program(f"program p target=tiny\n0: core0.vpu {op}\n")
    assert [p.split(": ", 1)[1] for p in find_problems(program, TINY)] == [expected]
