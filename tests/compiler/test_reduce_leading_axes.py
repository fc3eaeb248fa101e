"""Reductions over leading axes with a small kept innermost dim (wav2vec2's weight norm,
``vector_norm(v, dim=(0, 1))``): tiles cut the reduced axis and read whole rows, each
core accumulates its tiles' partial results and core 0 combines them; or, when nodes
after the reduction need the whole space, tiles cut the kept dim at whole DRAM runs.

Shapes are on ``tiny`` (2 cores, 64 KiB scratchpad, two buffer sets of 32 KiB, 16-byte
DRAM granule). A ``[256, 16, 8]`` f32 ``sum((0, 1))`` planned as before keeps dims 0
and 1 whole: ``[256, 16, w]`` is 16 KiB a column of width 1, so ``w = 1`` (4-byte runs
that DRAM charges 16) and a granule-wide ``w = 4`` (64 KiB) does not fit.

Tolerances: f32 sums differ from torch's only in their order (rtol 1e-5); bf16
results within the helpers' 2e-2 (each tile's partial is rounded to bf16, as a
multi-axis reduction's intermediates are); max and min exactly.
"""

from __future__ import annotations

import torch

from compiler import compile_graph
from compiler.compile import CompiledProgram
from compiler.emit import DramView
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.ir.ops import Binary, BinaryKind, Copy, Load, Reduce, Store, VCopy
from compiler.kernels.vector_tiles import Access, DmaCost, dma_cycles, granule_aligned
from compiler_helpers import config, tolerance


class _Fn(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def _compiled(fn, x: torch.Tensor, preset: str = "tiny") -> tuple[CompiledProgram, torch.Tensor]:
    model = _Fn(fn).eval()
    exported = torch.export.export(model, (x,)).run_decompositions()
    compiled = compile_graph(exported, config(preset))
    (out,), _ = compiled.run(x)
    return compiled, out


def _x_loads(compiled: CompiledProgram) -> list[tuple[str, tuple[tuple[int, int], ...]]]:
    """(engine's core, DRAM box) of every load of the input ``x``."""
    out = []
    for cmd in compiled.program.commands:
        if isinstance(cmd.op, Load) and cmd.op.src.tensor == "x":
            box = tuple((s.start, s.stop) for s in cmd.op.src.slices)
            out.append((cmd.engine.split(".")[0], box))
    return out


def _kinds(compiled: CompiledProgram, core: str) -> list[str]:
    """What ``core`` does, in program order: vector ops by kind and axis, DMA by
    direction."""
    out = []
    for cmd in compiled.program.commands:
        if not cmd.engine.startswith(core + "."):
            continue
        op = cmd.op
        if isinstance(op, Reduce):
            out.append(f"reduce{op.axis}")
        elif isinstance(op, Binary):
            out.append(op.kind.value)
        elif isinstance(op, VCopy):
            out.append("vcopy")
        elif isinstance(op, (Load, Store, Copy)):
            into = isinstance(op.dst, SramRef) and op.dst.space.startswith("sram")
            out.append("in" if into else "out")  # a core's scratchpad is sramN
        else:
            out.append(type(op).__name__.lower())
    return out


def test_a_sum_over_leading_axes_reads_whole_rows_and_combines_partials() -> None:
    torch.manual_seed(0)
    x = torch.randn(256, 16, 8)
    compiled, out = _compiled(lambda x: x.sum((0, 1), keepdim=True), x)
    torch.testing.assert_close(out, x.sum((0, 1), keepdim=True), rtol=1e-5, atol=1e-4)
    # A tile [r, 16, 8] needs r * 512 B for x, 128 B for its [1, 1, 8] partial and
    # 1088 B of scratch (two [1, 16, 8] intermediates), each buffer padded by 64: 512 r
    # + 1280 B. A set's budget is half the scratchpad less core 0's combine buffers
    # (five aligned ones and 6 x 64 B slack: 672 B): (65536 - 672) // 2 = 32432, so
    # r = 60; shorter tiles would be under the 32 KiB worth spreading, so no evening.
    rows = [(0, 60), (60, 120), (120, 180), (180, 240), (240, 256)]
    assert _x_loads(compiled) == [(f"core{i % 2}", (r, (0, 16), (0, 8)))
                                  for i, r in enumerate(rows)]
    loaded = sum((hi - lo) * 16 * 8 * 4 for _, ((lo, hi), _, _) in _x_loads(compiled))
    assert loaded == x.numel() * 4  # every element once, in whole rows
    # core 0: tiles 0, 2, 4 (the first starts the accumulator, the others add to it),
    # its accumulator out; then the combine: both accumulators in (its fourth input),
    # reduced over the cores, copied to the result's buffer, stored
    core0 = _kinds(compiled, "core0")
    assert [k for k in core0 if k != "in"] == [
        "reduce0", "reduce1", "vcopy", "reduce0", "reduce1", "add",
        "reduce0", "reduce1", "add", "out", "reduce0", "vcopy", "out"]
    assert core0.count("in") == 4 and core0[-4:] == ["in", "reduce0", "vcopy", "out"]
    core1 = _kinds(compiled, "core1")
    assert [k for k in core1 if k != "in"] == [
        "reduce0", "reduce1", "vcopy", "reduce0", "reduce1", "add", "out"]
    assert core1.count("in") == 2
    assert "sum_1" in compiled.choices


def test_the_accumulator_adds_each_partial_in_place() -> None:
    x = torch.randn(256, 16, 8)
    compiled, _ = _compiled(lambda x: x.sum((0, 1), keepdim=True), x)
    adds = [c.op for c in compiled.program.commands if isinstance(c.op, Binary)]
    assert [a.kind for a in adds] == [BinaryKind.add] * 3  # tiles 2, 3 and 4
    for add in adds:
        assert add.a == add.dst and add.dst.shape == (1, 8)


def test_mean_divides_the_combined_sum_by_the_count() -> None:
    torch.manual_seed(1)
    x = torch.randn(256, 16, 8) + 3.0
    compiled, out = _compiled(lambda x: x.mean((0, 1)), x)
    torch.testing.assert_close(out, x.mean((0, 1)), rtol=1e-5, atol=1e-6)
    divides = [c.op for c in compiled.program.commands
               if isinstance(c.op, Binary) and c.op.kind is BinaryKind.div]
    assert len(divides) == 1 and divides[0].b.value == 256 * 16


def test_max_and_min_combine_exactly() -> None:
    torch.manual_seed(2)
    x = torch.randn(256, 16, 8)
    for fn, kind in ((lambda x: x.amax((0, 1)), BinaryKind.max),
                     (lambda x: x.amin((0, 1), keepdim=True), BinaryKind.min)):
        compiled, out = _compiled(fn, x)
        assert torch.equal(out, fn(x))
        assert {c.op.kind for c in compiled.program.commands
                if isinstance(c.op, Binary)} == {kind}


def test_a_bf16_norm_accumulates_in_float32() -> None:
    torch.manual_seed(3)
    x = torch.randn(256, 16, 8, dtype=torch.bfloat16)
    fn = lambda x: torch.linalg.vector_norm(x, 2, dim=(0, 1), keepdim=True)  # noqa: E731
    compiled, out = _compiled(fn, x)
    torch.testing.assert_close(out, fn(x), **tolerance(torch.bfloat16))
    adds = [c.op for c in compiled.program.commands if isinstance(c.op, Binary)]
    assert adds and all(a.dst.dtype.value == "f32" for a in adds)
    assert "linalg_vector_norm" in compiled.choices


def test_a_scaling_by_the_norm_cuts_the_kept_dim_at_whole_runs() -> None:
    # x * (2 / norm): the scaling needs the whole space after the reduction, so tiles
    # keep dims 0 and 1 whole. [64, 16, w] f32 with its square and the scaled result
    # is 12 KiB a column: a 32 KiB buffer set holds 2 columns (8-byte runs, charged
    # 16; before, with the reduction's scratch a copy of x, 1). Four columns (16 bytes,
    # the granule) are 48 KiB: one buffer set, a tile a core.
    torch.manual_seed(4)
    x = torch.randn(64, 16, 8)
    fn = lambda x: x * (2.0 / torch.linalg.vector_norm(x, 2, dim=(0, 1), keepdim=True))  # noqa: E731,E501
    compiled, out = _compiled(fn, x)
    torch.testing.assert_close(out, fn(x), rtol=1e-5, atol=1e-6)
    assert _x_loads(compiled) == [("core0", ((0, 64), (0, 16), (0, 4))),
                                  ("core1", ((0, 64), (0, 16), (4, 8)))]
    assert "1 buffer set" in compiled.choices["linalg_vector_norm"]


def test_a_reduction_over_the_last_axis_keeps_its_tiles() -> None:
    # rows of a LayerNorm or a softmax are whole runs already: nothing to split
    x = torch.randn(64, 256)
    compiled, out = _compiled(lambda x: x.sum(-1, keepdim=True), x)
    torch.testing.assert_close(out, x.sum(-1, keepdim=True), rtol=1e-5, atol=1e-4)
    assert dict(compiled.choices) == {}
    assert all(box[1] == (0, 256) for _, box in _x_loads(compiled))


def test_a_sum_of_everything_larger_than_the_scratchpad_compiles() -> None:
    # [1024, 256] f32 is 1 MiB; tiny's 64 KiB scratchpad cannot keep both axes whole
    # (this raised CapacityError). A tile [r, 256] takes r KiB for x, 2 KiB of scratch
    # (two [1, 256] partials) and its [1, 1] result, each buffer padded by 64 B: 1024 r
    # + 2304 B, within (65536 - 644) // 2 B (core 0's combine buffers take 644 B):
    # r = 29, 36 tiles over the 2 cores.
    torch.manual_seed(5)
    x = torch.randn(1024, 256)
    compiled, out = _compiled(lambda x: x.sum(), x)
    want = x.double().sum()
    assert abs(out.double() - want) <= 1e-6 * x.double().abs().sum()
    loads = _x_loads(compiled)
    assert len(loads) == -(-1024 // 29)
    assert all(box[1] == (0, 256) for _, box in loads)
    assert sum(hi - lo for _, ((lo, hi), _) in loads) == 1024


def test_a_cut_ending_mid_granule_is_shortened_to_whole_granules() -> None:
    # [768, 48, 128] f32 read in tiles [192, 48, 22]: 22 columns are 88-byte runs that
    # a 32-byte granule charges as 96 (the last tile's 18 columns, 72 bytes, too), in
    # 24 tiles: 768 * 48 * 576 B. Tiles of 16 columns are 64-byte runs, 768 * 48 * 512
    # B in 32 tiles; at 32 B a cycle and 10 cycles a command that is 589,824 + 320
    # cycles against 663,552 + 240.
    view = DramView("v", (768, 48, 128), (768, 48, 128), DType.f32)
    access = Access(view, lambda box: box, lambda d: d)
    cost = DmaCost(bytes_per_cycle=32, granule_bytes=32, command_cycles=10,
                   core_bytes_per_cycle=16, tile_cycles=100)
    space = (768, 48, 128)
    assert dma_cycles(space, (192, 48, 22), [access], cost)[0] == 663_552 + 240
    assert dma_cycles(space, (192, 48, 16), [access], cost)[0] == 589_824 + 320
    assert granule_aligned(space, (192, 48, 22), [access], cost) == (192, 48, 16)
    assert granule_aligned(space, (192, 48, 24), [access], cost) == (192, 48, 24)
    # a cut of an outer dim leaves whole rows: nothing to align
    assert granule_aligned(space, (192, 20, 128), [access], cost) == (192, 20, 128)


class _Two(torch.nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.sqrt((x * x).mean((0, 1))) * w, torch.exp(x)


def test_nodes_before_and_after_the_reduction_run_on_tiles_and_on_the_result() -> None:
    # exp(x) and x * x are made tile by tile (exp(x) stored by each); sqrt and the
    # scaling by w (loaded once, on core 0) run on the combined mean
    torch.manual_seed(6)
    x, w = torch.randn(256, 16, 8), torch.rand(8) + 0.5
    model = _Two().eval()
    exported = torch.export.export(model, (x, w)).run_decompositions()
    compiled = compile_graph(exported, config("tiny"))
    (scaled, exp), _ = compiled.run(x, w)
    want_scaled, want_exp = model(x, w)
    torch.testing.assert_close(scaled, want_scaled, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(exp, want_exp, rtol=1e-5, atol=1e-6)
    assert any("along the reduced axes" in c for c in compiled.choices.values())
    w_loads = [c for c in compiled.program.commands
               if isinstance(c.op, Load) and c.op.src.tensor == "w"]
    assert [c.engine.split(".")[0] for c in w_loads] == ["core0"]


def test_the_kernel_takes_the_granule_aligned_tile(monkeypatch) -> None:
    # lower_vector_kernel must use granule_aligned's answer: stand in one that halves
    # the rows of the planned tile, and the loads follow it
    from compiler.compile import clear_cache
    from compiler.kernels import vector

    seen = []

    def halved(space, tile, accesses, cost):
        seen.append(tile)
        return (tile[0] // 2,) + tile[1:]

    monkeypatch.setattr(vector, "granule_aligned", halved)
    clear_cache()
    x = torch.randn(64, 256)
    compiled, out = _compiled(lambda x: x.sum(-1, keepdim=True), x)
    clear_cache()
    torch.testing.assert_close(out, x.sum(-1, keepdim=True), rtol=1e-5, atol=1e-4)
    (planned,) = seen
    rows = {box[0][1] - box[0][0] for _, box in _x_loads(compiled)}
    assert max(rows) == planned[0] // 2
