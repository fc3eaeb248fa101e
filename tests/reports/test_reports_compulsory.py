"""DRAM bytes against compulsory traffic (reports.compulsory, the op table's DRAM/min)."""

from __future__ import annotations

import json
from collections import Counter

import torch

from archsim.config import load_config
from compiler import compile_op
from compiler.ir.operands import Slice
from compiler.ir.ops import Load
from reports.compulsory import union_elements
from reports.json_report import from_json, to_json
from reports.ops import op_rows, op_table

F32 = 4


def _mm(preset: str, m: int, k: int, n: int):
    torch.manual_seed(0)
    a, b = torch.randn(m, k), torch.randn(k, n)
    compiled = compile_op(torch.ops.aten.mm.default, (a, b), {}, load_config(preset))
    (out,), result = compiled.run(a, b)
    torch.testing.assert_close(out, a @ b, rtol=1e-4, atol=1e-4)
    loads = Counter((c.op.src.tensor, c.op.src.slices) for c in compiled.program.commands
                    if isinstance(c.op, Load))
    (row,) = op_rows(result)
    return row, loads, result


def test_union_of_overlapping_and_strided_boxes():
    full = (Slice(0, 8), Slice(0, 8))
    assert union_elements((8, 8), [full, full]) == 64
    # Two 4x6 boxes overlapping in a 4x2 band: 24 + 24 - 8.
    assert union_elements((8, 8), [(Slice(0, 4), Slice(0, 6)), (Slice(0, 4), Slice(4, 8)),
                                   (Slice(0, 4), Slice(0, 6))]) == 32
    # Rows 0,2,4,6 and rows 0..2: {0,1,2,4,6} x 3 columns.
    assert union_elements((8, 3), [(Slice(0, 8, 2), Slice(0, 3)),
                                   (Slice(0, 3), Slice(0, 3))]) == 15
    assert union_elements((8, 3), [(Slice(0, 0), Slice(0, 3))]) == 0


def test_gemm_that_fits_moves_only_compulsory_bytes():
    # edge (one core): 16x64 @ 64x16 in 16x16 tiles of A and B, each loaded once.
    row, loads, _ = _mm("edge", 16, 64, 16)
    assert set(loads.values()) == {1}
    assert row.compulsory_bytes == (16 * 64 + 64 * 16 + 16 * 16) * F32
    assert row.dram_bytes == row.compulsory_bytes
    assert row.dram_over_compulsory == 1.0


def test_tiled_gemm_rereads_a_once_per_column_panel():
    # tiny: 64x64 @ 64x64; A goes in as 64x8 k-strips, B as 8x8 tiles. Each of the
    # 8 A strips is loaded once per panel of output columns: 2 panels, so A is read
    # twice, B once, C written once (rows of 32 bytes: whole 16-byte DRAM granules).
    row, loads, result = _mm("tiny", 64, 64, 64)
    a_loads = {s: n for (t, s), n in loads.items() if t == "arg0"}
    assert len(a_loads) == 8 and set(a_loads.values()) == {2}
    assert set(n for (t, _), n in loads.items() if t == "arg1") == {1}
    tensor = 64 * 64 * F32
    assert row.compulsory_bytes == 3 * tensor
    assert row.dram_bytes == 2 * tensor + tensor + tensor
    assert row.dram_over_compulsory == 4 / 3
    assert "1.33x" in op_table(result)
    assert max(len(line) for line in op_table(result).splitlines()) <= 100


def test_json_ops_rows_carry_the_ratio_and_read_back():
    _, _, result = _mm("tiny", 64, 64, 64)
    document = json.loads(json.dumps(to_json(result)))
    (op,) = document["ops"]
    assert (op["compulsory_bytes"], op["dram_over_compulsory"]) == (3 * 64 * 64 * F32, 4 / 3)
    assert op_rows(from_json(document)) == op_rows(result)


def test_embedding_must_read_the_rows_it_gathers_not_its_whole_table():
    # 8 of a 1000x16 f32 table's rows by i64 indices: compulsory is the 8 rows, the
    # indices and the 8x16 output, each once (the whole table would be 64,000 bytes,
    # and DRAM/min would read 0.01x: fewer bytes moved than "must" be).
    torch.manual_seed(0)
    table, ids = torch.randn(1000, 16), torch.randint(0, 1000, (8,))
    compiled = compile_op(torch.ops.aten.embedding.default, (table, ids), {},
                          load_config("tiny"))
    (out,), result = compiled.run(table, ids)
    torch.testing.assert_close(out, table[ids])
    (row,) = op_rows(result)
    assert row.compulsory_bytes == 8 * 16 * F32 + 8 * 8 + 8 * 16 * F32
