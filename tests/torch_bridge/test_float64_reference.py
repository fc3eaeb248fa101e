"""Weight-only quantized matmuls have a float64 reference
(:mod:`torch_bridge.float64_reference`): a float32 result off by a sum order is told
apart from a wrong number, as for every other op."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from archsim.cli.main import main
from archsim.errors import NumericsError
from torch_bridge import float64_reference as float64_reference_module
from torch_bridge.float64_reference import float64_reference, int4_codes
from torch_bridge.numerics import check_close

aten = torch.ops.aten

HEAD = '''import torch
aten = torch.ops.aten
torch.manual_seed(0)
n, k, group = {n}, {k}, 64


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        codes = torch.randint(0, 16, (n, k), dtype=torch.int32)
        self.register_buffer("packed", aten._convert_weight_to_int4pack_for_cpu(codes, 1))
        scales = torch.rand(k // group, n) * 0.02 + 0.01
        self.register_buffer("sz", torch.stack([scales, torch.randn(k // group, n) * 0.05],
                                               -1).contiguous())

    def forward(self, x):
        return aten._weight_int4pack_mm_for_cpu(x, self.packed, group, self.sz)


model = Head()
example_inputs = (torch.randn(1, k),)
'''


def _int4(n: int, k: int, group: int):
    torch.manual_seed(1)
    codes = torch.randint(0, 16, (n, k), dtype=torch.int32)
    packed = aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    scales = torch.rand(k // group, n) * 0.02 + 0.01
    zeros = torch.randn(k // group, n) * 0.05
    return codes, packed, scales, zeros, torch.stack([scales, zeros], -1).contiguous()


@pytest.mark.parametrize("n", [64, 96, 80])  # whole blocks; and a partial last one
def test_the_codes_come_back_from_the_packed_bytes(n: int) -> None:
    codes, packed, *_ = _int4(n, 256, 64)
    assert torch.equal(int4_codes(packed, 256), codes)


def test_int4_in_float64_is_the_dequantized_weights_times_x() -> None:
    n, k, group = 48, 256, 64
    codes, packed, scales, zeros, sz = _int4(n, k, group)
    s = scales.double().t().repeat_interleave(group, 1)
    z = zeros.double().t().repeat_interleave(group, 1)
    w = (codes.double() - 8) * s + z  # torchao's int4: (code - 8) * scale + zero
    x = torch.randn(3, k, dtype=torch.float64)
    with float64_reference():
        out = aten._weight_int4pack_mm_for_cpu(x, packed, group, sz.double())
    assert out.dtype is torch.float64
    torch.testing.assert_close(out, x @ w.t(), rtol=1e-12, atol=1e-12)
    # and torch's float32 kernel is within float32 rounding of it
    torch.testing.assert_close(aten._weight_int4pack_mm_for_cpu(x.float(), packed, group, sz),
                               out.float(), rtol=1e-4, atol=1e-4)


def test_int8_in_float64() -> None:
    w = torch.randint(-128, 128, (16, 40), dtype=torch.int8)
    scales, x = torch.rand(16, dtype=torch.float64), torch.randn(2, 40, dtype=torch.float64)
    with float64_reference():
        out = aten._weight_int8pack_mm(x, w, scales)
    torch.testing.assert_close(out, (x @ w.double().t()) * scales, rtol=1e-12, atol=1e-12)


def test_other_ops_and_narrower_activations_run_as_they_are() -> None:
    _, packed, _, _, sz = _int4(16, 64, 32)
    x = torch.randn(2, 64)
    with float64_reference():
        total = torch.add(x.double(), 1.0)  # an op without a rule, in float64
        narrow = aten._weight_int4pack_mm_for_cpu(x, packed, 32, sz)  # float32: torch's
    assert torch.equal(total, x.double() + 1.0)
    assert narrow.dtype is torch.float32
    assert torch.equal(narrow, aten._weight_int4pack_mm_for_cpu(x, packed, 32, sz))


def test_without_it_torch_has_no_float64_kernel() -> None:
    _, packed, _, _, sz = _int4(16, 64, 32)
    with pytest.raises(RuntimeError, match="expect A to be either 32-bit or 16-bit float"):
        aten._weight_int4pack_mm_for_cpu(torch.randn(1, 64, dtype=torch.float64), packed, 32,
                                         sz.double())


def test_a_wrong_number_is_still_refused() -> None:
    n, k, group = 32, 256, 64
    _, packed, _, _, sz = _int4(n, k, group)
    x = torch.randn(2, k)
    want = aten._weight_int4pack_mm_for_cpu(x, packed, group, sz)
    wrong = want * 1.001
    with pytest.raises(NumericsError, match=r"output 0: max \|npu - torch cpu\|"):
        check_close((wrong,), (want,), lambda: (aten._weight_int4pack_mm_for_cpu(
            x.double(), packed, group, sz.double()),))


def test_a_decoding_table_wrong_for_program_and_reference_alike_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the reference reads the compiler's CPU packing table; flipped, its result and a
    # program built on it agree with each other and not with torch: still an error
    n, k, group = 128, 256, 64
    _, packed, _, _, sz = _int4(n, k, group)
    x = torch.randn(4, k)
    want = aten._weight_int4pack_mm_for_cpu(x, packed, group, sz)
    right = float64_reference_module.cpu_layout()
    monkeypatch.setattr(float64_reference_module, "cpu_layout", lambda: type(right)(
        right.block_rows, not right.halves))
    with float64_reference():
        decoded = float64_reference_module._int4_mm(x.double(), packed, group, sz.double())
    assert float((decoded.float() - want).abs().max()) > 0.5  # the wrong table's numbers
    with pytest.raises(NumericsError, match=r"output 0: max \|npu - torch cpu\|"):
        check_close((decoded.float(),), (want,), lambda: (aten._weight_int4pack_mm_for_cpu(
            x.double(), packed, group, sz.double()),))


def test_a_float32_int4_head_runs_against_cpu(tmp_path: Path, capsys) -> None:
    # 4,224 x 2,048: the schedule's sum order is 1.4x over float32's tolerance from torch
    # (2.96e-05 against 2.11e-05) and as close to float64 as torch is: it ran, then
    # stopped with a NumericsError
    path = tmp_path / "head.py"
    path.write_text(HEAD.format(n=4224, k=2048))
    assert main(["run", str(path)]) == 0
    captured = capsys.readouterr()
    # (here 2.96e-05 against a 2.11e-05 tolerance; the figure is this CPU's sum order)
    assert re.search(r"numerics: max \|npu - torch cpu\| = [0-9.e+-]+ over 1 output",
                     captured.out + captured.err)
